"""Regression detection: what changed for a workload on a target between two runs.

Pure functions over stored values. The vocabulary is small and fixed (after airspeed velocity):

* ``improved`` / ``regressed``: the metric moved beyond its threshold, in the good or bad direction;
* ``unchanged``: it did not move beyond its threshold;
* ``not_comparable``: the two results do not measure the same thing (the workload's fingerprint
  differs, a setting that decides what is measured differs, the adjustments ledger differs, one
  side was skipped or lacks the metric), or a timing figure moved but the data cannot say so:
  such a metric's detail starts with :data:`INCONCLUSIVE` ("not conclusive (noisy: ...)");
* ``failed``: the later result is an error.

**A change inside a noisy measurement is not a regression.** A timing figure (median latency,
first call, scenario series and rates, cost) that moved beyond its threshold is *not conclusive*
instead of better or worse when either side's timings were flagged noisy
(:func:`timing_noise`: the noise flags stored with the result, a load average above the
machine's cores, more intra-op threads than cores) or when the data cannot tell the two apart
(the ratio's interval contains 1, the cost intervals overlap). What this cannot see: a real
change measured on a busy machine is reported not conclusive, never worse; repeat it on a quiet
machine. A not conclusive metric never makes the comparison regressed.

**Runs measured differently are not compared** (:func:`settings_difference`): another input
profile, another timing mode (worker processes or one process), a cold compile cache, other
options for a scenario both ran or for a check, other padding buckets for a padded variant;
for a script run its device map, reference, captures, seed, strict mode, file comparison and
how it was timed. The target's dtype and options are in its spec (pairs are made by spec) and
the workload's dtype in its fingerprint. Sample counts, minimum times, replicates and timing in
turns are not: they change how sure a figure is, not what it measures.

Cost per million requests is compared only where both runs priced the target (a run without
prices has no cost metric): it is the figure each run's decision ranks the target by
(:func:`~bakeoff.verdicts.decision.cost_in_run`), so a change of price and a change of speed
both move it, and the detail says which.

A result's *outcome* is the worst of its metrics, in the order failed, not_comparable (when the
pair as a whole is not comparable), regressed, improved, unchanged. Thresholds are explicit
parameters (:class:`Thresholds`), never hidden constants. What differs between the two
environments is kept with each pair (:class:`EnvironmentDiff`) as a difference, never tested
as the cause of what changed.

:func:`find_regressions` chooses the pairs: for each workload + target + variant, the latest
result against the newest earlier one *from a different environment* (reruns in the same
environment measure noise, not an update), or against the newest earlier run among the runs
given as the baseline (``against``: the runs a tag names).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from bakeoff.analysis.compare import ratio_of_medians
from bakeoff.analysis.cost import Cost
from bakeoff.checks.base import Metric
from bakeoff.checks.registry import guarded, registered_checks
from bakeoff.env import VOLATILE, VOLATILE_ENV, Environment
from bakeoff.results.values import RunResult, TargetResult
from bakeoff.scenarios.registry import registered_scenarios
from bakeoff.stats import percentile
from bakeoff.units import clip, figure
from bakeoff.verdicts.decision import cost_in_run, price_in_run
from bakeoff.verdicts.timing import timing_noise

__all__ = [
    "INCONCLUSIVE",
    "OUTCOMES",
    "Comparison",
    "EnvironmentChange",
    "EnvironmentDiff",
    "MetricChange",
    "Thresholds",
    "compare_pair",
    "compare_results",
    "environment_diff",
    "find_regressions",
    "flattened",
    "pair_runs",
    "settings_difference",
    "timing_noise",
]

OUTCOMES = ("improved", "regressed", "unchanged", "not_comparable", "failed")
#: Worst first: a result's outcome is the first of these that any metric has.
_SEVERITY = ("failed", "regressed", "improved", "unchanged", "not_comparable")
_REQUIREMENT_RANK = {"met": 1, "not_met": 0}
#: How the detail of a timing metric that moved, but cannot be called better or worse, begins.
INCONCLUSIVE = "not conclusive"
#: Entries of a long adjustments ledger named in a reason (the rest are counted).
LEDGER_SHOWN = 3


@dataclass(frozen=True)
class Thresholds:
    """When a change counts.

    Attributes:
        latency: a p50 latency change counts only when ``|after/before - 1|`` exceeds this
            (0.10 = 10%) *and* the bootstrap interval of the ratio excludes 1.
        confidence: the bootstrap interval's level (:func:`~bakeoff.analysis.compare.ratio_of_medians`).
        resamples: bootstrap resamples.
        min_samples: fewer timing samples than this on either side: latency is not comparable
            (an interval from a handful of samples means little).
        first_call: the first call (which includes compilation) is a single observation with no
            interval, so it needs a larger relative change to count (0.5 = 50%) ...
        first_call_floor_ms: ... and an absolute change of more than this many milliseconds (a
            first eager call of 0.2 ms that takes 1.4 ms next time is scheduling jitter, not news).
        op_share: an absolute change of the device op share beyond this counts (0.05 = 5 points).
        compile_counts: graphs, recompiles and graph breaks change when they differ by more than
            this (0: they are exact counts for a fixed input profile).
        cost: a change of cost per million requests counts only when ``|after/before - 1|``
            exceeds this *and* the data can tell the two apart: their intervals do not overlap
            (a single-stream cost's interval is its speed-up's) or, for a reference timed
            against itself, the latency ratio's interval times the price ratio excludes 1. A
            cost at a sustained server rate is a single observation: only its size counts.
    """

    latency: float = 0.10
    confidence: float = 0.95
    resamples: int = 2000
    min_samples: int = 5
    first_call: float = 0.5
    first_call_floor_ms: float = 5.0
    op_share: float = 0.05
    compile_counts: int = 0
    cost: float = 0.10

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class MetricChange:
    """One metric before and after, and what the change means.

    ``change`` is the ratio after/before for times and costs, the difference for counts and
    shares, None for verdicts; ``low``/``high`` bound the latency ratio (bootstrap interval), and
    the cost ratio where it is read from the latency's.
    """

    metric: str
    outcome: str
    before: Any
    after: Any
    change: float | None = None
    low: float | None = None
    high: float | None = None
    detail: str = ""

    @property
    def inconclusive(self) -> bool:
        """A timing figure that moved beyond its threshold inside noise or overlapping intervals."""
        return self.outcome == "not_comparable" and self.detail.startswith(INCONCLUSIVE)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class EnvironmentChange:
    """One environment key (dotted for nested keys, e.g. ``packages.torch``) that differs."""

    key: str
    before: Any
    after: Any

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class EnvironmentDiff:
    """What differs between two environments, volatile keys (capture time, load) left out."""

    before: str
    after: str
    changes: tuple[EnvironmentChange, ...] = ()

    @property
    def same(self) -> bool:
        return not self.changes

    @property
    def libraries(self) -> tuple[EnvironmentChange, ...]:
        """Changes of library versions (torch and the packages list)."""
        return tuple(c for c in self.changes if c.key == "torch" or c.key.startswith("packages."))

    def summary(self, limit: int = 6) -> str:
        """``torch 2.13.0 -> 2.14.0, env.OMP_NUM_THREADS unset -> 4``: libraries first, each once."""
        if self.same:
            return "same environment"
        ordered = [*self.libraries, *(c for c in self.changes if c not in self.libraries)]
        parts = list(
            dict.fromkeys(f"{c.key.removeprefix('packages.')} {_show(c.before)} -> {_show(c.after)}" for c in ordered)
        )
        if len(parts) > limit:
            parts = [*parts[:limit], f"and {len(parts) - limit} more"]
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "before": self.before,
            "after": self.after,
            "changes": [c.to_dict() for c in self.changes],
            "summary": self.summary(),
        }


def _show(value: Any) -> str:
    return "unset" if value is None else str(value)


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):  # an empty dict adds no keys: {} and a missing dict are the same
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def flattened(environment: Environment) -> dict[str, Any]:
    """Every key of ``environment``, nested ones dotted (``packages.torch``), as diffs name them."""
    return _flatten(environment.data)


def environment_diff(before: Environment, after: Environment) -> EnvironmentDiff:
    """Every stable key that differs between two environments, sorted by key."""
    skip = set(VOLATILE) | {f"env.{k}" for k in VOLATILE_ENV}
    a, b = _flatten(before.data), _flatten(after.data)
    changes = tuple(
        EnvironmentChange(key, a.get(key), b.get(key))
        for key in sorted(set(a) | set(b))
        if key not in skip and a.get(key) != b.get(key)
    )
    return EnvironmentDiff(before.fingerprint, after.fingerprint, changes)


@dataclass(frozen=True)
class Comparison:
    """A target's result in one run against its result in another, metric by metric."""

    workload: str
    target: str
    variant: str
    before_run: str
    after_run: str
    before_created_at: str
    after_created_at: str
    outcome: str
    reason: str
    metrics: tuple[MetricChange, ...]
    environment: EnvironmentDiff
    after_target: str = ""
    thresholds: Thresholds = field(default_factory=Thresholds)

    @property
    def regressed(self) -> tuple[MetricChange, ...]:
        return tuple(m for m in self.metrics if m.outcome in ("regressed", "failed"))

    @property
    def improved(self) -> tuple[MetricChange, ...]:
        return tuple(m for m in self.metrics if m.outcome == "improved")

    @property
    def inconclusive(self) -> tuple[MetricChange, ...]:
        """Timing figures that moved, but inside noise or overlapping intervals (see the module
        docstring); none when the pair as a whole is not comparable."""
        return () if self.outcome == "not_comparable" else tuple(m for m in self.metrics if m.inconclusive)

    def metric(self, name: str) -> MetricChange:
        return next(m for m in self.metrics if m.metric == name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "target": self.target,
            "after_target": self.after_target or self.target,
            "variant": self.variant,
            "before_run": self.before_run,
            "after_run": self.after_run,
            "before_created_at": self.before_created_at,
            "after_created_at": self.after_created_at,
            "outcome": self.outcome,
            "reason": self.reason,
            "metrics": [m.to_dict() for m in self.metrics],
            "environment": self.environment.to_dict(),
            "thresholds": self.thresholds.to_dict(),
        }


