"""The training band and verdicts, on synthetic trajectories with known answers."""

from __future__ import annotations

import math

import pytest

from bakeoff.analysis.trajectory import StepFigures, judge_trajectory, multiple_for, rounding_floor
from bakeoff.checks.training import judge
from bakeoff.checks.training_runs import GradientError

EPS = rounding_floor("float32")


def step(ref: float, target: float, apart: float | None = None, golden: float = 1.0, **override: float) -> StepFigures:
    """A step whose four figures have relative errors ``ref`` (reference) and ``target`` against
    the golden, and ``apart`` between target and reference (default: their difference)."""
    apart = abs(target - ref) if apart is None else apart
    values = {f: (golden, golden * (1 + ref), golden * (1 + target)) for f in ("loss", "grad_norm", "update_norm")}
    for name, value in override.items():
        values[name] = (golden, golden * (1 + ref), value)
    return StepFigures(**values, weights=(ref, target, apart))


def test_a_target_identical_to_the_reference_passes_however_far_both_drift_from_float64():
    curve = [step(1e-7 * 10**k, 1e-7 * 10**k) for k in range(4)]  # both 1000x further by step 4
    judged = judge_trajectory(curve, "float32")
    assert judged.verdict == "pass"
    assert judged.grown == pytest.approx((2 * 1e-4 + EPS) / (2 * 1e-7 + EPS))


def test_drifting_apart_within_the_grown_band_is_drift_not_pass():
    # the reference's own error grows 1e-7 -> 1e-5; the target tracks it at 1.5x, apart by 0.5x
    curve = [step(r, 1.5 * r) for r in (1e-7, 1e-6, 1e-5)]
    assert judge_trajectory(curve, "float32").verdict == "drift"


def test_the_first_step_outside_the_grown_band_is_the_first_diverging_step():
    curve = [step(1e-7, 1e-7), step(2e-7, 3e-7), step(3e-7, 1e-3), step(4e-7, 1.0)]
    judged = judge_trajectory(curve, "float32")
    assert (judged.verdict, judged.first_step, judged.figure) == ("fail", 3, "loss")
    assert judged.band == pytest.approx(2 * 3e-7 + EPS)
    assert judged.error == pytest.approx(1e-3)


def test_the_band_never_narrows_when_the_reference_error_crosses_zero():
    # at step 2 the reference happens to agree with float64 exactly; the band keeps step 1's size
    # (2e-6 + 2 ulp), where a band of that step's own would be 2 ulp and fail the target's 1.5e-6
    curve = [step(1e-6, 1e-6), step(0.0, 1.5e-6), step(1e-6, 1e-6)]
    assert judge_trajectory(curve, "float32").verdict == "pass"
    assert judge_trajectory([step(1e-6, 1e-6), step(0.0, 2.5e-6)], "float32").first_step == 2


def test_a_non_finite_target_fails_and_a_non_finite_golden_is_not_comparable():
    assert judge_trajectory([step(1e-7, 1e-7, loss=math.nan)], "float32").verdict == "fail"
    golden_inf = StepFigures((math.inf, 1.0, 1.0), (1.0, 1.0, 1.0), (1.0, 1.0, 1.0), (0.0, 0.0, 0.0))
    assert judge_trajectory([golden_inf], "float32").verdict == "not_comparable"
    assert judge_trajectory([], "float32").verdict == "not_comparable"


def test_half_precision_gets_three_times_its_reference_error_and_a_wider_floor():
    assert (multiple_for("float32"), multiple_for("bfloat16"), multiple_for("float16")) == (2.0, 3.0, 3.0)
    curve = [step(1e-3, 2.5e-3)]  # 2.5x the reference: outside fp32's 2x, inside bf16's 3x
    assert judge_trajectory(curve, "float32").verdict == "fail"
    assert judge_trajectory(curve, "bfloat16").verdict != "fail"
    assert rounding_floor("bfloat16") == 2 * 2.0**-7


def _grads(*passed: bool) -> tuple[GradientError, ...]:
    return tuple(GradientError(f"p{i}", 1e-7 if ok else 1e-2, 1e-7, ok) for i, ok in enumerate(passed))


@pytest.mark.parametrize(
    ("first", "grads", "fault"),
    [
        (step(1e-7, 1e-3), _grads(False, False), "forward"),  # the loss itself is off at step 1
        (step(1e-7, 1e-7, grad_norm=1.01), _grads(False, True), "backward"),
        (step(1e-7, 1e-7, update_norm=1.01), _grads(True, True), "optimiser"),
    ],
)
def test_where_a_step_1_failure_starts(first, grads, fault):
    value = judge((first, step(1e-7, 1e-7)), grads, "float32", steps=2)
    assert (value.verdict, value.first_step, value.fault) == ("fail", 1, fault)
    assert value.gradients_failed == sum(not g.passed for g in grads)
    assert value.gradients[0].passed is (not any(not g.passed for g in grads))  # the worst first


def test_a_failure_after_a_clean_step_1_is_an_accumulation_issue_and_says_so():
    value = judge((step(1e-7, 1e-7), step(1e-7, 1e-7), step(2e-7, 5e-4)), _grads(True), "float32", steps=3)
    assert (value.verdict, value.first_step, value.fault) == ("fail", 3, "accumulation")
    assert "step 1 agreed" in value.reason
    assert value.summary.startswith("training fails at step 3 (loss error 0.0005 > band")
    assert "an accumulation or optimiser-state issue" in value.summary


def test_the_explanation_agrees_with_the_figures_beside_it():
    value = judge((step(1e-7, 1e-7), step(2e-7, 5e-4)), _grads(True), "float32", steps=2)
    assert f"{value.error:.3g}" in value.reason and f"{value.band:.3g}" in value.reason
    assert value.error > value.band
    passed = judge((step(1e-7, 1e-7),), _grads(True), "float32", steps=1)
    assert passed.verdict == "pass" and passed.worst <= 1.0 and passed.error is None
