"""Model-level correctness rules per dtype: calibrated on the workload when a golden exists.

**The golden rule** (used whenever the baseline has a float64 golden output). The eager CPU run
in the target's dtype, compared with the float64 golden, measures the dtype's noise floor *on
this workload*: ``floor = rms(reference - golden)``. A target passes an output when both

1. its RMS error against the golden is at most ``FP64_MULTIPLIER`` times that floor
   (``rms(target - golden) <= 2 * floor``, and never less than 2 units of roundoff of the
   dtype times ``rms(golden)``: on a tiny workload the eager floor can be below one rounding,
   and twice a sub-rounding floor is not a limit an honest computation in another order can
   be held to; OpenVINO's float32 on an AMD EPYC measured 2.02x a floor of 0.76 units, 1.5
   units in all), which catches an error of any shape; and
2. its relative bias against the golden, ``bias = <target - golden, golden> / <golden, golden>``
   (the least-squares estimate of a uniform scale error), is within ``BIAS_MULTIPLIER`` times
   the bias floor ``max(|reference's bias|, max(floor / rms(golden), HONEST_ULPS * roundoff) /
   sqrt(rows))`` (an honest engine's op may be its per-op bound off systematically),
   where ``rows`` is the number of last-dimension vectors (tokens, for logits), counted up to
   ``MAX_AVERAGED_ROWS``. Rounding noise is nearly uncorrelated with the output and averages
   out of this estimate over rows; a systematic error does not. That is what lets a bfloat16
   target, whose noise floor is about 0.6% of the output, still be caught with a 0.5% bias.
   The cap keeps the credit for averaging modest where rows share their errors (a batch of
   repeated inputs, a value broadcast to every row).

The allclose test against the same-dtype reference is *not* sufficient on its own any more:
on bfloat16 its 1e-2 tolerance passed a compile-only 1% bias in one layer.

Evidence for the multipliers (torch 2.13, CPU, tiny random ``arch:`` models, seeds 0-5 for
llama, 0-2 for gpt2 and bert, logits / hidden states / pooled output): honest targets'
``rms(target - golden) / floor`` was 0.70-1.11 for bfloat16 inductor, 0.96-1.07 for float32
inductor, exactly 1 for aot_eager; their ``|bias|`` was at most 0.65 of the bias floor
(float32 inductor on a 1-layer llama at seq 8), bfloat16 at most 0.4. Multipliers of 2 leave a
margin of 1.8x and 3x over the worst honest case. On the default ``arch:llama`` the floor was
``5.4e-3-5.7e-3`` of rms(logits) in bfloat16 and ``2.2e-7-2.8e-7`` in float32.

**Sensitivity** (:func:`judge_against_golden`): the smallest uniform relative bias of an
output that the rule flags: ``min(bias limit, error limit / rms(golden))``. A bias above it
fails unless the target's own rounding happens to offset it by more than the margin above.
An error of another shape is caught once its RMS exceeds the error limit (2x the floor).

**The allclose fallback** (no golden: a model without float64 kernels): ``allclose`` to the
*same-dtype* eager CPU reference with ``atol = rtol = TOLERANCE[dtype]``. It cannot see a
systematic error smaller than that tolerance, and has no sensitivity figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "BIAS_MULTIPLIER",
    "FP64_MULTIPLIER",
    "HONEST_MULTIPLIER",
    "HONEST_ULPS",
    "MAX_AVERAGED_ROWS",
    "TOLERANCE",
    "UNIT_ROUNDOFF",
    "GoldenFigures",
    "GoldenJudgement",
    "draw_factor",
    "group_factor",
    "honest_ulps",
    "judge_against_golden",
    "judge_against_spread",
    "roundoff_for",
    "tolerance_for",
]

TOLERANCE = {"float64": 1e-7, "float32": 1e-4, "float16": 1e-3, "bfloat16": 1e-2}
FP64_MULTIPLIER = 2.0
BIAS_MULTIPLIER = 2.0
#: Units of roundoff of the op's own dtype that one op of the emulated honest implementation
#: (:mod:`bakeoff.checks.rounding`) may err by. float32: vectorised exp/tanh/erf approximations
#: and reordered reductions reach a few units (ONNX Runtime and OpenVINO in float32 measured
#: 2-3x eager's error against float64 on tiny models); 8 units leaves a margin over that.
#: bfloat16/float16: engines round once per op (or less often, keeping float32 intermediates),
#: so one unit of the dtype is the honest difference.
HONEST_ULPS = {"float64": 8.0, "float32": 8.0, "float16": 1.0, "bfloat16": 1.0}
#: The error limit's multiple of the emulated honest implementation's error: one seeded draw of
#: an implementation at the per-op bound; draws with other seeds differed by 10-15% (tiny llama,
#: BERT), and 1.5 leaves a margin over that.
HONEST_MULTIPLIER = 1.5
MAX_AVERAGED_ROWS = 16
#: Unit roundoff (half the distance from 1.0 to the next number) per floating dtype.
UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}


def tolerance_for(dtype: str) -> float:
    """Allclose tolerance for outputs computed in ``dtype`` (integers must match exactly)."""
    return TOLERANCE.get(dtype, 0.0)


def honest_ulps(dtype: str) -> float:
    """Units of roundoff per op the emulated honest implementation errs by in ``dtype``."""
    return HONEST_ULPS.get(dtype, HONEST_ULPS["float32"])


def roundoff_for(dtype: str) -> float:
    """Unit roundoff of ``dtype``; float32's for a dtype not in the table."""
    return UNIT_ROUNDOFF.get(dtype, UNIT_ROUNDOFF["float32"])


