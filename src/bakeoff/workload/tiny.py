"""Shrink a whole config tree by name families, for architectures the standard names miss.

``arch:`` first shrinks a config by setting the standard attribute names (``hidden_size``,
``num_hidden_layers``, ...; :func:`bakeoff.workload.hf._shrink_config`). About 40 of the ~200
causal-LM types in transformers do not run that way: their sizes live under other names
(``d_model``, ``n_embd``, ``mamba_headdim``), in nested configs, or in families whose sizes must
agree (MLA attention, partial rotary, SSM heads, MoE groups, per-layer lists). For those, listed in
``arch_exceptions`` (``tree``), this module rewrites the config's whole ``to_dict()`` tree by
name families and rebuilds it through the config class's constructor, so derived fields are
computed again from the small sizes.

The table is data measured by ``benchmarks/arch_coverage.py``: types that run with the standard
shrink keep it, and with it their configs, weights and fingerprints.
"""

from __future__ import annotations

from typing import Any

from bakeoff.workload import arch_exceptions

__all__ = ["extra_inputs", "known_failure", "known_failures", "tree_config", "uses_tree"]

HIDDEN = (
    "hidden_size",
    "d_model",
    "n_embd",
    "dim",
    "embed_dim",
    "emb_dim",
    "model_dim",
    "word_embed_proj_dim",
    "embedding_dim",
    "hidden_size_global",
    "adapter_in_dim",
)
LAYERS = (
    "num_hidden_layers",
    "n_layer",
    "n_layers",
    "num_layers",
    "encoder_layers",
    "decoder_layers",
    "num_encoder_layers",
    "num_decoder_layers",
    "num_blocks",
)
HEADS = ("num_attention_heads", "n_head", "n_heads", "encoder_attention_heads", "decoder_attention_heads")
KV_HEADS = ("num_key_value_heads", "n_kv_heads", "num_kv_heads", "num_query_groups", "multi_query_group_num")
HEAD_DIMS = ("head_dim", "d_kv", "d_head", "kv_channels", "attention_head_dim", "v_head_dim")
INTERMEDIATE = (
    "intermediate_size",
    "ffn_dim",
    "d_ff",
    "n_inner",
    "encoder_ffn_dim",
    "decoder_ffn_dim",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "shared_experts_intermediate_size",
    "intermediate_size_mlp",
    "ffn_hidden_size",
    "expert_intermediate_size",
    "expert_ffn_hidden_size",
)
EXPERTS = ("num_local_experts", "n_routed_experts", "num_experts", "zero_expert_num")
TOP_K = ("num_experts_per_tok", "top_k", "moe_topk", "top_k_experts", "moe_top_k")
POSITIONS = ("max_position_embeddings", "n_positions", "n_ctx", "max_seq_len")
#: SSM (Mamba-2 style) names: heads x head dim must equal expand x hidden.
SSM_HEADS = ("mamba_n_heads", "n_mamba_heads")
SSM_HEAD_DIM = ("mamba_d_head", "mamba_headdim")
SSM_EXPAND = ("mamba_expand", "expand")
SSM_STATE = ("mamba_d_state", "state_size", "ssm_state_size", "d_state")
SSM_GROUPS = ("mamba_n_groups", "mamba_ngroups", "n_groups")
#: Per-layer lists: one entry per layer, kept for the layers chosen.
LAYER_LISTS = ("layer_types", "layers_block_type", "block_types", "mlp_layer_types")
EXPERTS_DEFAULT = 4
TOP_K_DEFAULT = 2


def uses_tree(model_type: str) -> bool:
    """Whether ``arch:<model_type>`` is built with the whole-tree shrink (the table says so)."""
    return model_type in arch_exceptions.TREE


def known_failures() -> dict[str, str]:
    """Model types known not to build or run, mapped to the reason (one line each)."""
    return dict(arch_exceptions.EXPECTED_FAILURES)


def known_failure(model_type: str) -> str | None:
    """Why ``arch:<model_type>`` is known to fail, or None when it is expected to work."""
    return arch_exceptions.EXPECTED_FAILURES.get(model_type)


def extra_inputs(model_type: str) -> dict[str, Any]:
    """Keyword inputs a type needs beside token ids (e.g. xmod's language ids), as plain values."""
    return dict(arch_exceptions.EXTRA_INPUTS.get(model_type, {}))


