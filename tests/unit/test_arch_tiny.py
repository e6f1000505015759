"""arch: types built by shrinking the whole config tree, and the per-type exception table."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig

from bakeoff.errors import WorkloadError
from bakeoff.workload import arch_exceptions, build_workload, list_architectures
from bakeoff.workload.tiny import extra_inputs, known_failure, known_failures, overrides, uses_tree


def _run_twice(spec: str):
    """Build, then the workload's own input and a second shape, as arch_coverage does."""
    workload = build_workload(spec)
    with torch.no_grad():
        first = workload()
        args, kwargs = workload.make_inputs(1, 8)
        second = workload.model(*args, **kwargs)
    return workload, first, second


@pytest.mark.parametrize(
    "model_type",
    [
        "deepseek_v3",  # MLA attention, and MoE with expert groups (n_group=8 by default)
        "glm_moe_dsa",  # MLA with an indexer
        "bamba",  # Mamba-2 / attention hybrid
        "zamba2",  # Mamba-2 with a shared attention block of its own width
        "codegen",  # partial rotary
        "gptj",  # partial rotary
        "gemma4_text",  # layer_types with per-layer config overrides
        "xmod",  # needs language ids beside the tokens
    ],
)
def test_formerly_failing_types_build_and_run(model_type: str) -> None:
    assert uses_tree(model_type)
    workload, first, second = _run_twice(f"arch:{model_type}")
    assert workload.details["shrink"] == "tree"
    assert workload.details["parameters"] < 2_000_000
    out, out2 = (o.logits if hasattr(o, "logits") else o.last_hidden_state for o in (first, second))
    assert out.shape[:2] == (1, 16)
    assert out2.shape[:2] == (1, 8)
    assert torch.isfinite(out).all()


def test_moe_groups_and_mla_sizes_agree() -> None:
    config = build_workload("arch:deepseek_v3").model.config
    assert config.n_routed_experts % config.n_group == 0
    assert config.topk_group <= config.n_group
    assert config.num_experts_per_tok <= config.n_routed_experts // config.n_group * config.topk_group
    assert config.qk_head_dim == config.qk_nope_head_dim + config.qk_rope_head_dim
    assert config.head_dim == config.qk_rope_head_dim


def test_layer_types_keep_every_block_kind() -> None:
    default = AutoConfig.for_model("gemma4_text")
    config = build_workload("arch:gemma4_text").model.config
    assert set(config.layer_types) == set(default.layer_types)
    assert len(config.layer_types) == config.num_hidden_layers


def test_partial_rotary_fits_the_head() -> None:
    config = build_workload("arch:codegen").model.config
    assert config.rotary_dim <= config.n_embd // config.n_head


def test_standard_types_keep_their_fingerprints() -> None:
    """The control: types the standard names shrink are built exactly as before."""
    llama = build_workload("arch:llama")
    assert llama.fingerprint == "3d3306cea8a1a055"
    assert llama.details["parameters"] == 205_120
    assert llama.details["shrink"] == "names"
    assert "transformers_version" not in llama.identity["config"]
    gpt2 = build_workload("arch:gpt2")
    assert gpt2.fingerprint == "2c6509571b7f0b0b"
    assert gpt2.details["parameters"] == 198_400


def test_transformers_version_in_details() -> None:
    import transformers

    assert build_workload("arch:llama").details["transformers"] == transformers.__version__


@pytest.mark.parametrize("model_type", sorted(known_failures()))
def test_every_expected_failure_fails_with_its_reason(model_type: str) -> None:
    reason = known_failure(model_type)
    assert reason
    with pytest.raises(Exception) as info:
        _run_twice(f"arch:{model_type}")
    if isinstance(info.value, WorkloadError):
        assert f"(known: {reason})" in str(info.value)


def test_known_failure_of_a_working_type_is_none() -> None:
    assert known_failure("llama") is None
    assert known_failure("deepseek_v3") is None


def test_the_table_names_real_model_types() -> None:
    names = set(list_architectures())
    table = arch_exceptions
    for section in (table.TREE, table.OVERRIDES, table.EXTRA_INPUTS, table.EXPECTED_FAILURES):
        assert set(section) <= names, set(section) - names
    assert set(overrides("zamba2")) == {"attention_hidden_size", "attention_head_dim"}
    assert extra_inputs("xmod") == {"lang_ids": 0}
    assert extra_inputs("llama") == {}


@pytest.mark.parametrize("model_type", ["deepseek_v3", "bamba"])
def test_user_options_reach_the_tree_path(model_type: str) -> None:
    workload, _, _ = _run_twice(f"arch:{model_type}?layers=3&hidden=32&vocab=256&seq=4")
    config = workload.model.config
    assert config.num_hidden_layers == 3
    assert len(workload.model.model.layers) == 3
    assert config.hidden_size == 32
    assert config.vocab_size == 256
    assert workload.kwargs["input_ids"].shape == (1, 4)
    base = build_workload(f"arch:{model_type}")
    assert workload.fingerprint != base.fingerprint


def test_config_attribute_option_on_the_tree_path() -> None:
    config = build_workload("arch:deepseek_v3?routed_scaling_factor=1.5").model.config
    assert config.routed_scaling_factor == 1.5


def test_max_params_refusal_names_the_largest_modules() -> None:
    with pytest.raises(WorkloadError, match=r"more than max_params=1,000 \(largest: .*embed"):
        build_workload("arch:deepseek_v3?max_params=1000")