@dataclass(frozen=True)
class GoldenFigures:
    """What the golden rule needs about one output, all against the float64 golden.

    ``error``/``floor`` are RMS errors of the target/reference, ``bias``/``ref_bias`` their
    relative biases, ``golden_rms`` the golden's RMS, ``rows`` its number of last-dim vectors;
    ``honest``/``honest_bias`` the same for the emulated honest implementation
    (:mod:`bakeoff.checks.rounding`), None where the baseline has no such run.
    """

    golden_rms: float
    floor: float
    error: float
    ref_bias: float
    bias: float
    rows: int = 1
    honest: float | None = None
    honest_bias: float | None = None


@dataclass(frozen=True)
class GoldenJudgement:
    """The golden rule's verdict on one output, with the limits it applied.

    ``error_limit`` is absolute (RMS); ``bias_limit`` and ``sensitivity`` are relative to
    rms(golden), None for an all-zero golden (no scale to be relative to); ``honest_limit`` the
    part of the error limit the honest spread sets (absolute, None without one).
    """

    passed: bool
    error_limit: float
    bias_limit: float | None
    sensitivity: float | None
    problem: str = ""
    honest_limit: float | None = None


def _times(error: float, limit: float) -> str:
    """``error`` as a multiple of ``limit``: ``2.6x``, ``23,300x``."""
    if not limit > 0:
        return "infinitely beyond"
    ratio = error / limit
    return f"{ratio:,.0f}x" if ratio >= 1000 else f"{ratio:.3g}x"


#: The chance an honest capture (one capture's calls, all of them) is called wrong by the
#: pooled-spread limits below.
FALSE_ALARM = 1e-3


def _chi2_quantile(df: int, p: float) -> float:
    """The ``p`` quantile of chi-squared with ``df`` degrees of freedom (Wilson-Hilferty: within
    a few percent at ``df=1`` in the tails used here, closer above)."""
    from statistics import NormalDist

    z = NormalDist().inv_cdf(p)
    a = 2.0 / (9.0 * df)
    return df * max(1.0 - a + z * math.sqrt(a), 1e-6) ** 3


def _ratio_bound(elements: int, tail: float, measured: int) -> float:
    """How many times a pooled spread measured from ``measured`` honest values an honest RMS
    error over ``elements`` values may reach but with chance ``tail``: the RMS of that many
    normal draws, widened by the spread's own uncertainty (``1 + 1/sqrt(measured)``)."""
    elements, measured = max(int(elements), 1), max(int(measured), 1)
    high = math.sqrt(_chi2_quantile(elements, 1.0 - tail) / elements)
    return max(HONEST_MULTIPLIER, high * (1.0 + 1.0 / math.sqrt(measured)))


def draw_factor(elements: int, draws: int, measured: int) -> float:
    """The multiple of a capture's pooled spread (from ``measured`` honest values over its
    ``draws`` calls) that one call's RMS error over ``elements`` values may reach when it is as
    honest: every call stays under it but in :data:`FALSE_ALARM` of runs. At least
    :data:`HONEST_MULTIPLIER` (a large tensor's RMS hardly varies). A scalar of 20 calls: 5.1x;
    of 8: 5.4x; a 4,000-value tensor of 5 calls: 1.5x."""
    return _ratio_bound(elements, FALSE_ALARM / max(int(draws), 1), measured)


def group_factor(elements: int, measured: int) -> float:
    """The multiple of a capture's pooled spread (from ``measured`` honest values) that the RMS
    error over all of its calls (``elements`` values) may reach when it is as honest: what
    catches an error every call shares below each call's own limit. 20 scalar calls: 1.8x."""
    return _ratio_bound(elements, FALSE_ALARM, measured)