# -- metric rules -------------------------------------------------------------------------


def _ranked(metric: str, before: Any, after: Any, rank: dict[str, int]) -> MetricChange:
    """Verdict-like metrics: better or worse by rank; a value outside the rank is not comparable."""
    if before is None and after is None:
        return MetricChange(metric, "unchanged", None, None, detail="not measured")
    if before == after:
        return MetricChange(metric, "unchanged", before, after)
    if before in rank and after in rank and rank[after] != rank[before]:
        outcome = "improved" if rank[after] > rank[before] else "regressed"
        return MetricChange(metric, outcome, before, after)
    return MetricChange(metric, "not_comparable", before, after, detail="verdicts of different kinds")


def _inconclusive(why: str, detail: str) -> str:
    """The detail of a timing figure that moved but cannot be called better or worse."""
    return f"{INCONCLUSIVE} ({why}); {detail}"


def _relative(
    metric: str,
    before: float | None,
    after: float | None,
    threshold: float,
    floor: float,
    unit: str = "",
    noise: str = "",
) -> MetricChange:
    """Lower is better; a single observation each, so only the size of the change counts: more
    than ``threshold`` relative and more than ``floor`` absolute. A change that counts is not
    conclusive when either side's timing was noisy (``noise`` says how)."""
    if before is None or after is None or before <= 0:
        return MetricChange(metric, "not_comparable", before, after, detail="not measured on both sides")
    ratio = after / before
    detail = f"x{ratio:.2f} (counts beyond {threshold:.0%} and {floor:g}{unit})"
    moved = abs(ratio - 1) > threshold and abs(after - before) > floor
    if moved and noise:
        return MetricChange(
            metric, "not_comparable", before, after, change=ratio, detail=_inconclusive(f"noisy: {noise}", detail)
        )
    outcome = ("regressed" if ratio > 1 else "improved") if moved else "unchanged"
    return MetricChange(metric, outcome, before, after, change=ratio, detail=detail)


