"""Every metric a requirement may name: the scenarios' figures and the checks' counts.

A scenario offers latency percentiles, rates and memory (:class:`~bakeoff.scenarios.base.MetricSpec`);
a check offers the numeric metrics it declares in ``offers`` (graphs, recompilations, op calls on
the host, the device's share). :func:`parse_requirement` reads ``NAME OP VALUE[UNIT]`` over all of
them and :func:`metric_estimate` reads a metric from a target's result; neither names one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from bakeoff.analysis.requirements import Requirement, parse_requirement_with
from bakeoff.checks.registry import guarded, is_builtin, registered_checks
from bakeoff.errors import SpecError
from bakeoff.scenarios.base import MetricSpec, point, pooled_estimate
from bakeoff.scenarios.registry import BUILTIN as BUILTIN_SCENARIOS
from bakeoff.scenarios.registry import find_scenario_metric, scenario_metric_help, scenario_named
from bakeoff.stats import Estimate, percentile_estimate

__all__ = [
    "Found",
    "find_metric",
    "metric_estimate",
    "metric_help",
    "metric_percentile",
    "not_applicable",
    "not_measured",
    "parse_requirement",
    "scenario_for",
]


@dataclass(frozen=True)
class Found:
    """What a metric name is: a scenario's (``scenario``, ``spec``, ``percentile``) or a
    check's (``check``); ``kind`` is time, rate, bytes, count or share."""

    kind: str
    scenario: str = ""
    spec: MetricSpec | None = None
    percentile: float | None = None
    check: str = ""


def _check_metric(metric: str, builtin: bool | None = None) -> Found | None:
    """The check that offers ``metric`` (only bakeoff's own with ``builtin``, only plugins'
    with ``builtin=False``): the first to offer a name keeps it."""
    for check in registered_checks():
        if builtin is not None and is_builtin(check) != builtin:
            continue
        if metric in check.offers:
            return Found(check.offers[metric][0], check=check.name)
    return None


def find_metric(metric: str) -> Found:
    """What ``metric`` is.

    Raises:
        SpecError: no scenario or check offers it.
    """
    own_check = _check_metric(metric, builtin=True)
    try:
        scenario, spec, pct = find_scenario_metric(metric)
    except SpecError:
        found = own_check or _check_metric(metric, builtin=False)
        if found is None:
            raise SpecError(f"unknown requirement metric {metric!r}", hint=f"use one of {metric_help()}") from None
        return found
    if own_check is not None and scenario_named(scenario) not in BUILTIN_SCENARIOS:
        return own_check  # a plugin scenario cannot take a name bakeoff's own checks offer
    return Found(spec.kind, scenario, spec, pct)


def metric_help() -> str:
    """The metric names requirements accept, for a hint: the scenarios', then the checks'."""
    offered = [name for check in registered_checks() for name in check.offers]
    return ", ".join([scenario_metric_help(), *offered])


def metric_percentile(metric: str) -> float | None:
    """The percentile a metric asks for (``tpot`` is the median), None for other metrics."""
    return find_metric(metric).percentile


def scenario_for(metric: str) -> str:
    """The scenario that measures ``metric`` ("" for memory and the checks' metrics)."""
    return find_metric(metric).scenario


def parse_requirement(text: str) -> Requirement:
    """Parse a requirement (``p90<=50ms``, ``throughput>=200/s``, ``peak_memory<=4GiB``,
    ``recompiles<=0``, ``device_op_share>=95%``...) over every metric offered.

    Raises:
        SpecError: malformed text, an unknown metric, a percentile of 100 or more, or a unit
            that does not fit the metric.
    """

    def lookup(name: str) -> tuple[str, str, float | None]:
        found = find_metric(name)
        return found.kind, found.scenario, found.percentile

    return parse_requirement_with(text, lookup)


def metric_estimate(result: Any, metric: str) -> Estimate | None:
    """The estimate of ``metric`` for a target's ``result`` in its base unit, or None if it was
    not measured. A check's metric is a single observation unless the check gives its interval
    (the quality check's paired difference); a scenario's metric is what the
    scenario declares (a percentile of one of its series, or an estimate of its own). Only the
    single-stream metrics (and the run-level ones) are read without a scenario result that ran.
    """
    found = find_metric(metric)
    if found.check:
        check = next(c for c in registered_checks() if c.name == found.check)
        value = result.checks.get(check.name)
        metrics = guarded(check, "metrics", value, fallback=[]) if value is not None else []
        offered = {m.name: m for m in metrics}.get(metric)
        number = offered.value if offered is not None else None
        numeric = isinstance(number, (int, float)) and not isinstance(number, bool) and math.isfinite(number)
        if numeric and isinstance(offered.estimate, Estimate):  # a check's figure with its interval
            return offered.estimate
        return point(number) if numeric else None  # a non-finite figure is no measurement
    spec, name = found.spec, found.scenario
    assert spec is not None
    ran = result.scenario(name) if name else None
    ran = ran if ran is not None and ran.status == "ok" else None
    if ran is None and name and not scenario_named(name).always:
        return None
    if found.percentile is not None:
        if spec.samples is None:  # a series of the scenario's: pooled over its rounds
            return pooled_estimate(ran, spec.series, found.percentile) if ran is not None else None
        samples = spec.samples(result, ran)
        return percentile_estimate(samples, found.percentile) if samples else None
    assert spec.estimate is not None
    return spec.estimate(result, ran)


def not_measured(result: Any, metric: str) -> str | None:
    """Why a check's metric has no value for ``result`` (None for a scenario's metric: the
    scenario's own status says why)."""
    found = find_metric(metric)
    if not found.check:
        return None
    return not_applicable(result, metric) or f"the {found.check} check measured no {metric} for this target"


def not_applicable(result: Any, metric: str) -> str | None:
    """Why ``metric`` cannot apply to ``result`` at all: its check does not apply to the target
    (a compile count on an eager target), or None."""
    found = find_metric(metric)
    skipped = (getattr(result, "skipped_checks", None) or {}).get(found.check) if found.check else None
    return f"the {found.check} check does not apply: {skipped}" if skipped else None
