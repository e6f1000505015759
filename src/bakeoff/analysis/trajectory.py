"""Does a target train the same? The band a training trajectory is judged in (pure functions).

Three runs take the same optimiser steps from the same weights on the same batches: a float64
*golden*, the *reference* (eager CPU in the target's dtype) and the *target*. At every step the
figures ``loss``, ``grad_norm`` (global L2 norm of the gradients), ``update_norm`` (L2 norm of
the parameter change the optimiser made) and ``weights`` (the parameters' relative RMS distance
from the golden's after the step) are taken, and each run's relative error against the golden
is computed.

The band, per figure ``q`` and step ``s``:
    e_ref(q, s)   the reference's own relative error against the golden: the dtype's noise on
                  this model, as the training dynamics amplify it
    tight(q)      m * e_ref(q, 1) + eps            the step-1 noise floor, not grown
    band(q, s)    m * max(e_ref(q, k), k <= s) + eps
                                                   the floor as the reference's own error has
                                                   grown by step s (a running maximum, so a step
                                                   where it happens to cross zero cannot narrow it)
with ``m`` = 2 for float32/float64 and 3 for float16/bfloat16 (PyTorch's accuracy harness uses
such multiples) and ``eps`` two units in the last place of the dtype, relative (a loss printed
in float32 is rounded to one).

Verdicts:
    pass      at every step the target stays within ``tight`` of the *reference*: it trains as
              the reference does, and the two never drift apart beyond step 1's noise
    drift     not pass, but at every step the target's error against the golden is within
              ``band``: the two drifted apart, no faster than the reference dtype's own error
              grows (two correct implementations of one dtype drift apart like this)
    fail      some figure's error outside ``band``; the first such step is the *first
              diverging step*. The training check says ``fail`` only for a step that is also
              wrong on its own inputs (:func:`local_failure`): training amplifies rounding (a
              tiny gradient whose sign two correct backward passes disagree on becomes a whole
              AdamW step), so a correct target can leave this band; then it is drift.
An error at step 1 says where: the loss (forward), the gradients (backward; the per-parameter
rule below names them) or the update (optimiser). A first divergence after step 1 with step 1
clean is an accumulation or optimiser-state issue.

What it cannot see: a fault smaller than the reference dtype's own noise on this model, one
that needs more steps than were run, or batches other than those drawn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "FIGURES",
    "LOCAL_FIGURES",
    "Judgement",
    "LocalFigures",
    "StepFigures",
    "judge_trajectory",
    "local_failure",
    "machine_eps",
    "multiple_for",
    "rounding_floor",
    "within_three_way",
]

#: The figures of a step, in the order they are judged and shown.
FIGURES = ("loss", "grad_norm", "update_norm", "weights")
#: Machine epsilon of each dtype (``torch.finfo(dtype).eps``), without importing torch.
_EPS = {"float64": 2.0**-52, "float32": 2.0**-23, "bfloat16": 2.0**-7, "float16": 2.0**-10}


def multiple_for(dtype: str) -> float:
    """How many times the reference's own error a target may have: 2, or 3 in half precision."""
    return 3.0 if dtype in ("float16", "bfloat16") else 2.0


def machine_eps(dtype: str) -> float:
    """``torch.finfo(dtype).eps`` by name (float32's for a name it does not know)."""
    return _EPS.get(dtype, _EPS["float32"])


def rounding_floor(dtype: str) -> float:
    """Two units in the last place of ``dtype``, relative: below this two roundings differ."""
    return 2 * machine_eps(dtype)


def within_three_way(target_err: float, reference_err: float, scale: float, dtype: str) -> bool:
    """``target_err <= m * reference_err + eps * scale`` (errors against the golden, RMS)."""
    return target_err <= multiple_for(dtype) * reference_err + machine_eps(dtype) * scale


@dataclass(frozen=True)
class StepFigures:
    """One step's figures: golden, reference and target values of each scalar figure, and the
    weights' relative distances after the step: reference from golden, target from golden,
    target from reference (each relative to the golden weights' norm)."""

    loss: tuple[float, float, float]
    grad_norm: tuple[float, float, float]
    update_norm: tuple[float, float, float]
    weights: tuple[float, float, float]

    def errors(self, figure: str) -> tuple[float, float]:
        """``(reference, target)`` relative errors of ``figure`` against the golden."""
        if figure == "weights":
            return self.weights[0], self.weights[1]
        golden, reference, target = getattr(self, figure)
        scale = abs(golden) or 1.0
        return _relative(reference, golden, scale), _relative(target, golden, scale)

    def apart(self, figure: str) -> float:
        """How far the target is from the reference in ``figure``, relative to the golden."""
        if figure == "weights":
            return self.weights[2]
        golden, reference, target = getattr(self, figure)
        return _relative(target, reference, abs(golden) or 1.0) if math.isfinite(reference) else float("inf")