def _count(metric: str, before: int | None, after: int | None, threshold: int) -> MetricChange:
    """Lower is better (graphs, recompiles, graph breaks)."""
    if before is None or after is None:
        return MetricChange(metric, "not_comparable", before, after, detail="not measured on both sides")
    delta = after - before
    outcome = "unchanged" if abs(delta) <= threshold else ("regressed" if delta > 0 else "improved")
    return MetricChange(metric, outcome, before, after, change=float(delta))


def _breakdown(change: MetricChange, before: Mapping[str, int], after: Mapping[str, int]) -> MetricChange:
    """A count's change, naming the items (ops, modules) whose counts moved."""
    moved = [
        f"{k} {before.get(k, 0)} -> {after.get(k, 0)}"
        for k in sorted(set(before) | set(after))
        if before.get(k, 0) != after.get(k, 0)
    ]
    return replace(change, detail=", ".join(moved[:5])) if moved else change


def _check_metric(before: Metric | None, after: Metric | None, t: Thresholds) -> MetricChange | None:
    """One check's metric compared by its kind (see :class:`~bakeoff.checks.base.Metric`).

    A verdict is compared whenever the check offers it (``not measured`` on neither side); a
    count or a share only when both sides measured it as a number, except a count that one side
    lacks, which is not comparable.
    """
    some = after or before
    assert some is not None
    b = before.value if before is not None else None
    a = after.value if after is not None else None
    if some.kind != "verdict" and any(isinstance(v, float) and not math.isfinite(v) for v in (b, a)):
        return MetricChange(some.name, "not_comparable", b, a, detail="not a finite number")
    if some.kind == "verdict":
        return _ranked(some.name, b, a, some.rank)
    if some.kind == "share":
        if b is None or a is None:
            return None
        delta = a - b
        outcome = "unchanged" if abs(delta) <= t.op_share else ("improved" if delta > 0 else "regressed")
        return MetricChange(some.name, outcome, b, a, change=delta)
    change = _count(some.name, b, a, t.compile_counts)
    if before is not None and after is not None and (before.breakdown is not None or after.breakdown is not None):
        change = _breakdown(change, before.breakdown or {}, after.breakdown or {})
    return change


