"""The three-way rule per tensor and the origins of a divergence, on cases with known answers."""

from __future__ import annotations

import math

import pytest

from bakeoff.analysis.localize import CallJudgement, TensorFigures, find_origins, judge_tensor


def test_the_target_may_be_m_times_as_wrong_as_the_reference_plus_a_floor():
    assert judge_tensor(TensorFigures(2e-7, 1e-7, 1.0), "float32")[0]
    assert not judge_tensor(TensorFigures(4e-7, 1e-7, 1.0), "float32")[0]  # > 2 x 1e-7 + 1.2e-7
    assert judge_tensor(TensorFigures(2.9e-3, 1e-3, 1.0), "bfloat16")[0]  # m = 3 in half precision
    # a reference exactly equal to float64 leaves only the floor: eps * rms(golden)
    passed, ratio = judge_tensor(TensorFigures(1e-7, 0.0, 1.0), "float32")
    assert passed and ratio == pytest.approx(1e-7 / 2.0**-23)


def test_the_rule_scales_with_the_tensor_not_a_fixed_tolerance():
    # a 1e-5 error on activations of scale 1e-4 is 10% off: a fixed atol of 1e-4 would pass it
    assert not judge_tensor(TensorFigures(1e-5, 1e-11, 1e-4), "float32")[0]
    # and a 1e-4 error on activations of scale 1e4 is rounding: allclose(1e-4) would fail it
    assert judge_tensor(TensorFigures(1e-4, 1e-4, 1e4), "float32")[0]


def test_discrete_tensors_fail_on_any_differing_element_and_non_finite_errors_fail():
    assert judge_tensor(TensorFigures(0, 0, 0, discrete=True, differing=0.0), "float32") == (True, 0.0)
    assert judge_tensor(TensorFigures(0, 0, 0, discrete=True, differing=0.25), "float32") == (False, 0.25)
    assert judge_tensor(TensorFigures(math.inf, 1e-7, 1.0), "float32") == (False, math.inf)


def call(name: str, parent: str | None, inputs_pass: bool, output_pass: bool) -> CallJudgement:
    return CallJudgement((name, 0), (parent, 0) if parent is not None else None, inputs_pass, output_pass, 0.0)


def test_the_origin_is_the_leaf_most_failing_call_whose_inputs_pass_in_completion_order():
    calls = [  # completion order: children before their parents
        call("embed", "model", True, True),
        call("layer0.attn", "layer0", True, True),
        call("layer0.act", "layer0.mlp", True, False),  # the fault
        call("layer0.mlp", "layer0", True, False),  # an ancestor: inputs pass, output fails, not leaf-most
        call("layer0", "model", True, False),
        call("layer1.attn", "layer1", False, False),  # downstream: its inputs already diverged
        call("layer1", "model", False, False),
        call("norm", "model", False, False),
        call("model", None, True, False),
    ]
    ((origin, downstream),) = find_origins(calls)
    assert origin.key == ("layer0.act", 0)
    assert downstream == 3  # layer1.attn, layer1, norm; not its ancestors layer0.mlp, layer0, model


def test_two_independent_faults_are_two_origins_each_with_its_own_downstream():
    calls = [
        call("a", "root", True, False),
        call("b", "root", False, False),
        call("c", "root", True, False),  # its inputs pass again (a residual reset, say): a second fault
        call("d", "root", False, False),
        call("root", None, True, False),
    ]
    found = find_origins(calls)
    assert [(o.key[0], n) for o, n in found] == [("a", 1), ("c", 1)]


def test_a_clean_run_has_no_origin():
    assert find_origins([call("a", "root", True, True), call("root", None, True, True)]) == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("lm_head", "is not PATTERN:M or PATTERN:exact"),
        ("lm_head:loose", "'loose' is not a number or exact"),
        ("lm_head:0.5", "a multiple below 1 would fail the reference itself"),
    ],
)
def test_bad_tolerances_are_refused_in_one_line(text, message):
    from bakeoff.checks.registry import parse_check
    from bakeoff.errors import SpecError

    with pytest.raises(SpecError, match=message):
        parse_check(f"localization?tolerances={text}")


def test_tolerances_match_a_module_by_name_or_class_the_first_pattern_winning():
    from bakeoff.checks.localize_judge import Tolerances

    rules = Tolerances("*Router:exact, model.layers.0.*:4, *:2.5")
    assert rules.rule("model.layers.3.mlp.gate", "MixtralRouter") == "exact"
    assert rules.rule("model.layers.0.mlp", "LlamaMLP") == 4.0
    assert rules.rule("lm_head", "Linear") == 2.5
    assert Tolerances("").rule("lm_head", "Linear") is None


def test_a_mixed_precision_target_is_not_localised_against_an_fp32_reference():
    from bakeoff.checks.base import CheckContext
    from bakeoff.checks.correctness import Correctness
    from bakeoff.checks.localization import LocalizationCheck
    from bakeoff.runner.job import TargetJob
    from bakeoff.target.spec import parse_target

    target = parse_target("cpu?amp=bf16")
    context = CheckContext(
        TargetJob("arch:llama", target, "f", None), target, None, {}, None, "float32", "float32", "f"
    )
    context.results["correctness"] = Correctness("fail")
    value = LocalizationCheck().run(context)
    assert value.verdict == "not_comparable" and "amp=bfloat16" in value.reason


def test_an_origins_error_is_said_against_the_allowed_error_its_ratio_was_taken_to():
    """The ratio is the error over the allowed error (m times the reference's error plus the
    dtype's rounding at the values' scale), never over the reference's error alone: the words
    give the allowed error, so the three figures agree."""
    import re

    from bakeoff.checks.localization import _against_allowed
    from bakeoff.checks.localize_values import Origin

    origin = Origin("model.layers.0.mlp.act_fn", "SiLU", 0, 3, 0.0099999, 1.23e-7, 27364.0, 2.0)
    said = _against_allowed(origin)
    ratio, allowed = (float(x) for x in re.match(r"(\S+)x the allowed (\S+) \(2x the reference's error", said).groups())
    assert abs(origin.target_err / allowed - ratio) / ratio < 0.01, said
    assert allowed > 2 * origin.reference_err  # the dtype's rounding is part of it
    assert "beyond the allowed" in _against_allowed(Origin("m", "M", 0, 0, float("inf"), 0.0, float("inf"), 2.0))
