"""Per-architecture exceptions for ``arch:<model_type>`` (read by :mod:`bakeoff.workload.tiny`).

Measured with ``benchmarks/arch_coverage.py`` on transformers 5.24.0; rerun it after an upgrade.
Kept as a Python module (plain data) so it ships with the package like any other source file.
"""

from __future__ import annotations

__all__ = ["EXPECTED_FAILURES", "EXTRA_INPUTS", "OVERRIDES", "TREE"]

#: Types that do not run with the standard names (hidden_size, num_hidden_layers, ...) and are
#: built by shrinking the whole config tree instead. Types not listed keep the standard shrink,
#: and with it their configs, weights and fingerprints.
TREE = frozenset(
    {
        *("axk1", "axk2", "bamba", "blt", "codegen", "cohere_compass_text", "dbrx", "deepseek_v2"),
        *("deepseek_v3", "deepseek_v32", "dots1", "dots3_note", "dots3_note_text", "gemma3n"),
        *("gemma3n_text", "gemma4", "gemma4_assistant", "gemma4_text", "gemma4_unified"),
        *("gemma4_unified_assistant", "gemma4_unified_text", "glm4_moe_lite", "glm_moe_dsa", "gptj"),
        *("granitemoehybrid", "hunyuan_v1_dense", "hunyuan_v1_moe", "hy_v4", "lfm2_moe", "longcat_flash"),
        *("mamba2", "minicpm3", "ministral", "musicgen", "musicgen_melody", "nemotron", "prophetnet"),
        *("reformer", "sarvam_mla", "xlnet", "xlstm", "xmod", "youtu", "zamba2"),
    }
)

#: model type -> {dotted config path: value}: sizes that must agree beyond the name families.
OVERRIDES: dict[str, dict[str, object]] = {
    "deepseek_v2": {"num_experts_per_tok": 2},  # None by default: the router's top-k
    "nemotron": {"num_key_value_heads": 2},  # None by default, and the attention divides by it
    "gemma3n_text": {"num_kv_shared_layers": 0},  # the last 15 layers share caches: none left in 2
    "gemma3n": {"text_config.num_kv_shared_layers": 0},
    "lfm2_moe": {"layer_types": ["conv", "full_attention"]},  # None by default
    "zamba2": {"attention_hidden_size": 128, "attention_head_dim": 32},  # 2 x hidden, 2 x hidden / heads
    "dots3_note_text": {"head_dim": 16},  # sliding-window layers: head_dim = qk_nope + qk_rope
    "dots3_note": {"text_config.head_dim": 16},
    "reformer": {"axial_pos_embds_dim": [32, 32], "axial_pos_shape": [16, 32]},  # sum = hidden, product = positions
}

#: model type -> {keyword: integer}: inputs beside token ids, one value per batch row.
EXTRA_INPUTS: dict[str, dict[str, int]] = {
    "xmod": {"lang_ids": 0},  # which language adapter each row uses
}

#: model type -> why it does not build or run (one line). Still attempted when asked for.
EXPECTED_FAILURES: dict[str, str] = {
    "cohere_compass_text": "default config broken upstream: empty rope_parameters (KeyError 'full_attention')",
    "dbrx": "default config broken upstream: DbrxAttentionConfig has no rope_theta",
    "dots1": "default config broken upstream: the model raises TypeError (empty() takes 1 positional argument)",
    "dots3_note": "composite config: its vision/audio adapter sizes are not aligned (dots3_note_text builds)",
    "gemma3n": "needs packages timm and pillow (its vision tower)",
    "gemma4_assistant": "default config broken upstream: hidden_size_per_layer_input must be 0, got 256",
    "gemma4_unified_assistant": "default config broken upstream: its layers use a cache no layer type produces",
    "musicgen": "default config broken upstream: MusicgenConfig has no dropout attribute",
    "musicgen_melody": "default config broken upstream: MusicgenMelodyConfig has no dropout attribute",
}