def _checks(before: TargetResult, after: TargetResult, t: Thresholds) -> list[MetricChange]:
    """Every registered check's metrics, before against after, in the check's own order."""
    changes = []
    for check in registered_checks():
        b = {m.name: m for m in guarded(check, "metrics", before.checks.get(check.name), fallback=[])}
        a = {m.name: m for m in guarded(check, "metrics", after.checks.get(check.name), fallback=[])}
        for name in dict.fromkeys([*b, *a]):
            change = _check_metric(b.get(name), a.get(name), t)
            if change is not None:
                changes.append(change)
    return changes


def _samples_change(
    metric: str, a: tuple[float, ...], b: tuple[float, ...], t: Thresholds, noise: str = ""
) -> MetricChange:
    """Lower is better: the ratio of medians with its bootstrap interval. A change counts only
    when larger than ``t.latency`` and significant; a larger one is not conclusive when the
    interval contains 1 or when either side's timing was noisy (``noise`` says how)."""

    p50_a = percentile(a, 50) if a else None
    p50_b = percentile(b, 50) if b else None
    if not a or not b:
        return MetricChange(metric, "not_comparable", p50_a, p50_b, detail="not timed on both sides")
    if min(len(a), len(b)) < t.min_samples:
        return MetricChange(
            metric,
            "not_comparable",
            p50_a,
            p50_b,
            change=p50_b / p50_a if p50_a else None,
            detail=f"fewer than {t.min_samples} samples ({len(a)} before, {len(b)} after)",
        )
    est = ratio_of_medians(b, a, confidence=t.confidence, resamples=t.resamples)
    big = abs(est.value - 1) > t.latency
    detail = f"x{est.value:.2f} ({est.low:.2f}-{est.high:.2f}, {t.confidence:.0%} CI)"
    figures = {"change": est.value, "low": est.low, "high": est.high}
    if big and (noise or not est.significant):
        why = f"noisy: {noise}" if noise else f"its {t.confidence:.0%} interval contains 1"
        return MetricChange(metric, "not_comparable", p50_a, p50_b, **figures, detail=_inconclusive(why, detail))
    outcome = ("regressed" if est.value > 1 else "improved") if big else "unchanged"
    if est.significant and not big:
        detail += f"; significant but within {t.latency:.0%}"
    if noise:
        detail += f"; timings flagged noisy ({noise})"
    return MetricChange(metric, outcome, p50_a, p50_b, **figures, detail=detail)


def _latency(before: TargetResult, after: TargetResult, t: Thresholds, noise: str = "") -> MetricChange:
    a = before.latency.samples_ms if before.latency else ()
    b = after.latency.samples_ms if after.latency else ()
    return _samples_change("p50_ms", a, b, t, noise)


def _rate_change(metric: str, rb: float | None, ra: float | None, t: Thresholds, noise: str = "") -> MetricChange:
    """A higher-is-better figure (items/s), compared as the time per item (its inverse)."""
    change = _relative(metric, 1 / rb if rb else None, 1 / ra if ra else None, t.latency, 0.0, noise=noise)
    moved = f"x{change.change:.2f} per item" if change.change is not None else change.detail
    detail = f"best batch size's items/s; {moved}"
    if change.inconclusive:
        detail = _inconclusive(f"noisy: {noise}", detail)
    return MetricChange(metric, change.outcome, rb, ra, ra / rb if rb and ra else None, detail=detail)


def _scenarios(before: TargetResult, after: TargetResult, t: Thresholds, noise: str = "") -> list[MetricChange]:
    """What each scenario measured on both sides: the series it compares (lower is better) and
    its rates (higher is better), as the scenario declares them."""
    changes = []
    for scenario in registered_scenarios():
        sb, sa = before.scenario(scenario.name), after.scenario(scenario.name)
        if sb is None or sa is None or sb.status != "ok" or sa.status != "ok":
            continue
        for metric, series in scenario.compared.items():
            changes.append(_samples_change(metric, sb.series.get(series, ()), sa.series.get(series, ()), t, noise))
        rb, ra = scenario.rates(sb), scenario.rates(sa)
        changes += [_rate_change(metric, rb[metric], ra.get(metric), t, noise) for metric in rb]
    return changes


def _point(cost: Cost) -> bool:
    """A cost without an interval of its own: a single observation, or the reference's
    single-stream cost (the unit its run's intervals are measured in)."""
    return not cost.has_interval or cost.low == cost.high


