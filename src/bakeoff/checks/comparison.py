"""Outputs against a reference, as numbers: the :class:`Correctness` value and the comparison
behind it. :func:`compare_tensor` judges one output tensor by the golden rule (with a float64
golden), the honest-spread rule (a script's captures, with the emulated honest run), allclose
(the fallback without either) or exact equality (integers); :func:`compare_outputs` judges every
flattened output and says the verdict; :func:`pooled_spreads` pools a capture's honest spread
over its calls. Pure functions over tensors, with no knowledge of baselines or trials (the
:class:`~bakeoff.checks.correctness.CorrectnessCheck` loads those and calls them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from bakeoff.analysis.tolerance import (
    FP64_MULTIPLIER,
    HONEST_MULTIPLIER,
    GoldenFigures,
    GoldenJudgement,
    draw_factor,
    group_factor,
    judge_against_golden,
    judge_against_spread,
    roundoff_for,
    tolerance_for,
)
from bakeoff.checks.outputs import max_abs_difference
from bakeoff.codec import Value

__all__ = [
    "Correctness",
    "TensorComparison",
    "bulk_of",
    "compare_outputs",
    "compare_tensor",
    "golden_figures",
    "pooled_spreads",
]


@dataclass(frozen=True)
class TensorComparison(Value):
    """One output tensor against its reference.

    ``max_rel_err`` is the largest absolute error divided by the largest reference magnitude
    (a scale-aware figure that does not explode where the reference is near zero). ``rule``
    says which test passed: ``golden`` (error and bias against the float64 golden within a
    multiple of the eager same-dtype run's own; see :mod:`bakeoff.analysis.tolerance`),
    ``honest`` (a script's capture within the honest spread of the reference, without a golden),
    ``allclose`` (within the dtype's tolerance of the same-dtype eager reference: the fallback
    without a golden), ``exact`` (integers), or ``fp64`` in documents stored before the golden
    rule; empty when it failed.

    The golden rule's figures, all relative to rms(golden) and None without a golden:
    ``golden_err`` the target's RMS error, ``floor`` the eager reference's (the dtype's noise
    floor on this workload), ``bias`` the target's relative bias, and ``sensitivity`` the
    smallest uniform relative bias of this output the rule flags, ``honest`` the honest spread:
    the RMS error of the baseline's emulated honest implementation (every op within a few units
    of roundoff, :mod:`bakeoff.checks.rounding`), the error limit when it exceeds twice the floor.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    max_abs_err: float
    max_rel_err: float
    cosine: float
    passed: bool
    rule: str = ""
    problem: str = ""
    golden_err: float | None = None
    floor: float | None = None
    bias: float | None = None
    sensitivity: float | None = None
    honest: float | None = None


@dataclass(frozen=True)
class Correctness(Value):
    """The verdict for a target's outputs against the baseline.

    A target in another dtype is judged against the eager CPU run *in its dtype*; ``drift``
    then adds, for information, how far its outputs are from the workload's own dtype
    (``{"reference": "eager:float32", "max_abs_err": ...}``): what the dtype change costs. A
    mixed-precision target is judged against the eager CPU run under autocast in its dtype
    (``amp:bfloat16``), with the drift from the workload's own dtype likewise.

    ``sensitivity`` (derived from the outputs, stored with them) is the largest of the outputs'
    sensitivities: a uniform relative bias of any one output above it is flagged, whichever
    output it is in, i.e. what a ``pass`` rules out (a bias of every output at once is flagged
    from the smallest output's sensitivity up). None when no output was judged against a float64 golden
    (the allclose fallback has no such figure).
    """

    DERIVED: ClassVar[tuple[str, ...]] = ("max_abs_err", "max_rel_err", "min_cosine", "sensitivity")

    verdict: str
    reason: str = ""
    reference: str = ""
    tolerance: float | None = None
    outputs: tuple[TensorComparison, ...] = ()
    drift: dict[str, Any] | None = None

    @property
    def max_abs_err(self) -> float | None:
        return max((o.max_abs_err for o in self.outputs), default=None)

    @property
    def max_rel_err(self) -> float | None:
        return max((o.max_rel_err for o in self.outputs), default=None)

    @property
    def min_cosine(self) -> float | None:
        return min((o.cosine for o in self.outputs), default=None)

    @property
    def sensitivity(self) -> float | None:
        return max((o.sensitivity for o in self.outputs if o.sensitivity is not None), default=None)

    @property
    def overflowed(self) -> bool:
        """Whether the outputs are not finite where the workload's own dtype's are: the dtype's
        cost (``drift``) is infinite, stored as the largest float JSON keeps. The verdict, which
        judges the target against eager in its own dtype, cannot show it."""
        err = (self.drift or {}).get("max_abs_err")
        return isinstance(err, int | float) and not err < _OVERFLOW

    @property
    def lost(self) -> float | None:
        """The largest RMS error against the float64 golden (relative to rms(golden)) of an
        output computed in another dtype than the workload's own, where it is at least
        :data:`LOST`: the dtype cannot hold the model's result. Eager in that dtype loses it too,
        so the verdict, judging the target against it, can pass. None otherwise."""
        errors = [o.golden_err for o in self.outputs if o.golden_err is not None]
        worst = max(errors, default=None)
        return worst if self.drift and worst is not None and worst >= LOST else None


#: A dtype drift at least this large is a non-finite output.
_OVERFLOW = 1e300
#: An output whose error against the float64 golden is at least this share of the output is
#: lost: no longer the model's result (half of it; bfloat16's honest floor is below 1%).
LOST = 0.5


def _rms(diff: Any) -> float:
    return float(diff.double().pow(2).mean().sqrt()) if diff.numel() else 0.0


def _bias(value: Any, golden: Any) -> float:
    """Least-squares relative scale error of ``value`` against ``golden`` (0 for a zero golden)."""
    norm = float((golden * golden).sum())
    return float(((value - golden) * golden).sum()) / norm if norm > 0 else 0.0


#: Elements whose golden magnitude is beyond this multiple of the output's median nonzero
#: magnitude (a mask's fill: -1e9, the dtype's lowest) are left out of a second judgement of the
#: rest (:func:`bulk_of`): over the whole output they set rms(golden), and the error limit scales
#: with it, so a wrong value of every other element hid under them (a classifier's 504 allowed
#: logits negated passed beside 8 filled with -1e9).
OUTLIER_FACTOR = 1e3
#: At most this many elements give the median :func:`bulk_of` scales from (a vocabulary's logits
#: over long sequences run to 10^8; the threshold is a factor of 1000 off it, not a fine figure).
_MEDIAN_SAMPLE = 2**20


def bulk_of(golden: Any) -> Any | None:
    """The elements of ``golden`` (finite, within :data:`OUTLIER_FACTOR` times its median
    nonzero magnitude) as a mask, or None where that is every finite element (or none)."""
    import torch

    gold = golden.detach().cpu().double()
    finite = torch.isfinite(gold)
    magnitude = gold.abs()
    nonzero = magnitude[finite & (magnitude > 0)]
    if not nonzero.numel():
        return None
    step = nonzero.numel() // _MEDIAN_SAMPLE + 1  # a large output's median from evenly spaced elements
    bulk = finite & (magnitude <= OUTLIER_FACTOR * float(nonzero[::step].median()))
    return bulk if 0 < int(bulk.sum()) < int(finite.sum()) else None


def golden_figures(
    result: Any, reference: Any, golden: Any, honest: Any | None = None, within: Any | None = None
) -> GoldenFigures:
    """The golden rule's inputs for one output, over the elements finite in all three (four,
    with the emulated honest implementation's output of the same shape), and in ``within`` (a
    mask) where given."""
    import torch

    if honest is not None and tuple(honest.shape) != tuple(golden.shape):
        honest = None
    given = (result, reference, golden) if honest is None else (result, reference, golden, honest)
    tensors = [t.detach().cpu().double() for t in given]
    keep = torch.stack([torch.isfinite(t) for t in tensors]).all(dim=0)
    if within is not None:
        keep &= within
    gold = tensors[2]
    rows = max(gold.numel() // gold.shape[-1], 1) if gold.dim() >= 2 and gold.shape[-1] else 1
    res, ref, gold, *rest = (t[keep] for t in tensors)
    return GoldenFigures(
        golden_rms=_rms(gold),
        floor=_rms(ref - gold),
        error=_rms(res - gold),
        ref_bias=_bias(ref, gold),
        bias=_bias(res, gold),
        rows=rows,
        honest=_rms(rest[0] - gold) if rest else None,
        honest_bias=_bias(rest[0], gold) if rest else None,
    )


def _judged_by_golden(
    res: Any, ref: Any, golden: Any, honest: Any | None, dtype: str, margin: float = 1.0
) -> tuple[GoldenFigures, GoldenJudgement]:
    """The golden rule over the whole output, then, where it passed, over its bulk
    (:func:`bulk_of`): the figures and judgement of the one that failed, else the whole's."""
    import torch

    figures = golden_figures(res, ref, golden, honest)
    judged = judge_against_golden(figures, dtype, margin)
    bulk = bulk_of(golden) if judged.passed else None
    if bulk is None:
        return figures, judged
    inner = golden_figures(res, ref, golden, honest, within=bulk)
    within = judge_against_golden(inner, dtype, margin)
    if within.passed:
        return figures, judged
    biggest = float(golden.detach().abs().double()[torch.isfinite(golden)].max())
    problem = (
        f"the {int(bulk.sum())} of {golden.numel()} elements within {OUTLIER_FACTOR:g}x the median magnitude (the "
        f"others, up to {biggest:.3g}, set rms(golden) of the whole): {within.problem}"
    )
    return inner, replace(within, problem=problem)


def compare_tensor(
    name: str,
    result: Any,
    reference: Any,
    golden: Any | None,
    dtype: str,
    honest: Any | None = None,
    pooled: float = 0.0,
    draws: int = 1,
    measured: int = 1,
    margin: float = 1.0,
) -> TensorComparison:
    """Compare one output tensor; ``reference`` is same-dtype eager, ``golden`` float64 eager,
    ``honest`` the same-dtype eager run under :class:`bakeoff.checks.rounding.RoundingNoise`.

    With a golden of the same shape the golden rule decides (with the honest run's error as
    the honest spread where given); without one but with the honest run, the honest-spread rule
    (:func:`~bakeoff.analysis.tolerance.judge_against_spread`: a script's captures); allclose to
    the reference is the fallback only without either; ``pooled`` is that rule's relative spread
    pooled over the calls of one capture (:func:`pooled_spreads`), ``draws`` how many calls and
    ``measured`` how many honest values it pools.
    """
    import torch

    if tuple(result.shape) != tuple(reference.shape):
        return TensorComparison(
            name,
            tuple(result.shape),
            str(result.dtype).removeprefix("torch."),
            float("inf"),
            float("inf"),
            0.0,
            False,
            problem=f"shape {tuple(result.shape)} != reference {tuple(reference.shape)}",
        )
    res, ref = result.detach().cpu().double(), reference.detach().cpu().double()
    max_abs = max_abs_difference(res, ref)
    finite_ref = ref[torch.isfinite(ref)]
    scale = float(finite_ref.abs().max()) if finite_ref.numel() else 0.0
    max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
    flat_res, flat_ref = res.flatten(), ref.flatten()
    norms = float(flat_res.norm() * flat_ref.norm())
    cosine = float(flat_res @ flat_ref) / norms if norms > 0 else float(max_abs == 0)
    dtype_name = str(result.dtype).removeprefix("torch.")
    common = (name, tuple(result.shape), dtype_name, max_abs, max_rel, cosine)
    if not result.is_floating_point():
        ok = bool(torch.equal(result.cpu(), reference.cpu()))
        return TensorComparison(*common, ok, rule="exact" if ok else "", problem="" if ok else "integer output differs")
    both_finite = torch.isfinite(res) & torch.isfinite(ref)
    finite = bool((both_finite | (res == ref) | (torch.isnan(res) & torch.isnan(ref))).all())
    if golden is not None and tuple(golden.shape) == tuple(result.shape):
        figures, judged = _judged_by_golden(res, ref, golden, honest, dtype, margin)
        relative = figures.golden_rms if figures.golden_rms > 0 else None
        extra = {
            "golden_err": figures.error / relative if relative else None,
            "floor": figures.floor / relative if relative else None,
            "bias": figures.bias if relative else None,
            "sensitivity": judged.sensitivity,
            "honest": judged.honest_limit / relative if relative and judged.honest_limit is not None else None,
        }
        if not finite:
            return TensorComparison(*common, False, problem="non-finite values differ", **extra)
        return TensorComparison(*common, judged.passed, "golden" if judged.passed else "", judged.problem, **extra)
    if honest is not None and tuple(honest.shape) == tuple(result.shape):  # a script's capture
        keep = both_finite & torch.isfinite(hon := honest.detach().cpu().double())
        scale = _rms(ref[keep])
        error, spread = _rms((res - ref)[keep]), _rms((hon - ref)[keep])
        judged = judge_against_spread(error, spread, scale, dtype, pooled, int(keep.sum()), draws, measured)
        extra = {"sensitivity": judged.sensitivity, "honest": judged.error_limit / scale if scale > 0 else None}
        if not finite:
            return TensorComparison(*common, False, problem="non-finite values differ", **extra)
        return TensorComparison(*common, judged.passed, "honest" if judged.passed else "", judged.problem, **extra)
    tol = tolerance_for(dtype)
    if finite and torch.allclose(res, ref, atol=tol, rtol=tol, equal_nan=True):
        return TensorComparison(*common, True, "allclose")
    problem = "non-finite values differ" if not finite else f"max abs error {max_abs:.3g} > tol {tol:g}"
    return TensorComparison(*common, False, problem=problem)


#: An honest spread (relative) above which a capture is said to tell little from rounding.
LOOSE_SPREAD = 0.01


def _capture_of(name: str) -> str:
    """The capture a flattened name's call belongs to: ``loss[3]`` -> ``loss[]``."""
    import re

    return re.sub(r"\[\d+\]", "[]", name)


def pooled_spreads(reference: Mapping[str, Any], honest: Mapping[str, Any]) -> dict[str, float]:
    """Each floating capture's honest spread relative to its scale, pooled (RMS) over every call
    of the same capture: ``loss[0]``..``loss[99]`` share one figure, keyed back by each name.
    The capture is the name without its call indices (``loss[3]`` -> ``loss``)."""
    import torch

    groups: dict[str, list[float]] = {}
    for name, ref in reference.items():
        hon = honest.get(name)
        if hon is None or hon.shape != ref.shape or not ref.is_floating_point() or not ref.numel():
            continue
        r, h = ref.detach().cpu().double(), hon.detach().cpu().double()
        keep = torch.isfinite(r) & torch.isfinite(h)
        scale = _rms(r[keep])
        if scale > 0:
            groups.setdefault(_capture_of(name), []).append(_rms((h - r)[keep]) / scale)
    pooled = {group: (sum(x * x for x in xs) / len(xs)) ** 0.5 for group, xs in groups.items()}
    return {name: pooled[group] for name in reference if (group := _capture_of(name)) in pooled}


def _judged_together(
    comparisons: list[TensorComparison],
    outputs: Mapping[str, Any],
    reference: Mapping[str, Any],
    pooled: Mapping[str, float],
    calls: Counter,
    values: Counter,
) -> list[TensorComparison]:
    """The comparisons, with the calls of a capture called several times failed together where
    their errors, pooled (RMS over every value), exceed :func:`group_factor` times the capture's
    pooled honest spread: an error every call shares, below each call's own limit (each call of
    a scalar may reach several times the spread by chance; all of them together may not). The
    calls whose own error is beyond :data:`HONEST_MULTIPLIER` times the spread are the ones
    failed, and each says it was judged with the others. A call that failed on its own keeps its
    own reason and is left out (one far-off call would otherwise blame honest ones)."""
    import torch

    relative: dict[str, tuple[float, int]] = {}  # name -> (rms error / rms reference, values)
    floor: dict[str, float] = {}  # group -> two units of roundoff of its dtype, as each call's limit has
    for c in comparisons:
        if calls[_capture_of(c.name)] < 2 or c.name not in pooled or c.rule != "honest":
            continue  # a call that failed on its own is its own finding (and may not even compare)
        res, ref = outputs[c.name].detach().cpu().double(), reference[c.name].detach().cpu().double()
        keep = torch.isfinite(res) & torch.isfinite(ref)
        scale = _rms(ref[keep])
        if scale > 0:
            relative[c.name] = (_rms((res - ref)[keep]) / scale, int(keep.sum()))
            unit = FP64_MULTIPLIER * roundoff_for(c.dtype)
            floor[_capture_of(c.name)] = max(floor.get(_capture_of(c.name), 0.0), unit)
    judged = list(comparisons)
    for group in {_capture_of(name) for name in relative}:
        found = {name: figures for name, figures in relative.items() if _capture_of(name) == group}
        n = sum(count for _, count in found.values())
        together = (sum(e * e * count for e, count in found.values()) / n) ** 0.5
        spread = pooled[next(iter(found))]
        limit = max(group_factor(n, values[group]) * spread, floor[group])
        if not together > limit:
            continue
        problem = (
            f"the {len(found)} calls of {group.replace('[]', '')} together: rms error {together:.3g} of "
            f"rms(reference), {together / limit:.3g}x the limit {limit:.3g} (their pooled honest spread {spread:.3g}"
            f"{f' x{limit / spread:.2g}' if spread > 0 else ''})"
        )
        judged = [
            replace(c, passed=False, rule="", problem=problem)
            if c.name in found and found[c.name][0] > max(HONEST_MULTIPLIER * spread, floor[group])
            else c
            for c in judged
        ]
    return judged


def _some(names: list[str], most: int = 3) -> str:
    """The first ``most`` names, and how many more (a script's captures run to hundreds)."""
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def compare_outputs(
    outputs: Mapping[str, Any],
    reference: Mapping[str, Any],
    golden: Mapping[str, Any] | None,
    dtype: str,
    reference_name: str,
    dtypes: Mapping[str, str] | None = None,
    honest: Mapping[str, Any] | None = None,
    pooled: Mapping[str, float] | None = None,
    same_dtypes: bool = False,
    later_call: bool = False,
) -> Correctness:
    """Compare flattened outputs with the flattened same-dtype reference (and golden, and the
    emulated honest run); each output is judged in ``dtype``, or in its own from ``dtypes`` (by
    name) where given. ``same_dtypes``: an output in another dtype than its reference's fails,
    whatever its values (a model's outputs; a device's autocast may return another dtype than
    the CPU's, so an ``amp`` target's and a script's captures are judged by value only).
    ``later_call``: the outputs are a later call's on the same input, one more draw of a target
    whose calls round differently: the golden rule's limits are widened by :func:`draw_factor`
    for two draws of the output's size."""
    tol = tolerance_for(dtype)
    comparisons = []
    missing = [name for name in reference if name not in outputs]
    extra = [name for name in outputs if name not in reference]
    calls = Counter(_capture_of(name) for name in pooled or {})
    values = Counter()
    for name in pooled or {}:
        values[_capture_of(name)] += int(reference[name].numel())
    for name, ref in reference.items():
        if name in outputs:
            gold = golden.get(name) if golden is not None else None
            fair = honest.get(name) if honest is not None else None
            judged_in = (dtypes or {}).get(name, dtype)
            spread = (pooled or {}).get(name, 0.0)
            group = _capture_of(name)
            margin = draw_factor(ref.numel(), 2, ref.numel()) if later_call else 1.0
            compared = compare_tensor(
                name, outputs[name], ref, gold, judged_in, fair, spread, calls[group] or 1, values[group] or 1, margin
            )
            if same_dtypes and outputs[name].dtype != ref.dtype:  # e.g. a float32 model's output in bfloat16
                theirs = str(ref.dtype).removeprefix("torch.")
                said = f"dtype {compared.dtype}, the reference's {theirs}"
                said += f"; {compared.problem}" if compared.problem else ""
                compared = replace(compared, passed=False, rule="", problem=said)
            comparisons.append(compared)
    if pooled:
        comparisons = _judged_together(comparisons, outputs, reference, pooled, calls, values)
    failed = [c for c in comparisons if not c.passed]
    fallback = [c.name for c in comparisons if c.rule == "allclose"]
    note = (
        f"no float64 golden for {_some(fallback)}: judged by allclose(atol=rtol={tol:g}) to "
        f"{reference_name} only, blind to a systematic error below that"
        if fallback
        else ""
    )
    # ``honest`` is the limit, HONEST_MULTIPLIER times the spread: the words speak of the spread
    loose = [
        c.name for c in comparisons if c.golden_err is None and (c.honest or 0.0) > HONEST_MULTIPLIER * LOOSE_SPREAD
    ]
    if loose:  # rounding alone moves these by over 1%: a fault below that cannot be told from it
        note = "; ".join(filter(None, [note, f"rounding alone moves {_some(loose)} by over 1% (chaotic or random)"]))
    if missing or extra or failed:
        parts = []
        if missing:
            parts.append("missing outputs: " + ", ".join(missing))
        if extra:
            parts.append("unexpected outputs: " + ", ".join(extra))
        parts.extend(f"{c.name}: {c.problem}" for c in failed)
        parts.extend([note] if note else [])
        return Correctness("fail", "; ".join(parts), reference_name, tol, tuple(comparisons))
    if not comparisons:
        return Correctness("not_comparable", "the workload returned no tensors", reference_name, tol)
    return Correctness("pass", note, reference_name, tol, tuple(comparisons))
