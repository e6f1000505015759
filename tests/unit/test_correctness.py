"""Output comparison: the golden rule, the allclose fallback, and output flattening."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

import pytest
import torch

from bakeoff.analysis.tolerance import (
    BIAS_MULTIPLIER,
    FP64_MULTIPLIER,
    HONEST_MULTIPLIER,
    TOLERANCE,
    GoldenFigures,
    judge_against_golden,
    tolerance_for,
)
from bakeoff.checks.correctness import compare_outputs, compare_tensor, golden_figures, pooled_spreads
from bakeoff.checks.outputs import flatten_outputs

GOLDEN = torch.tensor([1.0, 2.0, -3.0, 0.5, 4.0, -0.25], dtype=torch.float64)


def _offset(delta: float) -> torch.Tensor:
    """GOLDEN moved by ``delta`` in every element, as float32."""
    return (GOLDEN + delta).float()


# -- tolerance table --------------------------------------------------------------------


def test_tolerance_table() -> None:
    assert tolerance_for("float32") == 1e-4
    assert tolerance_for("bfloat16") == 1e-2
    assert tolerance_for("float16") == 1e-3
    assert tolerance_for("float64") == 1e-7
    assert tolerance_for("int64") == 0.0
    assert tolerance_for("bfloat16") > tolerance_for("float16") > tolerance_for("float32") > tolerance_for("float64")
    assert set(TOLERANCE) == {"float64", "float32", "float16", "bfloat16"}


def _figures(**changes: float) -> GoldenFigures:
    base = {"golden_rms": 1.0, "floor": 0.01, "error": 0.01, "ref_bias": 0.0, "bias": 0.0, "rows": 16}
    return GoldenFigures(**{**base, **changes})


def test_golden_rule_error_limit_is_twice_the_floor() -> None:
    assert FP64_MULTIPLIER == 2.0
    assert judge_against_golden(_figures(error=0.0199), "bfloat16").passed
    failed = judge_against_golden(_figures(error=0.0201), "bfloat16")
    assert not failed.passed
    assert failed.error_limit == pytest.approx(0.02)
    assert failed.problem == "rms error vs float64 golden 0.0201 of rms(golden) > 2x the eager bfloat16 run's 0.01"
    assert not judge_against_golden(_figures(error=float("nan")), "bfloat16").passed


def test_a_reference_whose_bias_is_not_finite_still_gets_a_verdict() -> None:
    # outputs near float32's largest value: the reference's and the honest run's biases overflow
    judged = judge_against_golden(_figures(ref_bias=float("inf"), honest_bias=float("nan")), "float32")
    assert judged.passed and judged.bias_limit == pytest.approx(2 * 0.01 / 4)  # from the floor alone
    assert not judge_against_golden(_figures(ref_bias=float("inf"), bias=0.1), "float32").passed


def test_golden_rule_bias_limit_is_twice_the_bias_floor() -> None:
    assert BIAS_MULTIPLIER == 2.0
    # floor 1% of rms(golden) over 16 rows: bias floor 0.01 / sqrt(16) = 0.0025, limit 0.005
    judged = judge_against_golden(_figures(bias=0.0049), "bfloat16")
    assert judged.passed and judged.bias_limit == pytest.approx(0.005)
    failed = judge_against_golden(_figures(bias=-0.0051), "bfloat16")
    assert not failed.passed
    assert failed.problem == (
        "relative bias vs float64 golden -0.0051 beyond +-0.005 (2x the eager bfloat16 run's bias floor)"
    )
    # a reference with a larger bias of its own widens the limit to twice that bias
    assert judge_against_golden(_figures(bias=0.0079, ref_bias=-0.004), "bfloat16").passed
    assert not judge_against_golden(_figures(bias=0.0081, ref_bias=-0.004), "bfloat16").passed
    # averaging is credited over at most 16 rows: 1024 rows have the limit of 16
    assert judge_against_golden(_figures(rows=1024), "bfloat16").bias_limit == pytest.approx(0.005)
    assert judge_against_golden(_figures(rows=4), "bfloat16").bias_limit == pytest.approx(0.01)
    # one row: no averaging, the bias floor is the relative floor itself
    assert judge_against_golden(_figures(bias=0.0199, rows=1), "bfloat16").passed
    assert not judge_against_golden(_figures(bias=0.0201, rows=1, error=0.019), "bfloat16").passed


def test_golden_rule_sensitivity_is_the_smaller_limit() -> None:
    assert judge_against_golden(_figures(), "bfloat16").sensitivity == pytest.approx(0.005)
    assert judge_against_golden(_figures(ref_bias=0.02), "bfloat16").sensitivity == pytest.approx(0.02)  # error limit
    # relative to rms(golden): the same figures at ten times the scale give the same sensitivity
    scaled = _figures(golden_rms=10.0, floor=0.1, error=0.1)
    assert judge_against_golden(scaled, "bfloat16").sensitivity == pytest.approx(0.005)


def test_golden_rule_exact_reference_leaves_two_roundoffs() -> None:
    u = 2.0**-24
    exact = judge_against_golden(_figures(floor=0.0, error=1.9 * u, rows=1), "float32")
    assert exact.passed and exact.error_limit == pytest.approx(2 * u)
    assert exact.sensitivity == pytest.approx(2 * u)
    assert not judge_against_golden(_figures(floor=0.0, error=2.1 * u, rows=1), "float32").passed
    # a floor below one rounding: the limit is two roundings, not twice the floor
    tiny = judge_against_golden(_figures(floor=0.76 * u, error=1.54 * u, rows=1), "float32")
    assert tiny.passed and tiny.error_limit == pytest.approx(2 * u)
    # bfloat16's roundoff is 2**-8: an exact bfloat16 reference still leaves that much room
    assert judge_against_golden(_figures(floor=0.0, error=0.003, rows=1), "bfloat16").passed


def test_golden_rule_zero_golden_has_no_relative_figures() -> None:
    judged = judge_against_golden(_figures(golden_rms=0.0, floor=0.1, error=0.15), "float32")
    assert judged.passed and judged.bias_limit is None and judged.sensitivity is None
    failed = judge_against_golden(_figures(golden_rms=0.0, floor=0.1, error=0.25), "float32")
    assert failed.problem == "rms error vs float64 golden 0.25 absolute > 2x the eager float32 run's 0.1"


# -- compare_tensor ---------------------------------------------------------------------


def test_identical_tensors_pass_allclose() -> None:
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    c = compare_tensor("output.logits", x.clone(), x, None, "float32")
    assert c.passed
    assert c.rule == "allclose"
    assert c.problem == ""
    assert c.name == "output.logits"
    assert c.shape == (3, 4)
    assert c.dtype == "float32"
    assert c.max_abs_err == 0.0
    assert c.max_rel_err == 0.0
    assert c.cosine == pytest.approx(1.0, abs=1e-12)


def test_within_tolerance_passes_allclose() -> None:
    ref = torch.tensor([1.0, 2.0, 3.0])
    res = ref + torch.tensor([5e-5, -5e-5, 0.0])
    c = compare_tensor("o", res, ref, None, "float32")
    assert c.passed and c.rule == "allclose"
    assert c.max_abs_err == pytest.approx(5e-5, rel=1e-2)


def test_perturbed_beyond_tolerance_fails_with_problem() -> None:
    ref = torch.tensor([1.0, 2.0, 3.0, 4.0])
    res = ref.clone()
    res[2] += 0.5
    c = compare_tensor("out", res, ref, None, "float32")
    assert not c.passed
    assert c.rule == ""
    assert "max abs error" in c.problem
    assert "tol 0.0001" in c.problem
    assert c.max_abs_err == pytest.approx(0.5)
    assert c.max_rel_err == pytest.approx(0.5 / 4.0)  # largest error over largest reference magnitude
    assert c.cosine < 1.0


def test_cosine_of_opposite_outputs() -> None:
    ref = torch.tensor([1.0, -2.0, 3.0])
    c = compare_tensor("o", -ref, ref, None, "float32")
    assert not c.passed
    assert c.cosine == pytest.approx(-1.0)
    assert c.max_abs_err == pytest.approx(6.0)
    assert c.max_rel_err == pytest.approx(2.0)


def test_golden_rule_passes_result_as_accurate_as_eager() -> None:
    # The float32 eager reference is itself off from the float64 golden by +1e-3 everywhere
    # (RMS 1e-3). The result is off by -1.5e-3 (RMS 1.5e-3): 2.5e-3 from the reference, far
    # beyond allclose's 1e-4 + 1e-4 * |ref|, but 1.5e-3 <= 2 * 1e-3, and its relative bias
    # (-1.5e-3 * sum(g) / sum(g^2) = -2.1e-4) is within 2 * 1e-3 / rms(g) = 8.9e-4 (one row).
    reference = _offset(+1e-3)
    result = _offset(-1.5e-3)
    assert not torch.allclose(result.double(), reference.double(), atol=1e-4, rtol=1e-4)

    c = compare_tensor("o", result, reference, GOLDEN, "float32")
    assert c.passed
    assert c.rule == "golden"
    assert c.problem == ""
    assert c.max_abs_err == pytest.approx(2.5e-3, rel=1e-3)
    rms = float(GOLDEN.pow(2).mean().sqrt())
    assert c.golden_err == pytest.approx(1.5e-3 / rms, rel=1e-3)
    assert c.floor == pytest.approx(1e-3 / rms, rel=1e-3)
    assert c.bias == pytest.approx(-1.5e-3 * float(GOLDEN.sum()) / float(GOLDEN.pow(2).sum()), rel=1e-3)
    assert c.sensitivity == pytest.approx(2 * 1e-3 / rms, rel=1e-3)


def test_golden_rule_rejects_result_worse_than_twice_eager_error() -> None:
    # RMS error 2.5e-3 vs golden > 2e-3 allowed
    reference = _offset(+1e-3)
    result = _offset(-2.5e-3)
    c = compare_tensor("o", result, reference, GOLDEN, "float32")
    assert not c.passed
    assert c.rule == ""
    assert c.problem.startswith("rms error vs float64 golden 0.00111 of rms(golden) > 2x")
    assert c.max_abs_err == pytest.approx(3.5e-3, rel=1e-3)


def test_golden_rule_needs_a_golden() -> None:
    c = compare_tensor("o", _offset(-1.5e-3), _offset(+1e-3), None, "float32")
    assert not c.passed
    assert c.sensitivity is None and c.golden_err is None


def test_golden_of_other_shape_falls_back_to_allclose() -> None:
    c = compare_tensor("o", _offset(-1.5e-3), _offset(+1e-3), GOLDEN[:3], "float32")
    assert not c.passed
    assert "tol 0.0001" in c.problem


def test_golden_rule_exact_reference_leaves_only_roundoff() -> None:
    # An exact reference (no error of its own) leaves two units of roundoff of rms(golden).
    reference = GOLDEN.float()
    c = compare_tensor("o", _offset(2e-4), reference, GOLDEN, "float32")
    assert not c.passed
    assert compare_tensor("o", reference.clone(), reference, GOLDEN, "float32").passed


def _noisy_case(bias: float, seed: int = 0, noise: float = 5e-3) -> tuple[torch.Tensor, ...]:
    """A golden like logits (64 rows of 128, rms 0.16), a bfloat16-like reference with relative
    rounding noise ``noise`` of rms(golden), and a result with its own such noise, scaled by
    ``1 + bias``."""
    gen = torch.Generator().manual_seed(seed)
    golden = 0.16 * torch.randn(64, 128, generator=gen, dtype=torch.float64)
    reference = golden + noise * 0.16 * torch.randn(64, 128, generator=gen, dtype=torch.float64)
    result = golden * (1 + bias) + noise * 0.16 * torch.randn(64, 128, generator=gen, dtype=torch.float64)
    return result.float(), reference.float(), golden


def test_allclose_is_not_enough_when_a_golden_exists() -> None:
    # A 0.5% bias stays inside bfloat16's allclose(1e-2) of the reference and inside twice the
    # rms floor (sqrt(2) * 5e-3 < 1e-2), but not inside the golden rule's bias limit:
    # 2 * 5e-3 / sqrt(16 rows, the most credited) = 2.5e-3.
    result, reference, golden = _noisy_case(0.005)
    assert torch.allclose(result.double(), reference.double(), atol=1e-2, rtol=1e-2)
    c = compare_tensor("o", result, reference, golden, "bfloat16")
    assert not c.passed
    assert c.problem.startswith("relative bias vs float64 golden +0.0049")
    assert c.bias == pytest.approx(0.005, abs=5e-4)
    # without the golden, the allclose fallback passes it: what the fallback cannot see
    assert compare_tensor("o", result, reference, None, "bfloat16").rule == "allclose"


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_sensitivity_agrees_with_what_is_caught(seed: int) -> None:
    _, reference, golden = _noisy_case(0.0, seed)
    sensitivity = compare_tensor("o", reference.clone(), reference, golden, "bfloat16").sensitivity
    assert sensitivity == pytest.approx(2 * 5e-3 / 4, rel=0.1)  # twice the floor over sqrt(16) rows
    for factor, caught in ((0.0, False), (0.3, False), (-0.3, False), (1.3, True), (-1.3, True), (3.0, True)):
        c = compare_tensor("o", *_noisy_case(factor * sensitivity, seed), "bfloat16")
        assert c.passed is not caught, (factor, c.problem)
        assert c.sensitivity == pytest.approx(sensitivity, rel=1e-6)


def test_golden_figures_ignore_matching_non_finite_elements() -> None:
    golden = torch.tensor([[1.0, float("inf")], [2.0, -1.0]], dtype=torch.float64)
    reference = golden.float()
    figures = golden_figures(reference.clone(), reference, golden)
    assert figures.rows == 2
    assert figures.golden_rms == pytest.approx(math.sqrt(6 / 3))
    assert figures.error == 0.0 and figures.bias == 0.0
    assert compare_tensor("o", reference.clone(), reference, golden, "float32").passed


def test_shape_mismatch_fails() -> None:
    c = compare_tensor("o", torch.zeros(2, 3), torch.zeros(3, 2), None, "float32")
    assert not c.passed
    assert "shape" in c.problem
    assert "(2, 3)" in c.problem and "(3, 2)" in c.problem
    assert c.shape == (2, 3)
    assert math.isinf(c.max_abs_err)
    assert math.isinf(c.max_rel_err)


def test_shape_mismatch_same_numel_is_not_forgiven_by_golden() -> None:
    golden = torch.zeros(2, 3, dtype=torch.float64)
    c = compare_tensor("o", torch.zeros(2, 3), torch.zeros(6), golden, "float32")
    assert not c.passed


def test_integer_outputs_must_match_exactly() -> None:
    ref = torch.tensor([[1, 2, 3]], dtype=torch.int64)
    same = compare_tensor("ids", ref.clone(), ref, None, "bfloat16")
    assert same.passed
    assert same.rule == "exact"
    assert same.dtype == "int64"

    off_by_one = ref.clone()
    off_by_one[0, 1] = 3
    differ = compare_tensor("ids", off_by_one, ref, None, "bfloat16")  # bf16's loose tol does not apply
    assert not differ.passed
    assert differ.problem == "integer output differs"
    assert differ.max_abs_err == 1.0


def test_bool_outputs_exact() -> None:
    ref = torch.tensor([True, False, True])
    assert compare_tensor("m", ref.clone(), ref, None, "float32").rule == "exact"
    assert not compare_tensor("m", ~ref, ref, None, "float32").passed


def test_dtype_tolerance_bf16_looser_than_fp32() -> None:
    ref = torch.tensor([1.0, 2.0, 4.0])
    res = ref * (1 + 5e-3)  # 0.5% relative error
    assert compare_tensor("o", res, ref, None, "bfloat16").passed
    assert compare_tensor("o", res, ref, None, "bfloat16").rule == "allclose"
    assert not compare_tensor("o", res, ref, None, "float16").passed
    assert not compare_tensor("o", res, ref, None, "float32").passed


def test_real_bf16_tensors_one_ulp_apart() -> None:
    # next bfloat16 after 1.0 is 1 + 2**-7 = 1.0078125
    ref = torch.tensor([1.0, 1.0], dtype=torch.bfloat16)
    res = torch.tensor([1.0, 1.0078125], dtype=torch.bfloat16)
    assert res[1].item() == 1.0078125
    c = compare_tensor("o", res, ref, None, "bfloat16")
    assert c.passed and c.dtype == "bfloat16"
    assert c.max_abs_err == 0.0078125
    # the same error is too much for float16's tolerance (0.0078 > 1e-3 + 1e-3 * 1)
    assert not compare_tensor("o", res.half(), ref.half(), None, "float16").passed


def test_matching_nans_pass_and_new_nans_fail() -> None:
    ref = torch.tensor([1.0, float("nan"), 3.0])
    assert compare_tensor("o", ref.clone(), ref, None, "float32").passed

    res = torch.tensor([1.0, 2.0, float("nan")])
    c = compare_tensor("o", res, torch.tensor([1.0, 2.0, 3.0]), None, "float32")
    assert not c.passed
    assert c.problem == "non-finite values differ"
    assert math.isinf(c.max_abs_err)


def test_matching_infs_pass() -> None:
    ref = torch.tensor([float("inf"), -1.0])
    assert compare_tensor("o", ref.clone(), ref, None, "float32").passed


def test_infinity_in_result_only_fails_even_with_golden() -> None:
    ref = torch.tensor([1.0, 2.0])
    res = torch.tensor([1.0, float("inf")])
    c = compare_tensor("o", res, ref, ref.double(), "float32")
    assert not c.passed


def test_empty_tensors_pass() -> None:
    c = compare_tensor("o", torch.zeros(0, 3), torch.zeros(0, 3), None, "float32")
    assert c.passed
    assert c.max_abs_err == 0.0


def test_result_on_autograd_graph_is_compared() -> None:
    ref = torch.tensor([1.0, 2.0])
    res = ref.clone().requires_grad_(True) * 1.0
    assert compare_tensor("o", res, ref, None, "float32").passed


# -- compare_outputs --------------------------------------------------------------------


def _outputs(**tensors: torch.Tensor) -> dict[str, torch.Tensor]:
    return {f"output.{k}": v for k, v in tensors.items()}


def test_compare_outputs_pass() -> None:
    a, b = torch.arange(6.0).reshape(2, 3), torch.tensor([7, 8])
    ref = _outputs(logits=a, ids=b)
    result = compare_outputs(_outputs(logits=a.clone(), ids=b.clone()), ref, None, "float32", "eager:float32")
    assert result.verdict == "pass"
    assert result.reason == (
        "no float64 golden for output.logits: judged by allclose(atol=rtol=0.0001) to eager:float32 only, "
        "blind to a systematic error below that"
    )
    assert result.sensitivity is None
    assert result.reference == "eager:float32"
    assert result.tolerance == 1e-4
    assert [o.name for o in result.outputs] == ["output.logits", "output.ids"]
    assert [o.rule for o in result.outputs] == ["allclose", "exact"]
    assert result.max_abs_err == 0.0
    # a script's hundreds of captures are not all named in the note
    many = {f"loss[{i}]": torch.tensor(float(i)) for i in range(5)}
    note = compare_outputs(dict(many), many, None, "float32", "the script on cpu").reason
    assert note.startswith("no float64 golden for loss[0], loss[1], loss[2] and 2 more: judged by allclose")


def test_compare_outputs_uses_golden_per_output() -> None:
    ref = _outputs(x=_offset(+1e-3))
    golden = _outputs(x=GOLDEN)
    result = compare_outputs(_outputs(x=_offset(-1.5e-3)), ref, golden, "float32", "eager:float32")
    assert result.verdict == "pass"
    assert result.reason == ""  # judged against the golden: no fallback note
    assert result.outputs[0].rule == "golden"
    assert result.sensitivity == result.outputs[0].sensitivity > 0
    # without the golden it fails
    assert compare_outputs(_outputs(x=_offset(-1.5e-3)), ref, None, "float32", "eager:float32").verdict == "fail"


def test_compare_outputs_one_bad_output_fails_the_whole() -> None:
    ref = _outputs(logits=torch.ones(4), hidden=torch.zeros(2, 2))
    out = _outputs(logits=torch.ones(4), hidden=torch.full((2, 2), 0.5))
    result = compare_outputs(out, ref, None, "float32", "eager:float32")
    assert result.verdict == "fail"
    assert result.reason.startswith("output.hidden: max abs error")
    assert [o.passed for o in result.outputs] == [True, False]
    assert result.max_abs_err == pytest.approx(0.5)


def test_compare_outputs_missing_output() -> None:
    ref = _outputs(logits=torch.ones(2), hidden=torch.ones(2))
    result = compare_outputs(_outputs(logits=torch.ones(2)), ref, None, "float32", "eager:float32")
    assert result.verdict == "fail"
    assert "missing outputs: output.hidden" in result.reason
    assert [o.name for o in result.outputs] == ["output.logits"]


def test_compare_outputs_extra_output() -> None:
    ref = _outputs(logits=torch.ones(2))
    out = _outputs(logits=torch.ones(2), surprise=torch.ones(1))
    result = compare_outputs(out, ref, None, "float32", "eager:float32")
    assert result.verdict == "fail"
    assert "unexpected outputs: output.surprise" in result.reason


def test_compare_outputs_reports_every_problem() -> None:
    ref = _outputs(a=torch.ones(2), b=torch.ones(2), c=torch.ones(3))
    out = _outputs(a=torch.ones(2), c=torch.ones(2), d=torch.ones(1))
    result = compare_outputs(out, ref, None, "float32", "eager:float32")
    assert result.verdict == "fail"
    assert "missing outputs: output.b" in result.reason
    assert "unexpected outputs: output.d" in result.reason
    assert "output.c: shape (2,) != reference (3,)" in result.reason
    assert math.isinf(result.max_abs_err)


def test_compare_outputs_nothing_to_compare() -> None:
    result = compare_outputs({}, {}, None, "float32", "eager:float32")
    assert result.verdict == "not_comparable"
    assert "no tensors" in result.reason
    assert result.max_abs_err is None


def test_compare_outputs_dtype_aware() -> None:
    ref = _outputs(x=torch.tensor([1.0, 2.0]))
    out = _outputs(x=torch.tensor([1.004, 2.008]))
    assert compare_outputs(out, ref, None, "bfloat16", "eager:bfloat16").verdict == "pass"
    assert compare_outputs(out, ref, None, "bfloat16", "eager:bfloat16").tolerance == 1e-2
    assert compare_outputs(out, ref, None, "float32", "eager:float32").verdict == "fail"


# -- flatten_outputs --------------------------------------------------------------------


def test_flatten_single_tensor() -> None:
    t = torch.ones(2)
    flat = flatten_outputs(t)
    assert list(flat) == ["output"]
    assert torch.equal(flat["output"], t)


def test_flatten_nested_dict_and_tuple() -> None:
    a, b, c, d = (torch.full((1,), float(i)) for i in range(4))
    value = {"logits": a, "past": ((b, c), [d]), "extra": "ignored", "none": None, "n": 3}
    flat = flatten_outputs(value)
    assert list(flat) == ["output.logits", "output.past.0.0", "output.past.0.1", "output.past.1.0"]
    assert [float(t) for t in flat.values()] == [0.0, 1.0, 2.0, 3.0]


def test_flatten_custom_prefix() -> None:
    assert list(flatten_outputs((torch.ones(1), torch.ones(1)), prefix="y")) == ["y.0", "y.1"]


def test_flatten_detaches() -> None:
    w = torch.ones(2, requires_grad=True)
    flat = flatten_outputs({"x": w * 2})
    assert not flat["output.x"].requires_grad
    assert flat["output.x"].device.type == "cpu"


def test_flatten_ignores_non_tensors() -> None:
    assert flatten_outputs(None) == {}
    assert flatten_outputs("text") == {}
    assert flatten_outputs({"a": 1.0, "b": [None, "x"]}) == {}


class _FakeModelOutput(Mapping):
    """A Mapping that is not a dict, like transformers' ModelOutput for our purposes."""

    def __init__(self, **items: Any) -> None:
        self._items = {k: v for k, v in items.items() if v is not None}

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