def overrides(model_type: str) -> dict[str, Any]:
    """Config values (dotted paths into the config tree) that make a type's sizes agree."""
    return dict(arch_exceptions.OVERRIDES.get(model_type, {}))


def tree_config(model_type: str, sizes: dict[str, int], explicit: set[str]) -> Any:
    """A small config for ``model_type``: its default ``to_dict()`` tree shrunk and rebuilt.

    Args:
        sizes: the arch: sizes (``hidden``, ``layers``, ``heads``, ``kv_heads``, ``intermediate``,
            ``vocab``, ``positions``).
        explicit: the sizes the user chose; a chosen layer count is kept even when it drops a
            block kind of a hybrid model.
    """
    from transformers import AutoConfig

    default = AutoConfig.for_model(model_type)
    data = default.to_dict()
    data.pop("transformers_version", None)
    _shrink_node(data, sizes, explicit)
    for path, value in overrides(model_type).items():
        _set_path(data, path, value)
    return type(default)(**data)


def _set_path(data: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node = data
    for key in parents:
        node = node[key]
    node[last] = value


def _set(node: dict[str, Any], keys: tuple[str, ...], value: Any, only_down: bool = False) -> None:
    for key in keys:
        current = node.get(key)
        if isinstance(current, list) and current and all(type(v) is int for v in current):  # one per layer
            node[key] = [min(v, value) if only_down else value for v in current]
            continue
        if isinstance(current, bool) or not isinstance(current, int):
            continue
        node[key] = min(current, value) if only_down else value


def _shrink_node(node: dict[str, Any], sizes: dict[str, int], explicit: set[str]) -> None:
    """Shrink one dict of the config tree in place, then every dict below it."""
    hidden, vocab = sizes["hidden"], sizes["vocab"]
    _set(node, HIDDEN, hidden)
    full = {k for k in KV_HEADS if node.get(k) is not None and node.get(k) == _first(node, HEADS)}
    _set(node, HEADS, sizes["heads"], only_down=True)
    heads = _first(node, HEADS) or sizes["heads"]
    kv = sizes["kv_heads"] if heads % sizes["kv_heads"] == 0 else heads
    _set(node, KV_HEADS, kv, only_down=True)
    for key in full:  # multi-head attention stays multi-head (some configs insist)
        node[key] = heads
    for key in KV_HEADS:  # min() may leave a count that does not divide the heads
        if isinstance(node.get(key), int) and heads % node[key]:
            node[key] = heads
    head_dim = max(hidden // heads, 2)
    for key in HEAD_DIMS:
        value = node.get(key, 0)
        if (value is None and key == "head_dim") or (isinstance(value, int) and not isinstance(value, bool) and value):
            node[key] = head_dim
    _set(node, INTERMEDIATE, sizes["intermediate"])
    _set(node, EXPERTS, EXPERTS_DEFAULT, only_down=True)
    _set(node, TOP_K, TOP_K_DEFAULT, only_down=True)
    _set(node, POSITIONS, sizes["positions"])
    for key, value in list(node.items()):
        if isinstance(key, str) and "vocab" in key and isinstance(value, int) and not isinstance(value, bool):
            node[key] = min(value, vocab)
    for key, value in list(node.items()):
        if isinstance(key, str) and key.endswith(("token_id", "token_ids")):
            if isinstance(value, int) and value >= vocab:
                node[key] = 0
            elif isinstance(value, list):
                node[key] = [v for v in value if not isinstance(v, int) or v < vocab] or 0
    _shrink_mla(node, head_dim)
    _shrink_ssm(node, hidden)
    _shrink_groups(node)
    if "rotary_dim" in node and isinstance(node["rotary_dim"], int):
        node["rotary_dim"] = max(2, min(node["rotary_dim"], head_dim) // 2 * 2)
    _shrink_layers(node, sizes, explicit)
    for key, value in node.items():
        if isinstance(value, dict) and key not in ("id2label", "label2id"):
            _shrink_node(value, sizes, explicit)


def _first(node: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    return next((node[k] for k in keys if type(node.get(k)) is int), None)


def _shrink_mla(node: dict[str, Any], head_dim: int) -> None:
    """Multi-head latent attention: ranks and the rope/nope split of the head dim agree."""
    if not isinstance(node.get("kv_lora_rank"), int):
        return
    node["kv_lora_rank"] = 16
    if isinstance(node.get("q_lora_rank"), int):
        node["q_lora_rank"] = 32
    rope = head_dim // 2
    _set(node, ("qk_rope_head_dim",), rope)
    _set(node, ("qk_nope_head_dim",), head_dim - rope)
    _set(node, ("v_head_dim",), head_dim)
    _set(node, ("qk_head_dim",), head_dim)
    if isinstance(node.get("qk_rope_head_dim"), int) and "head_dim" in node:
        node["head_dim"] = node["qk_rope_head_dim"]  # DeepSeek-style: head_dim is the rope part
    _set(node, ("index_head_dim",), head_dim)
    _set(node, ("index_n_heads",), 2, only_down=True)


def _shrink_ssm(node: dict[str, Any], hidden: int) -> None:
    """Mamba-2 heads: heads x head dim = expand x hidden; small state, one group."""
    expand = next((node[k] for k in SSM_EXPAND if isinstance(node.get(k), int)), None)
    heads_key = next((k for k in SSM_HEADS if k in node), None)
    dim_key = next((k for k in SSM_HEAD_DIM if k in node), None)
    if node.get("model_type") == "mamba2":
        heads_key, dim_key = "num_heads", "head_dim"
    if expand is None or heads_key is None or dim_key is None:
        return
    node[dim_key] = 16
    node[heads_key] = max(1, expand * hidden // 16)
    _set(node, SSM_STATE, 16, only_down=True)
    _set(node, SSM_GROUPS, 1, only_down=True)
    _set(node, ("chunk_size", "mamba_chunk_size"), 16, only_down=True)


def _shrink_groups(node: dict[str, Any]) -> None:
    """Grouped routing: experts divide into groups, and top-k groups fit."""
    groups = node.get("n_group")
    if not isinstance(groups, int) or groups <= 1:
        return
    experts = next((node[k] for k in EXPERTS if isinstance(node.get(k), int)), EXPERTS_DEFAULT)
    node["n_group"] = 2 if experts % 2 == 0 else 1
    _set(node, ("topk_group",), 1, only_down=True)


def _shrink_layers(node: dict[str, Any], sizes: dict[str, int], explicit: set[str]) -> None:
    """Keep a subset of the layers that has every block kind; per-layer data follows it."""
    count_key = next((k for k in LAYERS if isinstance(node.get(k), int) and not isinstance(node[k], bool)), None)
    if count_key is None:
        return
    original = node[count_key]
    kinds_lists = [k for k in LAYER_LISTS if isinstance(node.get(k), list) and len(node[k]) == original]
    pattern = node.get("hybrid_override_pattern")
    wanted = min(sizes["layers"], original)
    chosen = list(range(wanted))
    if kinds_lists or isinstance(pattern, str):
        sequence = node[kinds_lists[0]] if kinds_lists else list(pattern)
        first: dict[Any, int] = {}
        for index, kind in enumerate(sequence):
            first.setdefault(str(kind), index)
        keep = sorted(first.values())
        if "layers" not in explicit:
            wanted = max(wanted, len(keep))
        keep = keep[:wanted]
        rest = [i for i in range(len(sequence)) if i not in keep]
        chosen = sorted(keep + rest[: wanted - len(keep)])
    for key in LAYERS:
        if isinstance(node.get(key), int) and not isinstance(node[key], bool) and node[key] == original:
            node[key] = len(chosen)
    for key, value in list(node.items()):  # every other per-layer list follows the chosen layers
        if isinstance(value, list) and len(value) == original > 1 and "idx" not in str(key):
            if not (all(type(v) is int for v in value) and sorted(value) == list(range(original))):
                node[key] = [value[i] for i in chosen]
                kinds_lists.append(key)
    if isinstance(pattern, str) and len(pattern) == original:
        node["hybrid_override_pattern"] = "".join(pattern[i] for i in chosen)
    position = {old: new for new, old in enumerate(chosen)}
    for key, value in list(node.items()):
        if key in kinds_lists or not isinstance(value, list) or not value:
            continue
        if (
            isinstance(key, str)
            and ("layer" in key or "idx" in key)
            and all(type(v) is int for v in value)
            and 0 <= min(value)
        ):
            if max(value) < original:  # layer indices: keep the chosen ones, renumbered
                node[key] = [position[v] for v in value if v in position]
    per_layer = node.get("per_layer_config")
    if isinstance(per_layer, dict):
        node["per_layer_config"] = {
            f"{position[int(k)]:02d}": v for k, v in per_layer.items() if k.isdigit() and int(k) in position
        }