def _cost(
    before: Cost | None, after: Cost | None, latency: MetricChange, t: Thresholds, noise: str = ""
) -> MetricChange:
    """Lower is better: cost per million requests, from each run's own price and speed.

    The data can tell two single-stream costs apart when their intervals do not overlap; when
    neither has one of its own (the reference both times, whose cost is its price times its
    median latency) the cost ratio's interval is the latency ratio's, scaled by the price ratio.
    Costs at a sustained server rate are single observations: only the size of the change counts.
    A change beyond the threshold that the data cannot tell, or whose speed was timed under
    noise (``noise``), is not conclusive.
    """
    if before is None or after is None:
        b, a = (c.value if c is not None else None for c in (before, after))
        return MetricChange("cost", "not_comparable", b, a, detail="priced on both sides, costed on one only")
    if before.price.currency != after.price.currency:
        shown = " -> ".join(repr(c.price.currency) if c.price.currency else "none" for c in (before, after))
        return MetricChange(
            "cost", "not_comparable", before.value, after.value, detail=f"prices in different currencies ({shown})"
        )
    if before.basis != after.basis:
        return MetricChange(
            "cost",
            "not_comparable",
            before.value,
            after.value,
            detail=f"costed at different rates ({before.basis} -> {after.basis})",
        )
    unit = before.price.currency
    ratio = after.value / before.value
    big = abs(ratio - 1) > t.cost
    low = high = None
    if before.basis != "single-stream":
        tells, why = True, "one reading each: only the size counts"
    elif not (_point(before) and _point(after)):
        b_low, b_high = (before.value, before.value) if _point(before) else (before.low, before.high)
        a_low, a_high = (after.value, after.value) if _point(after) else (after.low, after.high)
        tells = a_low > b_high or b_low > a_high  # type: ignore[operator]
        why = "the intervals overlap"
    elif latency.low is not None and latency.high is not None and latency.change:
        low, high = ratio * latency.low / latency.change, ratio * latency.high / latency.change
        tells = not low <= 1 <= high
        why = f"its {t.confidence:.0%} interval contains 1"
    else:
        tells, why = False, f"the speed cannot be compared: {latency.detail or 'not timed'}"
    if noise:
        tells, why = False, f"noisy: {noise}"
    pb, pa = before.price.per_hour, after.price.per_hour
    price = (
        f"same price {unit}{pb:.3g}/h"
        if math.isclose(pb, pa, rel_tol=1e-9)
        else f"price {unit}{pb:.3g}/h -> {unit}{pa:.3g}/h"
    )
    detail = (
        f"{unit}{before.value:.3g} -> {unit}{after.value:.3g} per million requests ({ratio - 1:+.0%}): {price}, "
        f"{before.basis} rate {figure(before.rate, '/s')} -> {figure(after.rate, '/s')}"
    )
    if big and not tells:
        return MetricChange(
            "cost", "not_comparable", before.value, after.value, ratio, low, high, _inconclusive(why, detail)
        )
    if not big and ratio != 1:
        detail += f"; within {t.cost:.0%}"
    outcome = ("regressed" if ratio > 1 else "improved") if big else "unchanged"
    return MetricChange("cost", outcome, before.value, after.value, change=ratio, low=low, high=high, detail=detail)


def _requirements(before: TargetResult, after: TargetResult) -> list[MetricChange]:
    old = {r["text"]: r for r in getattr(before, "requirements", None) or ()}
    new = {r["text"]: r for r in getattr(after, "requirements", None) or ()}
    changes = []
    for text in [*old, *(k for k in new if k not in old)]:
        a, b = old.get(text), new.get(text)
        if a is None or b is None:
            changes.append(
                MetricChange(
                    f"requirement: {text}",
                    "not_comparable",
                    a and a.get("verdict"),
                    b and b.get("verdict"),
                    detail="checked on one side only",
                )
            )
            continue
        change = _ranked(f"requirement: {text}", a.get("verdict"), b.get("verdict"), _REQUIREMENT_RANK)
        if change.outcome == "not_comparable":
            change = MetricChange(change.metric, change.outcome, change.before, change.after, detail="not measured")
        changes.append(change)
    return changes


# -- what makes a pair not comparable, or its timings not conclusive --------------------------


def _noise_text(before: Sequence[str], after: Sequence[str], shown: int = 2) -> str:
    """``after: machine busy: ...``: each noisy side's first flags, the rest counted."""
    parts = []
    for side, flags in (("before", before), ("after", after)):
        if flags:
            more = f" and {len(flags) - shown} more" if len(flags) > shown else ""
            parts.append(f"{side}: " + "; ".join(flags[:shown]) + more)
    return ", ".join(parts)