def test_flatten_mapping_like_model_output_keeps_key_order() -> None:
    logits, h0, h1 = torch.zeros(1), torch.ones(1), torch.full((1,), 2.0)
    out = _FakeModelOutput(logits=logits, loss=None, hidden_states=(h0, h1))
    flat = flatten_outputs(out)
    assert list(flat) == ["output.logits", "output.hidden_states.0", "output.hidden_states.1"]
    assert torch.equal(flat["output.hidden_states.1"], h1)


def test_flatten_ordered_dict_order() -> None:
    value = OrderedDict([("z", torch.zeros(1)), ("a", torch.ones(1))])
    assert list(flatten_outputs(value)) == ["output.z", "output.a"]


def test_flatten_real_transformers_model_output() -> None:
    from transformers.modeling_outputs import CausalLMOutputWithPast

    logits = torch.randn(1, 3, 5)
    hidden = (torch.randn(1, 3, 4), torch.randn(1, 3, 4))
    out = CausalLMOutputWithPast(logits=logits, hidden_states=hidden)  # loss, past None: absent
    flat = flatten_outputs(out)
    assert list(flat) == ["output.logits", "output.hidden_states.0", "output.hidden_states.1"]
    assert torch.equal(flat["output.logits"], logits)
    assert torch.equal(flat["output.hidden_states.0"], hidden[0])


