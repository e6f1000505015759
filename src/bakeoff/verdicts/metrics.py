"""Named service metrics of one target, with confidence intervals, from its raw results.

The names are those requirements use (:mod:`bakeoff.analysis.requirements`): ``p90`` from the
single-stream latencies, ``throughput`` from the offline scenario's best batch size, ``ttft``
from generation, and so on. Percentiles carry bootstrap intervals; rates are derived from the
median latency, so their interval is the latency interval inverted. A figure measured once
(time to first result, peak memory, the rate a sweep found) is a single observation: an
estimate with one sample, which verdicts and renderers show without an interval.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from bakeoff.analysis.requirements import (
    SINGLE_OBSERVATION,
    Requirement,
    RequirementCheck,
    check_requirements,
    metric_percentile,
)
from bakeoff.results.values import TargetResult
from bakeoff.stats import Estimate, percentile_estimate

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
        if server.facts.get("sweep"):  # no rate within the bound: the service sustains none, not 0/s
            return _point(server.facts["max_rate"])
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


def _sweep_bracket(facts: dict[str, Any]) -> tuple[float, float]:
    """Where a sweep puts the highest sustainable rate: at least the highest rate below the
    first miss (0 when none met), below the first miss (infinite when none missed)."""
    first_miss = next((s["rate"] for s in facts["sweep"] if not s["met"]), math.inf)
    return facts["max_rate"] or 0.0, first_miss


def _rate_verdict(req: Requirement, low: float, high: float) -> str | None:
    """met / not_met when the requirement holds, or fails, at every rate in ``[low, high)``;
    None when the sweep's steps are too coarse to tell."""
    x = req.threshold
    holds = {">=": low >= x, ">": low > x, "<=": high <= x, "<": high <= x}[req.op]
    fails = {">=": high <= x, ">": high <= x, "<=": low > x, "<": low >= x}[req.op]
    return "met" if holds else "not_met" if fails else None


def _judge_server(result: TargetResult, server: Any, check: RequirementCheck) -> RequirementCheck:
    """A server verdict only under the load every target ran: a fixed rate, or the reference's
    rates (its highest rate within the bound, for latency). It states that load."""
    req, facts = check.requirement, server.facts
    bound, judged = facts.get("bound", "the bound"), facts.get("judged_rate")
    if server.options.get("rate") != "sweep":
        what = "the rate achieved" if req.metric == "server.rate" else "judged"
        at = f"{what} at the fixed offered rate {facts['rate']:.1f}/s, the same for every target"
        return replace(check, reason="; ".join(filter(None, [check.reason, at])), judged_at=facts["rate"])
    refuse = "give server?rate=R to judge every target at one fixed load"
    if not (result.is_reference or facts.get("rates_from") == "reference"):
        why = f"the reference swept no rates to share: this target's own rates are not compared ({refuse})"
        return RequirementCheck(req, "not_measured", reason=why)
    if req.metric != "server.rate":
        if judged is None:
            whose = "this target" if result.is_reference else "the reference"
            why = f"{whose} sustained none of the rates tried within {bound}: no common load to judge at ({refuse})"
            return RequirementCheck(req, "not_measured", reason=why)
        at = f"judged at {judged:.1f}/s, the reference's highest rate within {bound}"
        return replace(check, reason="; ".join(filter(None, [check.reason, at])), judged_at=judged)
    low, high = _sweep_bracket(facts)
    verdict = _rate_verdict(req, low, high)
    if facts["max_rate"] is None:
        found = f"no rate tried kept latency within {bound}: none sustained (the lowest, {high:.1f}/s, missed)"
    elif math.isinf(high):
        found = f"every rate tried, up to {low:.1f}/s, kept latency within {bound}"
    else:
        found = f"{low:.1f}/s kept latency within {bound}, {high:.1f}/s did not"
    common = "" if result.is_reference else ", at the reference's rates"
    if verdict is None:
        why = f"{found}{common}: the sweep cannot tell whether {req.text} holds; give server?rate={req.threshold:g}"
        return RequirementCheck(req, "not_measured", facts["max_rate"], samples=1, reason=why)
    return replace(
        check, verdict=verdict, value=facts["max_rate"], samples=1, reason=f"{SINGLE_OBSERVATION}: {found}{common}"
    )


def check_target(result: TargetResult, requirements: list[Requirement]) -> list[RequirementCheck]:
    """Every requirement's verdict for one target; server ones see :func:`_judge_server`."""
    measured = {}
    for req in requirements:
        estimate = metric_estimate(result, req.metric) if result.status == "ok" else None
        if estimate is not None:
            measured[req.metric] = estimate
    checks = check_requirements(requirements, measured, _missing(result))
    server = result.scenario("server") if result.status == "ok" else None
    if server is None or server.status != "ok":
        return checks
    return [_judge_server(result, server, c) if c.requirement.scenario == "server" else c for c in checks]
