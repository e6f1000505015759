"""Named service metrics of one target, with confidence intervals, from its raw results.

The names are those the scenarios offer to requirements (:mod:`bakeoff.scenarios.registry`):
``p90`` from the single-stream latencies, ``throughput`` from the offline scenario's best batch
size, ``ttft`` from generation, and so on. Percentiles carry bootstrap intervals; rates are derived from the
median latency, so their interval is the latency interval inverted. A figure measured once
(time to first result, peak memory, the rate a sweep found) is a single observation: an
estimate with one sample, which verdicts and renderers show without an interval.
"""

from __future__ import annotations

from typing import Any

from bakeoff.analysis.requirements import Requirement, RequirementCheck, check_requirements
from bakeoff.results.values import TargetResult
from bakeoff.scenarios.registry import find_metric, registered_scenarios, scenario_named
from bakeoff.stats import Estimate, percentile_estimate

__all__ = ["check_target", "metric_estimate"]


def metric_estimate(result: TargetResult, metric: str) -> Estimate | None:
    """The estimate of ``metric`` for ``result`` in its base unit, or None if it was not measured.

    The metric's scenario declares how: a percentile of one of its series, or an estimate of
    its own (:class:`~bakeoff.scenarios.base.MetricSpec`). Only the single-stream metrics (and
    the run-level ones) are read from a result without a scenario result that ran.
    """
    name, spec, pct = find_metric(metric)
    found = result.scenario(name) if name else None
    ran = found if found is not None and found.status == "ok" else None
    if ran is None and name and not scenario_named(name).always:
        return None
    if pct is not None:
        samples = spec.samples(result, ran) if spec.samples is not None else ran.series.get(spec.series, ())
        return percentile_estimate(samples, pct) if samples else None
    assert spec.estimate is not None
    return spec.estimate(result, ran)


def _missing(result: TargetResult) -> dict[str, Any]:
    why = {
        s.name: f"the {s.name} scenario {s.status.replace('_', ' ')}: {s.reason}"
        for s in result.scenarios
        if s.status != "ok"
    }
    if result.status != "ok":
        reason = result.reason or (result.error.message if result.error else result.status)
        why = dict.fromkeys((*(s.name for s in registered_scenarios()), ""), reason)
    return why


def check_target(result: TargetResult, requirements: list[Requirement]) -> list[RequirementCheck]:
    """Every requirement's verdict for one target, each adjusted by its scenario where the
    scenario must say under which conditions it holds (the server's load)."""
    measured = {}
    for req in requirements:
        estimate = metric_estimate(result, req.metric) if result.status == "ok" else None
        if estimate is not None:
            measured[req.metric] = estimate
    checks = check_requirements(requirements, measured, _missing(result))
    if result.status != "ok":
        return checks
    judged = []
    for check in checks:
        name = check.requirement.scenario
        ran = result.scenario(name) if name else None
        if ran is not None and ran.status == "ok":
            check = scenario_named(name).judge(result, ran, check)
        judged.append(check)
    return judged