def test_flatten_then_compare_catches_wrong_second_head() -> None:
    ref = flatten_outputs({"logits": torch.ones(3), "aux": torch.zeros(3)})
    out = flatten_outputs({"logits": torch.ones(3), "aux": torch.ones(3)})
    result = compare_outputs(out, ref, None, "float32", "eager:float32")
    assert result.verdict == "fail"
    assert "output.aux" in result.reason


# -- the honest spread ------------------------------------------------------------------


def test_the_honest_spread_allows_an_engine_a_few_times_eager_error() -> None:
    # ONNX Runtime in float32 was called wrong at 2.6x eager's floor (6.7e-7 against 2.56e-7);
    # the emulated honest implementation erred by 5x the floor on that kind of workload
    onnx_like = _figures(golden_rms=1.0, floor=2.56e-7, error=6.7e-7, rows=16, honest=1.3e-6)
    judged = judge_against_golden(onnx_like, "float32")
    assert judged.passed and judged.honest_limit == pytest.approx(HONEST_MULTIPLIER * 1.3e-6)
    # the seeded control: the same error without the honest run is the old false alarm
    assert not judge_against_golden(replace(onnx_like, honest=None), "float32").passed


def test_beyond_the_honest_spread_fails_and_says_how_far() -> None:
    assert HONEST_MULTIPLIER == 1.5
    failed = judge_against_golden(_figures(floor=2.5e-7, error=1.8e-5, rows=16, honest=1.2e-6), "float32")
    assert not failed.passed
    assert failed.problem == (
        "rms error vs float64 golden 1.8e-05 of rms(golden): 10x the honest spread 1.8e-06 (an implementation "
        "within 8 units of roundoff per op), 72x the eager float32 run's 2.5e-07"
    )
    # the bias limit, untouched by the spread: the per-op bound (8 units, above this floor) over 16 rows
    assert failed.sensitivity == pytest.approx(2 * 8 * 2**-24 / 4)