def _relative(value: float, golden: float, scale: float) -> float:
    if not math.isfinite(value):
        return float("inf")
    return abs(value - golden) / scale


@dataclass(frozen=True)
class Judgement:
    """The verdict over a trajectory, with the figures it rests on.

    ``first_step`` (1-based) and ``figure`` name the first step and figure outside the band
    (None for pass and drift); ``error`` and ``band`` are their values there. ``worst`` is the
    largest ratio of a target error to its band over the whole run (below 1 within it), and
    ``grown`` the largest ratio of a band to the tight floor: how much the reference's own error
    grew.
    """

    verdict: str
    first_step: int | None = None
    figure: str | None = None
    error: float | None = None
    band: float | None = None
    worst: float = 0.0
    grown: float = 1.0


def judge_trajectory(steps: Sequence[StepFigures], dtype: str) -> Judgement:
    """The verdict of the module docstring over ``steps`` (step 1 first).

    A golden figure that is not finite makes the run not comparable (the float64 run itself
    diverged: there is no noise floor to judge against).
    """
    if not steps:
        return Judgement("not_comparable")
    if any(not math.isfinite(getattr(s, f)[0]) for s in steps for f in FIGURES[:3]):
        return Judgement("not_comparable")
    m, eps = multiple_for(dtype), rounding_floor(dtype)
    tight = {f: m * steps[0].errors(f)[0] + eps for f in FIGURES}
    grown: dict[str, float] = {f: 0.0 for f in FIGURES}
    all_tight, worst, most_grown = True, 0.0, 1.0
    for number, step in enumerate(steps, start=1):
        for figure in FIGURES:
            reference_err, target_err = step.errors(figure)
            grown[figure] = max(grown[figure], reference_err if reference_err != float("inf") else 0.0)
            band = m * grown[figure] + eps
            most_grown = max(most_grown, band / tight[figure])
            worst = max(worst, target_err / band)
            if target_err > band:
                return Judgement("fail", number, figure, target_err, band, worst, most_grown)
            all_tight = all_tight and step.apart(figure) <= tight[figure]
    return Judgement("pass" if all_tight else "drift", worst=worst, grown=most_grown)


#: The figures of a step judged locally, in the order a fault is looked for.
LOCAL_FIGURES = ("loss", "grads", "update", "state")


@dataclass(frozen=True)
class LocalFigures:
    """One step judged *locally*: from the target's own weights (and optimiser state) before
    the step, a float64 and a reference-dtype run compute the same step on the same batch, so
    nothing that earlier steps amplified enters the comparison.

    ``loss`` holds the golden, reference and target values. ``grads``, ``update`` and ``state``
    hold ``(reference error, target error, scale)``, RMS over all elements: the gradients
    against the float64 run's; the parameter update and the optimiser state after the step
    against a float64 optimiser step fed the *target's* gradients (so a gradient near zero
    whose sign two correct backward passes disagree on cannot make an optimiser look wrong).
    ``state`` is the worst kind of state (``exp_avg``, ``step``, ...); zeros without state.
    """

    loss: tuple[float, float, float]
    grads: tuple[float, float, float]
    update: tuple[float, float, float]
    state: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def check(self, figure: str, dtype: str) -> tuple[float, float]:
        """``(error, allowed)`` of ``figure``, both relative to its scale."""
        m, eps = multiple_for(dtype), rounding_floor(dtype)
        if figure == "loss":
            golden, reference, target = self.loss
            scale = abs(golden) or 1.0
            return _relative(target, golden, scale), m * _relative(reference, golden, scale) + eps
        reference_err, target_err, scale = getattr(self, figure)
        scale = scale or 1.0
        error = target_err / scale if math.isfinite(target_err) else math.inf
        return error, m * reference_err / scale + eps / 2


def local_failure(step: LocalFigures, dtype: str) -> tuple[str, float, float] | None:
    """The first figure of :data:`LOCAL_FIGURES` outside the three-way rule at this step, as
    ``(figure, error, allowed)``; None when the step is right given its inputs."""
    for figure in LOCAL_FIGURES:
        error, allowed = step.check(figure, dtype)
        if not error <= allowed:
            return figure, error, allowed
    return None