def _spec_key(text: str) -> str:
    """A check or scenario spec with its options in a fixed order (``a?y=2&x=1`` -> ``a?x=1&y=2``)."""
    head, _, options = str(text).partition("?")
    return head + ("?" + "&".join(sorted(options.split("&"))) if options else "")


def _on(value: Any) -> str:
    return "on" if value else "off"


def _measured(run: RunResult, variant: str) -> dict[str, tuple[Any, str]]:
    """The stored settings that decide what ``run`` measured: name -> (the value compared, how
    it reads). A key a document lacks takes the value its version used."""
    stored = run.settings or {}
    found: dict[str, tuple[Any, str]] = {}
    script = stored.get("exec")
    if isinstance(script, Mapping):  # a script run (bakeoff exec): see bakeoff.api.exec_keywords
        devices = list(script.get("map") or ("cuda",))
        found["device map"] = (devices, ",".join(map(str, devices)))
        as_written = bool(script.get("as_written", False))
        reference = stored.get("reference")
        found["reference"] = ((reference, as_written), f"{reference}" + (" as written" if as_written else ", remapped"))
        for key, name in (("captures", "captures"), ("capture_modules", "module captures")):
            names = sorted(map(str, script.get(key) or ()))
            found[name] = (names, ", ".join(names) or "none")
        found["seed"] = (script.get("seed", 0), str(script.get("seed", 0)))
        found["strict mode"] = (bool(script.get("strict", False)), _on(script.get("strict", False)))
        found["file comparison"] = (bool(script.get("files", True)), _on(script.get("files", True)))
        if script.get("repeats"):
            timing = "timing runs without the audit"
        else:
            timing = "the first run's wall time" + (", audited" if script.get("audit", True) else "")
        found["timing mode"] = (timing, timing)
        return found
    profile = stored.get("profile")
    if isinstance(profile, Mapping):
        requests = [list(r) for r in profile.get("requests") or ()]
        found["input profile"] = (requests, f"{profile.get('source')} ({len(requests)} requests)")
    else:
        found["input profile"] = (None, "none")
    mode = "worker processes" if stored.get("isolate", True) else "one process"
    found["timing mode"] = (mode, mode)
    found["cold compile cache"] = (bool(stored.get("cold_cache", False)), _on(stored.get("cold_cache", False)))
    for kind in ("scenario", "check"):
        for text in stored.get(f"{kind}s") or ():
            name, _, options = str(text).partition("?")
            found[f"{kind} {name}"] = (_spec_key(text), options or "defaults")
    if variant != "as-is":
        plan = stored.get("buckets") if isinstance(stored.get("buckets"), Mapping) else {}
        sizes = list(plan.get("chosen") or ()) or stored.get("pad_to_buckets")
        found["padding buckets"] = (sizes, str(sizes))
    return found


def settings_difference(before: RunResult, after: RunResult, variant: str = "as-is") -> str:
    """The settings that decide what was measured and differ between two runs, in a line
    (``input profile seq=... (20 requests) -> seq=... (50 requests)``); "" when none does.

    Compared: the input profile's requests (not how they were written), the timing mode
    (worker processes or one process: a target timed beside the others, in their process, is
    timed under other conditions), a cold compile cache, the options of each scenario both runs
    ran (one that ran on one side only is simply not compared), each check's options (one not
    set is its defaults), and for a padded ``variant`` the buckets; for a script run its device
    map, reference, captures, seed, strict mode, file comparison and how it was timed. Left out
    on purpose, as they change how sure a figure is but not what it measures: sample counts,
    minimum times, replicates, timing in turns or one after another (version 1 runs were timed
    one after another), the between-process spread; and timeouts, prices and requirements
    (each compared on its own).
    """
    b, a = _measured(before, variant), _measured(after, variant)
    parts = []
    for name in dict.fromkeys([*b, *a]):
        if name.startswith("scenario ") and (name not in b or name not in a):
            continue
        default = (name.removeprefix("check "), "defaults") if name.startswith("check ") else (None, "none")
        (kb, tb), (ka, ta) = b.get(name, default), a.get(name, default)
        if kb != ka:
            parts.append(f"{name} {tb} -> {ta}" if tb != ta else f"{name} {tb}, with other values")
    return "; ".join(parts)


def _shown(entries: Sequence[str], width: int = 60) -> str:
    """The first :data:`LEDGER_SHOWN` entries, each cut to ``width`` characters, the rest counted."""
    cut = [clip(e, width) for e in entries[:LEDGER_SHOWN]]
    more = len(entries) - len(cut)
    return ", ".join(cut) + (f" and {more} more" if more else "")