def test_a_bias_of_a_few_units_an_honest_op_makes_passes_where_the_floor_is_lower() -> None:
    # a mean over 8,192 tokens added in order: -2.4e-7 relative on 2 rows, eager's floor 6.1e-8;
    # the bias limit was 2 x 6.1e-8 / sqrt(2) = 8.6e-8 and called the honest engine wrong
    figures = _figures(floor=6.1e-8, error=1.5e-6, bias=-2.4e-7, rows=2, honest=3.1e-6)
    judged = judge_against_golden(figures, "float32")
    assert judged.passed, judged.problem
    assert judged.bias_limit == pytest.approx(2 * 8 * 2**-24 / math.sqrt(2))
    # the fault it must still see: a bias of 1e-6 of the output, its error within the error limit
    biased = judge_against_golden(replace(figures, error=3e-6, bias=1e-6), "float32")
    assert not biased.passed and biased.problem.startswith("relative bias vs float64 golden +1e-06 beyond")


@pytest.mark.parametrize(("dtype", "bias"), [("float32", 1e-3), ("bfloat16", 1e-2)])
def test_a_generous_honest_spread_still_catches_the_seeded_biases(dtype: str, bias: float) -> None:
    # floors as measured on the demo llama; an honest run 10x the floor (far above any seen)
    floor = {"float32": 2.3e-7, "bfloat16": 5.7e-3}[dtype]
    figures = _figures(floor=floor, error=math.hypot(floor, bias), bias=bias, rows=16, honest=10 * floor)
    judged = judge_against_golden(figures, dtype)
    assert not judged.passed, judged
    assert judged.sensitivity < bias


