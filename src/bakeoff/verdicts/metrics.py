"""Named service metrics of one target, with confidence intervals, from its raw results.

The names are those the scenarios offer to requirements (:mod:`bakeoff.scenarios.registry`):
``p90`` from the single-stream latencies, ``throughput`` from the offline scenario's best batch
size, ``ttft`` from generation, and so on. Percentiles carry bootstrap intervals; rates are derived from the
median latency, so their interval is the latency interval inverted. A figure measured once
(time to first result, peak memory, the rate a sweep found) is a single observation: an
estimate with one sample, which verdicts and renderers show without an interval.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from bakeoff.analysis.requirements import Requirement, RequirementCheck, check_requirements
from bakeoff.metrics import metric_estimate, not_applicable, not_measured
from bakeoff.results.values import TargetResult
from bakeoff.scenarios.registry import registered_scenarios, scenario_named

__all__ = ["check_target", "metric_estimate"]


def _missing(result: TargetResult, requirements: list[Requirement]) -> dict[str, Any]:
    """Why each scenario (or check metric) measured nothing, by scenario name or metric name."""
    why = {
        req.metric: reason
        for req in requirements
        if result.status == "ok" and (reason := not_measured(result, req.metric)) is not None
    }
    why |= {
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
    checks = check_requirements(requirements, measured, _missing(result, requirements))
    if result.status != "ok":
        return checks
    judged = []
    for check in checks:
        reason = not_applicable(result, check.requirement.metric) if check.verdict == "not_measured" else None
        if reason is not None:  # not a gap in the evidence: there is nothing to measure here
            judged.append(replace(check, verdict="not_applicable", reason=reason))
            continue
        name = check.requirement.scenario
        ran = result.scenario(name) if name else None
        if ran is not None and ran.status == "ok":
            check = scenario_named(name).judge(result, ran, check)
        judged.append(check)
    return judged