def judge_against_spread(
    error: float,
    spread: float,
    scale: float,
    dtype: str,
    pooled: float = 0.0,
    elements: int = 1,
    draws: int = 1,
    measured: int = 1,
) -> GoldenJudgement:
    """The honest-spread rule without a golden (a script's captures): an output passes when its
    RMS error against the reference, ``error``, is at most ``HONEST_MULTIPLIER`` times its honest
    spread, and never less than two units of roundoff of ``scale`` (rms(reference)). The honest
    spread is the RMS distance of the honest reference (the reference run again under rounding
    noise) from the reference, ``spread``, or ``pooled`` (relative to ``scale``: the spread of
    every call of the same capture, pooled) times ``scale`` where that is larger: one scalar's
    single draw can land near zero by chance. The pooled spread's limit is :func:`draw_factor`
    times it, for a call of ``elements`` values among the capture's ``draws`` calls, the spread
    measured over ``measured`` values: one scalar's error is one draw, and the largest of 20
    honest draws reaches 3-4 times their RMS (the whole capture's errors together are held to
    :func:`group_factor` by the caller). ``sensitivity``
    is the limit relative to ``scale``: the smallest uniform relative error flagged.
    ``bias_limit`` is None: without a golden there is no bias test."""
    limit = max(
        HONEST_MULTIPLIER * spread,
        (draw_factor(elements, draws, measured) if draws > 1 else HONEST_MULTIPLIER) * pooled * scale,
        FP64_MULTIPLIER * roundoff_for(dtype) * scale,
    )
    problem = ""
    if not error <= limit:  # also catches NaN
        relative = scale if scale > 0 else 1.0
        unit_name = "of rms(reference)" if scale > 0 else "absolute"
        problem = (
            f"rms error vs the reference {error / relative:.3g} {unit_name}: {_times(error, limit)} the honest "
            f"spread {limit / relative:.3g} (the reference run again with every op a few units of roundoff off)"
        )
    return GoldenJudgement(not problem, limit, None, limit / scale if scale > 0 else None, problem, limit)


def judge_against_golden(figures: GoldenFigures, dtype: str, margin: float = 1.0) -> GoldenJudgement:
    """Apply the golden rule (see the module docstring) to one output computed in ``dtype``;
    ``margin`` widens both limits: a later call of a target whose every call draws its own
    rounding is one more draw, held to :func:`draw_factor` times them (the first call's limits
    are for one draw)."""
    f = figures
    unit = roundoff_for(dtype)
    eager_limit = margin * FP64_MULTIPLIER * max(f.floor, unit * f.golden_rms)
    honest_limit = margin * HONEST_MULTIPLIER * f.honest if f.honest is not None and math.isfinite(f.honest) else None
    error_limit = max(eager_limit, honest_limit or 0.0)
    bias_limit = sensitivity = None
    if f.golden_rms > 0:
        # an honest engine's op may be HONEST_ULPS units off systematically (an accumulation in
        # order, a fused rounding), which no averaging over rows removes: never below that
        relative_floor = max(f.floor / f.golden_rms, honest_ulps(dtype) * unit)
        measured = [abs(b) for b in (f.ref_bias, f.honest_bias) if b is not None and math.isfinite(b)]
        bias_floor = max([*measured, relative_floor / math.sqrt(min(max(f.rows, 1), MAX_AVERAGED_ROWS))])
        bias_limit = margin * BIAS_MULTIPLIER * bias_floor
        sensitivity = min(bias_limit, error_limit / f.golden_rms)
    problem = ""
    scale = f.golden_rms if f.golden_rms > 0 else 1.0
    unit_name = "of rms(golden)" if f.golden_rms > 0 else "absolute"
    if not f.error <= error_limit:  # also catches NaN
        problem = f"rms error vs float64 golden {f.error / scale:.3g} {unit_name}"
        if honest_limit is not None and honest_limit >= eager_limit:
            problem += (
                f": {_times(f.error, honest_limit)} the honest spread {honest_limit / scale:.3g} (an implementation "
                f"within {honest_ulps(dtype):g} units of roundoff per op), {_times(f.error, f.floor)} the eager "
                f"{dtype} run's {f.floor / scale:.3g}"
            )
        else:
            problem += f" > {margin * FP64_MULTIPLIER:.3g}x the eager {dtype} run's {f.floor / scale:.3g}"
    elif bias_limit is not None and not abs(f.bias) <= bias_limit:
        problem = (
            f"relative bias vs float64 golden {f.bias:+.3g} beyond +-{bias_limit:.3g} "
            f"({margin * BIAS_MULTIPLIER:.3g}x the eager {dtype} run's bias floor)"
        )
    return GoldenJudgement(not problem, error_limit, bias_limit, sensitivity, problem, honest_limit)