def test_the_honest_runs_own_bias_widens_the_bias_limit() -> None:
    judged = judge_against_golden(_figures(bias=0.008, honest=0.015, honest_bias=-0.005), "bfloat16")
    assert judged.passed and judged.bias_limit == pytest.approx(0.01)
    assert not judge_against_golden(_figures(bias=0.008, honest=0.015, honest_bias=0.001), "bfloat16").passed


def test_compare_tensor_reports_the_honest_spread_it_applied() -> None:
    gen = torch.Generator().manual_seed(0)
    golden = torch.randn(16, 64, generator=gen, dtype=torch.float64)
    reference = (golden * (1 + 1e-7 * torch.randn(16, 64, generator=gen, dtype=torch.float64))).float()
    honest = (golden * (1 + 6e-7 * torch.randn(16, 64, generator=gen, dtype=torch.float64))).float()
    engine = (golden * (1 + 4e-7 * torch.randn(16, 64, generator=gen, dtype=torch.float64))).float()
    c = compare_tensor("o", engine, reference, golden, "float32", honest)
    assert c.passed and c.rule == "golden"
    assert c.honest == pytest.approx(HONEST_MULTIPLIER * 6e-7, rel=0.1) and c.golden_err > 2 * c.floor
    assert not compare_tensor("o", engine, reference, golden, "float32").passed  # without it: a false alarm
    assert compare_tensor("o", engine, reference, golden, "float32", honest[:3]).honest is None  # another shape