def _ledger_change(before: TargetResult, after: TargetResult, runs: tuple[str, str]) -> str:
    """How two adjustments ledgers differ, in a line: a short ledger in full, a long one (a
    script's rewrites run to hundreds) as counts with the first entries that differ, and where
    to read every entry."""

    def entries(result: TargetResult) -> list[str]:
        return [f"{a.get('name')}={a.get('value')}" for a in result.adjustments]

    b, a = entries(before), entries(after)
    if len(b) + len(a) <= 2 * LEDGER_SHOWN and all(len(e) <= 60 for e in (*b, *a)):
        return f"adjustments differ ({', '.join(b) or 'none'} -> {', '.join(a) or 'none'})"
    kept_b, kept_a = set(b), set(a)
    only = [(side, [e for e in mine if e not in theirs]) for side, mine, theirs in
            (("after", a, kept_b), ("before", b, kept_a))]  # fmt: skip
    parts = [f"{len(x)} only {side}: {_shown(x)}" for side, x in only if x] or ["the same entries, in another order"]
    where = " and ".join(f"`bakeoff show {run} --verbose`" for run in runs if run) or "`bakeoff show RUN --verbose`"
    return f"adjustments differ ({len(b)} -> {len(a)} entries; {'; '.join(parts)}; all of them: {where})"


def _incomparable(
    before: TargetResult,
    after: TargetResult,
    fp_before: str,
    fp_after: str,
    same_target: bool,
    settings: str = "",
    runs: tuple[str, str] = ("", ""),
) -> str:
    if fp_before != fp_after:
        return f"workload fingerprint changed ({fp_before} -> {fp_after}): a different model or inputs"
    if settings:
        return f"settings differ: {settings}"
    if same_target and list(before.adjustments) != list(after.adjustments):
        return _ledger_change(before, after, runs)
    for side, result in (("before", before), ("after", after)):
        if result.status == "skipped":
            return f"skipped {side}: {result.reason}"
    return ""


def compare_results(
    before: TargetResult,
    after: TargetResult,
    *,
    before_fingerprint: str,
    after_fingerprint: str,
    thresholds: Thresholds | None = None,
    costs: tuple[Cost | None, Cost | None] | None = None,
    noise: tuple[Sequence[str], Sequence[str]] | None = None,
    settings: str = "",
    runs: tuple[str, str] = ("", ""),
) -> tuple[str, str, tuple[MetricChange, ...]]:
    """Classify every metric of ``after`` against ``before``.

    ``costs`` are each side's cost per million requests where both runs priced the target
    (None: not priced on both sides, so no cost metric; a side priced but without a rate to be
    costed at is None in the pair). ``noise`` holds each side's noise flags (None: the flags
    stored with each result, :func:`timing_noise`); ``settings`` says which settings that
    decide what was measured differ (:func:`settings_difference`); ``runs`` are the two run ids,
    for the reason's pointers.

    Returns:
        ``(outcome, reason, metrics)``. When the pair is not comparable (different workload
        fingerprints, settings that differ in what they measure, a different adjustments
        ledger for the same target, a skipped side) every metric keeps its values for
        information but is marked ``not_comparable``. An error after is ``failed`` whatever
        came before. The reason names the metrics that moved, and those not conclusive.
    """
    t = thresholds or Thresholds()
    if after.status == "error":
        error = after.error
        what = (
            f"{error.category}: {error.type}: {error.message.splitlines()[0] if error.message else ''}" if error else ""
        )
        was = "was already failing" if before.status == "error" else f"was {before.status}"
        metric = MetricChange("status", "failed", before.status, after.status, detail=f"{what} ({was})")
        return "failed", what or "error", (metric,)
    noisy = _noise_text(*(noise if noise is not None else (timing_noise(before), timing_noise(after))))
    metrics: list[MetricChange] = []
    if before.status == "error":
        metrics.append(MetricChange("status", "improved", before.status, after.status, detail="ran; it failed before"))
    else:
        metrics.append(MetricChange("status", "unchanged", before.status, after.status))
    metrics.extend(_checks(before, after, t))
    latency = _latency(before, after, t, noisy)
    metrics.append(latency)
    metrics.append(
        _relative(
            "first_call_ms",
            before.first_call_ms,
            after.first_call_ms,
            t.first_call,
            t.first_call_floor_ms,
            " ms",
            noisy,
        )
    )
    metrics.extend(_scenarios(before, after, t, noisy))
    if costs is not None and any(c is not None for c in costs):
        metrics.append(_cost(costs[0], costs[1], latency, t, noisy))
    metrics.extend(_requirements(before, after))
    if before.status == "error":  # nothing to compare the measurements with
        metrics = [metrics[0], *(_void(m, "no measurement before: it failed") for m in metrics[1:])]
    reason = _incomparable(
        before, after, before_fingerprint, after_fingerprint, before.target == after.target, settings, runs
    )
    if reason:
        return "not_comparable", reason, tuple(_void(m, m.detail) for m in metrics)
    outcome = next((o for o in _SEVERITY if any(m.outcome == o for m in metrics)), "unchanged")
    if outcome == "not_comparable":
        outcome = "unchanged"
    changed = [
        f"{m.metric} {INCONCLUSIVE if m.inconclusive else m.outcome}"
        for m in metrics
        if m.outcome in ("regressed", "improved") or m.inconclusive
    ]
    return outcome, ", ".join(changed), tuple(metrics)


