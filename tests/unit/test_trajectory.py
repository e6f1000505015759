"""The training band and verdicts, on synthetic trajectories with known answers."""

from __future__ import annotations

import math

import pytest

from bakeoff.analysis.trajectory import (
    LocalFigures,
    StepFigures,
    judge_trajectory,
    local_failure,
    multiple_for,
    rounding_floor,
)
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


def local(loss: float = 1e-7, grads: float = 1e-7, update: float = 1e-7, state: float = 1e-7) -> LocalFigures:
    """A step judged from the target's own weights: each figure's target error (the reference's
    own is 1e-7 of scale 1, the golden loss 1.0)."""
    return LocalFigures(
        loss=(1.0, 1.0 + 1e-7, 1.0 + loss),
        grads=(1e-7, grads, 1.0),
        update=(1e-7, update, 1.0),
        state=(1e-7, state, 1.0),
    )


def test_a_step_judged_on_its_own_inputs_fails_on_its_first_wrong_figure():
    assert local_failure(local(), "float32") is None
    assert local_failure(local(update=1e-3, state=1e-3), "float32")[0] == "update"
    figure, error, allowed = local_failure(local(grads=5e-6), "float32")
    assert figure == "grads" and error == pytest.approx(5e-6) and allowed == pytest.approx(2e-7 + 2.0**-23)


@pytest.mark.parametrize(
    ("wrong", "fault"),
    [
        (local(loss=1e-3, grads=1e-3), "forward"),
        (local(grads=1e-3), "backward"),
        (local(update=1e-3), "optimiser"),
        (local(state=1e-3), "optimiser"),  # a wrong moment estimate shows in the state before the update
    ],
)
def test_where_a_failure_starts_is_the_first_wrong_figure_of_the_first_wrong_step(wrong, fault):
    value = judge((step(1e-7, 1e-7),) * 3, _grads(True), "float32", (local(), wrong, local()), steps=3)
    assert (value.verdict, value.first_step, value.fault) == ("fail", 2, fault)
    assert "at step 2, after 1 right step(s)" in value.reason
    assert value.summary.startswith("training fails at step 2 (")


def test_step_1_gradient_errors_are_named_worst_first_with_a_backward_fault():
    value = judge((step(1e-7, 1e-7),), _grads(True, False), "float32", (local(grads=1e-2),), steps=1)
    assert (value.fault, value.gradients_failed) == ("backward", 1)
    assert value.gradients[0].name == "p1" and "step-1 gradients off in 1 of 2 parameters (p1" in value.reason


def test_drifting_beyond_the_band_with_every_step_right_is_drift_not_a_fault():
    # the free-running target leaves the band at step 3 (a flipped AdamW sign), yet each step is right
    curve = (step(1e-7, 1e-7), step(2e-7, 3e-7), step(3e-7, 1e-3))
    value = judge(curve, _grads(True), "float32", (local(),) * 3, steps=3)
    assert value.verdict == "drift" and value.first_step is None
    assert "not a fault" in value.reason
    assert judge(curve, _grads(True), "float32", steps=3).verdict == "fail"  # without local figures: the band decides


def test_the_explanation_agrees_with_the_figures_beside_it():
    value = judge((step(1e-7, 1e-7), step(2e-7, 2e-7)), _grads(True), "float32", (local(), local(loss=5e-4)), steps=2)
    assert f"{value.error:.3g}" in value.reason and f"{value.band:.3g}" in value.reason
    assert value.error > value.band
    passed = judge((step(1e-7, 1e-7),), _grads(True), "float32", (local(),), steps=1)
    assert passed.verdict == "pass" and passed.worst <= 1.0 and passed.error is None