# -- the honest-spread rule of a script's captures (no golden) ---------------------------


def test_a_capture_within_the_honest_spread_passes_and_beyond_it_fails_saying_how_far() -> None:
    reference = torch.tensor([1.0, -2.0, 3.0, 0.5])
    honest = reference * (1 + 2e-3)  # the reference again under rounding noise: bf16-like spread
    drifted = reference * (1 - 2.5e-3)  # another honest run's drift, beyond allclose's 1e-4
    c = compare_tensor("weights", drifted, reference, None, "float32", honest)
    assert c.passed and c.rule == "honest"
    assert c.honest == pytest.approx(HONEST_MULTIPLIER * 2e-3, rel=1e-3) and c.sensitivity == c.honest
    assert not compare_tensor("weights", drifted, reference, None, "float32").passed  # the allclose false alarm
    wrong = compare_tensor("weights", reference * 1.01, reference, None, "float32", honest)  # a 1% fault
    assert not wrong.passed
    assert wrong.problem == (
        "rms error vs the reference 0.01 of rms(reference): 3.33x the honest spread 0.003 "
        "(the reference run again with every op a few units of roundoff off)"
    )


def test_an_identical_honest_run_leaves_two_units_of_roundoff() -> None:
    reference = torch.tensor([1.0, -2.0, 3.0, 0.5])
    assert compare_tensor("x", reference.clone(), reference, None, "float32", reference.clone()).passed
    assert not compare_tensor("x", reference * (1 + 1e-6), reference, None, "float32", reference.clone()).passed