def _void(metric: MetricChange, detail: str) -> MetricChange:
    return MetricChange(
        metric.metric, "not_comparable", metric.before, metric.after, metric.change, metric.low, metric.high, detail
    )


def compare_pair(
    before_run: RunResult,
    before: TargetResult,
    after_run: RunResult,
    after: TargetResult,
    thresholds: Thresholds | None = None,
) -> Comparison:
    """:func:`compare_results` with the identity of both runs and their environment difference,
    each side's noise judged with its machine's core count, the settings both runs measured
    with, and each side's cost within its run where both runs priced the target."""
    t = thresholds or Thresholds()
    priced = price_in_run(before_run, before) is not None and price_in_run(after_run, after) is not None
    variant = after.variant if before.variant == after.variant else "as-is"
    outcome, reason, metrics = compare_results(
        before,
        after,
        before_fingerprint=before_run.fingerprint,
        after_fingerprint=after_run.fingerprint,
        thresholds=t,
        costs=(cost_in_run(before_run, before), cost_in_run(after_run, after)) if priced else None,
        noise=(timing_noise(before, before_run.environment), timing_noise(after, after_run.environment)),
        settings=settings_difference(before_run, after_run, variant),
        runs=(before_run.run_id, after_run.run_id),
    )
    return Comparison(
        workload=after_run.workload["spec"],
        target=before.target.spec,
        after_target=after.target.spec,
        variant=after.variant,
        before_run=before_run.run_id,
        after_run=after_run.run_id,
        before_created_at=before_run.created_at,
        after_created_at=after_run.created_at,
        outcome=outcome,
        reason=reason,
        metrics=metrics,
        environment=environment_diff(before_run.environment, after_run.environment),
        thresholds=t,
    )


def pair_runs(
    runs: Iterable[tuple[str, str, str, str, Iterable[tuple[str, str]]]],
    against: Collection[str] | None = None,
) -> list[tuple[tuple[str, str, str], str, str]]:
    """Which runs to compare, from run headers alone.

    Args:
        runs: ``(run_id, created_at, workload_spec, environment_fingerprint, [(target, variant), ...])``.
        against: the run ids to take the baseline from (the runs a tag names), whatever their
            environment; None: any run from another environment.

    Returns:
        ``((workload, target, variant), before_run_id, after_run_id)`` for each key whose latest
        run has an earlier run to compare with: the newest earlier run in ``against``, or
        without it the newest earlier run in a different environment, is ``before``. Keys
        without one are left out. Sorted by key.
    """
    by_key: dict[tuple[str, str, str], list[tuple[str, str, str]]] = {}
    for run_id, created_at, workload, env_fp, keys in runs:
        for target, variant in keys:
            by_key.setdefault((workload, target, variant), []).append((created_at, run_id, env_fp))
    pairs = []
    for key in sorted(by_key):
        ordered = sorted(by_key[key])
        _, latest_id, latest_env = ordered[-1]
        earlier = next(
            (
                run_id
                for _, run_id, env in reversed(ordered[:-1])
                if (run_id in against if against is not None else env != latest_env)
            ),
            None,
        )
        if earlier is not None:
            pairs.append((key, earlier, latest_id))
    return pairs


def find_regressions(
    runs: Sequence[RunResult], thresholds: Thresholds | None = None, against: Collection[str] | None = None
) -> list[Comparison]:
    """For each workload + target + variant in ``runs``: its latest result against the newest
    earlier result from a different environment, or from the runs ``against`` names (see
    :func:`pair_runs`)."""
    by_id = {run.run_id: run for run in runs}
    headers = [
        (
            run.run_id,
            run.created_at,
            run.workload["spec"],
            run.environment.fingerprint,
            [(r.target.spec, r.variant) for r in run.results],
        )
        for run in runs
    ]
    comparisons = []
    for (_, target, variant), before_id, after_id in pair_runs(headers, against):
        before_run, after_run = by_id[before_id], by_id[after_id]
        comparisons.append(
            compare_pair(
                before_run, before_run.result(target, variant), after_run, after_run.result(target, variant), thresholds
            )
        )
    return comparisons
