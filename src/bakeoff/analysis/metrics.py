"""Named service metrics of one target, with confidence intervals, from its raw results.

The names are those requirements use (:mod:`bakeoff.analysis.requirements`): ``p90`` from the
single-stream latencies, ``throughput`` from the offline scenario's best batch size, ``ttft``
from generation, and so on. Percentiles carry bootstrap intervals; rates are derived from the
median latency, so their interval is the latency interval inverted. A figure measured once
(time to first result, peak memory, the rate a sweep found) has a zero-width interval.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from bakeoff.analysis.requirements import Requirement, RequirementCheck, check_requirements, metric_percentile
from bakeoff.analysis.stats import Estimate, percentile_estimate
from bakeoff.results.values import TargetResult

__all__ = ["check_target", "metric_estimate"]


def _point(value: float | None) -> Estimate | None:
    return None if value is None else Estimate(float(value), float(value), float(value), 1)


def _series(result: TargetResult, scenario: str, name: str) -> tuple[float, ...]:
    found = result.scenario(scenario)
    return found.series.get(name, ()) if found is not None and found.status == "ok" else ()


def metric_estimate(result: TargetResult, metric: str) -> Estimate | None:
    """The estimate of ``metric`` for ``result`` in its base unit, or None if it was not measured."""
    pct = metric_percentile(metric)
    head = metric.partition(".")[0]
    if pct is not None:
        if head.startswith("p"):
            samples = result.latency.samples_ms if result.latency is not None else ()
        else:
            scenario, name = {
                "server": ("server", "latency"),
                "ttft": ("generation", "ttft"),
                "tpot": ("generation", "tpot"),
                "step_time": ("training", "step"),
            }[head]
            samples = _series(result, scenario, name)
        return percentile_estimate(samples, pct) if samples else None
    if metric == "first_result":
        return _point(result.time_to_first_result_ms)
    if metric in ("throughput", "tokens_per_s"):
        offline = result.scenario("offline")
        if offline is None or offline.status != "ok":
            return None
        best = offline.facts["best_batch"]
        per_item = 1 if metric == "throughput" else offline.facts.get("tokens_per_item")
        if not per_item:
            return None
        return percentile_estimate(offline.series[f"batch={best}"], 50).inverted(best * per_item * 1e3)
    if metric == "samples_per_s":
        steps = _series(result, "training", "step")
        training = result.scenario("training")
        return percentile_estimate(steps, 50).inverted(training.facts["batch"] * 1e3) if steps and training else None
    if metric == "server.rate":
        server = result.scenario("server")
        if server is None or server.status != "ok":
            return None
        if server.facts.get("sweep"):  # no rate within the bound: the service sustains none
            return _point(server.facts["max_rate"] or 0.0)
        return _point(server.facts["achieved_rate"])
    key = "peak_host_rss_bytes" if metric == "peak_memory" else "device_peak_bytes"
    values = [getattr(s, key) for s in result.scenarios if getattr(s, key) is not None]
    if getattr(result, key) is not None:
        values.append(getattr(result, key))
    return _point(max(values)) if values else None


def _missing(result: TargetResult) -> dict[str, Any]:
    why = {
        s.name: f"the {s.name} scenario {s.status.replace('_', ' ')}: {s.reason}"
        for s in result.scenarios
        if s.status != "ok"
    }
    if result.status != "ok":
        reason = result.reason or (result.error.message if result.error else result.status)
        why = dict.fromkeys(("single-stream", "offline", "server", "generation", "training", ""), reason)
    return why


def check_target(result: TargetResult, requirements: list[Requirement]) -> list[RequirementCheck]:
    """Every requirement's verdict for one target."""
    measured = {}
    for req in requirements:
        estimate = metric_estimate(result, req.metric) if result.status == "ok" else None
        if estimate is not None:
            measured[req.metric] = estimate
    checks = check_requirements(requirements, measured, _missing(result))
    server = result.scenario("server")
    if server is not None and server.status == "ok" and server.facts.get("sweep") and not server.facts["max_rate"]:
        why = f"no rate tried kept latency within {server.facts['bound']}: the service sustains none of them"
        checks = [replace(c, reason=why) if c.requirement.metric == "server.rate" else c for c in checks]
    return checks