def test_a_scalar_capture_uses_the_spread_pooled_over_its_calls() -> None:
    # one scalar's single honest draw can land near zero by chance: loss[1]'s did
    reference = {f"loss[{i}]": torch.tensor(v) for i, v in enumerate([2.0, 1.5, 1.0])}
    honest = {
        "loss[0]": torch.tensor(2.0 * (1 + 4e-4)),
        "loss[1]": torch.tensor(1.5),
        "loss[2]": torch.tensor(1.0 - 4e-4),
    }
    pooled = pooled_spreads(reference, honest)
    assert pooled["loss[1]"] == pytest.approx(math.sqrt((2 * (4e-4) ** 2) / 3), rel=1e-3)
    result = {"loss[0]": torch.tensor(2.0), "loss[1]": torch.tensor(1.5 * (1 + 3e-4)), "loss[2]": torch.tensor(1.0)}
    judged = compare_outputs(result, reference, None, "float32", "the script on cpu", honest=honest, pooled=pooled)
    assert judged.verdict == "pass", judged.reason
    unpooled = compare_outputs(result, reference, None, "float32", "the script on cpu", honest=honest)
    assert unpooled.verdict == "fail" and "loss[1]" in unpooled.reason  # the chance draw's false alarm


def _losses(relative: torch.Tensor) -> dict[str, torch.Tensor]:
    """20 scalar losses ``2 - 0.05 i``, each moved by its relative error."""
    return {f"loss[{i}]": torch.tensor((2.0 - 0.05 * i) * (1.0 + float(e)), dtype=torch.float64) for i, e in
            enumerate(relative)}  # fmt: skip


