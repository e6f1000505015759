"""Where a divergence starts: module calls judged three ways, and their origins (pure functions).

Each module call is recorded in three runs on the same inputs: a float64 *golden*, the
*reference* (eager CPU in the target's dtype) and the *target*. Every recorded tensor is judged
by the scale-aware three-way rule

    rmse(target, golden) <= m * rmse(reference, golden) + eps * rms(golden)

with m = 2 (fp32) or 3 (fp16/bf16) and eps the dtype's machine epsilon: the target may be as
wrong as the reference dtype's own rounding, a few times over, never more. A fixed absolute
tolerance is not enough: a normalisation layer amplifies a tiny error on small activations, and
an ``allclose`` then reports a second, false origin after it. Integer tensors (token choices, a
router's top-k) are discrete: any differing element fails them.

The *origin* is the leaf-most module call whose output fails while all its inputs pass: nothing
wrong came in, something wrong went out, and no call inside it is such a call. Calls are taken
in completion order (a parent completes after its children), so the first origin is the first
place the computation went wrong; every failing call after it that is not one of its ancestors
up to the next origin is counted downstream of it.

What it cannot see: a fault inside a call whose inputs already diverged (it is downstream,
not an origin), faults below the reference dtype's own noise, and work done outside modules
(functions the model calls between modules belong to the module that calls them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from bakeoff.analysis.trajectory import machine_eps, multiple_for

__all__ = ["CallJudgement", "TensorFigures", "find_origins", "judge_tensor"]


@dataclass(frozen=True)
class TensorFigures:
    """One tensor's errors: ``target_err`` and ``reference_err`` are RMS errors against the golden,
    ``scale`` the golden's RMS; for a discrete tensor, ``differing`` is the share of elements
    that differ from the golden (``discrete`` True)."""

    target_err: float
    reference_err: float
    scale: float
    discrete: bool = False
    differing: float = 0.0


def judge_tensor(figures: TensorFigures, dtype: str, multiple: float | None = None) -> tuple[bool, float]:
    """``(passed, ratio)``: whether the tensor passes the three-way rule, and its error over the
    allowed error (above 1 fails; a discrete tensor's ratio is its differing share, any > 0 fails).
    ``multiple`` replaces the dtype's m (a user's tolerance for one module)."""
    if figures.discrete:
        return figures.differing == 0.0, figures.differing
    m = multiple if multiple is not None else multiple_for(dtype)
    allowed = m * figures.reference_err + machine_eps(dtype) * figures.scale
    if not math.isfinite(figures.target_err):
        return False, math.inf
    if allowed <= 0.0:
        return figures.target_err == 0.0, 0.0 if figures.target_err == 0.0 else math.inf
    ratio = figures.target_err / allowed
    return ratio <= 1.0, ratio


@dataclass(frozen=True)
class CallJudgement:
    """One module call, judged: ``key`` is ``(qualified name, call index)``, ``parent`` its
    caller's key (None for the root call), ``inputs_pass``/``output_pass`` the verdicts over all
    its recorded tensors, ``ratio`` its outputs' worst error over the allowed error."""

    key: tuple[str, int]
    parent: tuple[str, int] | None
    inputs_pass: bool
    output_pass: bool
    ratio: float = 0.0


def _ancestors(call: CallJudgement, by_key: dict[tuple[str, int], CallJudgement]) -> list[tuple[str, int]]:
    chain, parent = [], call.parent
    while parent is not None and parent in by_key and parent not in chain:
        chain.append(parent)
        parent = by_key[parent].parent
    return chain


def find_origins(calls: Sequence[CallJudgement]) -> list[tuple[CallJudgement, int]]:
    """Every origin, in completion order (``calls`` is), with how many failing calls are
    downstream of it: those that complete after it and before the next origin, other than the
    origins' ancestors (a caller fails because a call inside it did, not after it)."""
    by_key = {c.key: c for c in calls}
    candidates = [c for c in calls if not c.output_pass and c.inputs_pass]
    inside = {a for c in candidates for a in _ancestors(c, by_key)}
    origins = [c for c in candidates if c.key not in inside]  # leaf-most: no candidate inside it
    starts = {c.key for c in origins}
    enclosing = {a for c in origins for a in _ancestors(c, by_key)}
    counts = [0] * len(origins)
    current = -1
    for c in calls:
        if c.key in starts:
            current += 1
        elif current >= 0 and not c.output_pass and c.key not in enclosing:
            counts[current] += 1
    return list(zip(origins, counts, strict=True))
