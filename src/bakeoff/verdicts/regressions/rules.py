"""The metric rules of a regression comparison, and :func:`compare_results` that applies them.

One rule per kind of metric, each a pure function of the two sides and the :class:`Thresholds`:
verdicts by rank, counts and shares of the checks' metrics, latency and scenario series by the
ratio of medians with its bootstrap interval, single observations (first call, rates) by the
size of the change, cost per million requests by its own price and speed, and requirements met.
:func:`compare_results` classifies every metric of a target's result against an earlier one and
derives the outcome and the reason; see :mod:`bakeoff.verdicts.regressions` for the vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from bakeoff.analysis.compare import ratio_of_medians
from bakeoff.analysis.cost import SERVICE_BASIS, Cost
from bakeoff.analysis.requirements import requirement_state
from bakeoff.checks.base import Metric
from bakeoff.checks.registry import guarded, registered_checks
from bakeoff.results.values import TargetResult
from bakeoff.scenarios.registry import registered_scenarios
from bakeoff.stats import percentile
from bakeoff.units import figure
from bakeoff.verdicts.regressions.comparability import incomparable
from bakeoff.verdicts.regressions.values import INCONCLUSIVE, MetricChange, Thresholds
from bakeoff.verdicts.timing import timing_noise

__all__ = ["compare_results"]

#: Worst first: a result's outcome is the first of these that any metric has.
_SEVERITY = ("failed", "regressed", "improved", "unchanged", "not_comparable")
_REQUIREMENT_RANK = {"met": 1, "not met": 0}


#: The detail of a verdict that changed to one of another kind (``pass`` -> ``not_comparable``).
OTHER_KIND = "verdicts of different kinds"


def _ranked(metric: str, before: Any, after: Any, rank: dict[str, int], lost: bool = False) -> MetricChange:
    """Verdict-like metrics: better or worse by rank; a value outside the rank is not comparable.
    ``lost``: a check's verdict that was the best and is now one outside the rank (``pass`` ->
    ``not_comparable``) regressed: what was shown is no longer shown."""
    if before is None and after is None:
        return MetricChange(metric, "unchanged", None, None, detail="not measured")
    if before == after:
        return MetricChange(metric, "unchanged", before, after)
    if before in rank and after in rank and rank[after] != rank[before]:
        outcome = "improved" if rank[after] > rank[before] else "regressed"
        return MetricChange(metric, outcome, before, after)
    if lost and after is not None and before in rank and rank[before] == max(rank.values()) and after not in rank:
        detail = f"{before} before, {after} after: no longer shown"
        return MetricChange(metric, "regressed", before, after, detail=detail)
    return MetricChange(metric, "not_comparable", before, after, detail=OTHER_KIND)


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
        return _ranked(some.name, b, a, some.rank, lost=True)
    if some.kind == "share":
        if b is None or a is None:
            return None
        delta = a - b
        outcome = "unchanged" if abs(delta) <= t.op_share else ("improved" if delta > 0 else "regressed")
        return MetricChange(some.name, outcome, b, a, change=delta)
    if some.kind == "score":
        return _score(some.name, before, after)
    if some.kind == "time":  # one process's reading (a cold start): no spread to judge a change by
        return None
    change = _count(some.name, b, a, t.compile_counts)
    if before is not None and after is not None and (before.breakdown is not None or after.breakdown is not None):
        change = _breakdown(change, before.breakdown or {}, after.breakdown or {})
    return change


def _score(name: str, before: Metric | None, after: Metric | None) -> MetricChange | None:
    """A measured score (higher is better, with its interval): a change counts only when the two
    intervals do not overlap (each side's own uncertainty is in its interval)."""
    if before is None or after is None:
        return None
    b, a = before.value, after.value
    if before.estimate is None or after.estimate is None:
        return MetricChange(name, "not_comparable", b, a, detail="no interval on both sides")
    lo_b, hi_b, lo_a, hi_a = before.estimate.low, before.estimate.high, after.estimate.low, after.estimate.high
    detail = f"{b:+.3g} ({lo_b:+.3g} to {hi_b:+.3g}) -> {a:+.3g} ({lo_a:+.3g} to {hi_a:+.3g})"
    if hi_a < lo_b:
        return MetricChange(name, "regressed", b, a, change=a - b, detail=detail)
    if lo_a > hi_b:
        return MetricChange(name, "improved", b, a, change=a - b, detail=detail)
    return MetricChange(name, "unchanged", b, a, change=a - b, detail=detail + "; the intervals overlap")


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


def _rate_change(
    metric: str,
    rb: float | None,
    ra: float | None,
    t: Thresholds,
    noise: str = "",
    reads: tuple[str, str] = ("items/s", "item"),
) -> MetricChange:
    """A higher-is-better figure (``reads``: what it counts, per what), compared as the time per
    item (its inverse)."""
    change = _relative(metric, 1 / rb if rb else None, 1 / ra if ra else None, t.latency, 0.0, noise=noise)
    moved = f"x{change.change:.2f} per {reads[1]}" if change.change is not None else change.detail
    detail = f"{reads[0]}; {moved}"
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
        changes += [_rate_change(metric, rb[metric], ra.get(metric), t, noise, scenario.rates_are) for metric in rb]
        before_states, after_states = scenario.states(sb), scenario.states(sa)
        rank = dict(scenario.state_rank)
        for metric in [*before_states, *(m for m in after_states if m not in before_states)]:
            was, now = before_states.get(metric), after_states.get(metric)
            if was is None or now is None:
                changes.append(MetricChange(metric, "not_comparable", was, now, detail="checked on one side only"))
            else:
                changes.append(_ranked(metric, was, now, rank))
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
    if before.basis not in ("single-stream", SERVICE_BASIS):
        tells, why = True, "one reading each: only the size counts"
    elif not (_point(before) and _point(after)) or before.basis == SERVICE_BASIS:  # a searched rate's bracket
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
        # in the decision's words: "met" only when conclusive, so a straddling interval is no "met"
        change = _ranked(f"requirement: {text}", requirement_state(a), requirement_state(b), _REQUIREMENT_RANK)
        if change.outcome == "not_comparable":
            detail = f"{requirement_state(a)} before, {requirement_state(b)} after"
            change = MetricChange(change.metric, change.outcome, change.before, change.after, detail=detail)
        changes.append(change)
    return changes


def _noise_text(before: Sequence[str], after: Sequence[str], shown: int = 2) -> str:
    """``after: machine busy: ...``: each noisy side's first flags, the rest counted."""
    parts = []
    for side, flags in (("before", before), ("after", after)):
        if flags:
            more = f" and {len(flags) - shown} more" if len(flags) > shown else ""
            parts.append(f"{side}: " + "; ".join(flags[:shown]) + more)
    return ", ".join(parts)


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
    if before.first_call_ms is not None or after.first_call_ms is not None:  # a service has none
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
    reason = incomparable(
        before, after, before_fingerprint, after_fingerprint, before.target == after.target, settings, runs
    )
    if reason:
        return "not_comparable", reason, tuple(_void(m, m.detail) for m in metrics)
    outcome = next((o for o in _SEVERITY if any(m.outcome == o for m in metrics)), "unchanged")
    kind = [m for m in metrics if m.detail == OTHER_KIND and None not in (m.before, m.after)]
    if outcome in ("unchanged", "not_comparable"):  # a verdict that changed kind (fail -> not_comparable) is
        outcome = "not_comparable" if kind else "unchanged"  # no "unchanged"; a figure one side lacks is
    changed = [
        f"{m.metric} {INCONCLUSIVE if m.inconclusive else m.outcome}"
        if m.outcome in ("regressed", "improved") or m.inconclusive
        else f"{m.metric} {m.before} -> {m.after}"
        for m in metrics
        if m.outcome in ("regressed", "improved") or m.inconclusive or m in kind
    ]
    return outcome, ", ".join(changed), tuple(metrics)


def _void(metric: MetricChange, detail: str) -> MetricChange:
    return MetricChange(
        metric.metric, "not_comparable", metric.before, metric.after, metric.change, metric.low, metric.high, detail
    )