def test_many_scalar_calls_as_honest_as_the_spread_pass_and_an_error_they_all_share_fails() -> None:
    # an honest engine's 20 losses differ from the reference as much as the honest run does, each
    # one a draw: some land beyond 1.5x the pooled spread by chance (the old limit's false alarm)
    sigma = 1e-4
    reference = _losses(torch.zeros(20))
    honest = _losses(sigma * torch.randn(20, generator=torch.Generator().manual_seed(1)))
    engine_draws = sigma * torch.randn(20, generator=torch.Generator().manual_seed(2))
    pooled = pooled_spreads(reference, honest)
    spread = pooled["loss[0]"]
    assert any(abs(float(e)) > HONEST_MULTIPLIER * spread for e in engine_draws)  # beyond the old per-call limit
    judged = compare_outputs(_losses(engine_draws), reference, None, "float64", "ref", honest=honest, pooled=pooled)
    assert judged.verdict == "pass", judged.reason
    # the seeded fault: every step 3x the spread off, each below its own limit, all together beyond theirs
    shared = compare_outputs(
        _losses(torch.full((20,), 3 * spread)), reference, None, "float64", "ref", honest=honest, pooled=pooled
    )
    assert shared.verdict == "fail", shared.reason
    assert "the 20 calls of loss together: rms error" in shared.reason and "pooled honest spread" in shared.reason
    # and one step far off alone fails on its own
    alone = engine_draws.clone()
    alone[7] = 20 * spread
    single = compare_outputs(_losses(alone), reference, None, "float64", "ref", honest=honest, pooled=pooled)
    assert single.verdict == "fail" and single.reason.startswith("loss[7]: rms error vs the reference"), single.reason


def test_calls_judged_together_keep_two_units_of_roundoff_over_an_identical_honest_run() -> None:
    reference = {f"loss[{i}]": torch.tensor(1.0 + i) for i in range(20)}
    pooled = pooled_spreads(reference, dict(reference))  # rounding moved nothing: a spread of 0
    one_unit = {name: value * (1 + 2.0**-24) for name, value in reference.items()}
    judged = compare_outputs(one_unit, reference, None, "float32", "ref", honest=dict(reference), pooled=pooled)
    assert judged.verdict == "pass", judged.reason
    off = {name: value * (1 + 1e-5) for name, value in reference.items()}
    assert compare_outputs(off, reference, None, "float32", "ref", honest=dict(reference), pooled=pooled).verdict == (
        "fail"
    )


def test_a_capture_that_rounding_alone_moves_by_over_a_percent_is_named() -> None:
    reference = {"loss[0]": torch.tensor([1.0, 2.0])}
    honest = {"loss[0]": torch.tensor([1.05, 1.9])}  # chaotic: rounding moves it by 5%
    judged = compare_outputs(dict(reference), reference, None, "float32", "ref", honest=honest)
    assert judged.verdict == "pass" and "rounding alone moves loss[0] by over 1%" in judged.reason
    # the words speak of the spread itself, not of the limit 1.5x it: 0.8% is not over 1%
    calmer = {"loss[0]": reference["loss[0]"] * 1.008}
    quieter = compare_outputs(dict(reference), reference, None, "float32", "ref", honest=calmer)
    assert "rounding alone" not in quieter.reason
