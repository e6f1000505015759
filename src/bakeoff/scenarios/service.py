"""A running service under its traffic: the scenario ``bakeoff serve`` records (a trial has none).

``bakeoff serve`` starts the team's own service on each target, sends its traffic on an open-loop
schedule and judges its objectives (:mod:`bakeoff.serve`); what it measured is stored as this
scenario's result, so that every report, ``compare`` and ``regressions`` read it like any other:

* ``series``: ``latency`` (each answered request from its *scheduled* send, ms), ``from_send``
  (the same requests from their actual send) and ``lag`` (the client's dispatch lag, ms), in
  schedule order;
* ``facts``: the schedule (``rate``, ``arrivals``, ``requests``, ``warmup``, ``warmed``), the
  service's ``lifecycle`` (``ready_s``: process start to healthy, its faults), the ``judgement``
  of its objectives (:class:`~bakeoff.serve.objectives.ServiceJudgement` as stored: the
  percentiles with their intervals, errors, goodput, validity), on a target its ``responses``
  against the reference service's, ``cold``: the fresh replica's first ``--cold`` seconds of
  traffic (the share within every objective with its interval, against the warm run's, its first
  request), and with ``--search`` the ``search``
  (:class:`~bakeoff.serve.search.RateSearch` as stored) and, with ``--peak``, the ``capacity``
  plan (:class:`~bakeoff.analysis.capacity.CapacityPlan` as stored, with its ``text``).

Its metric ``service.rate`` is the searched rate (the rate shown to hold, within an interval up
to the lowest rate shown not to): the rate a service's cost per million requests is priced at.

The objectives' verdicts are the target's requirements (met, not met, not conclusive, too few
samples, not measured when the run could not be judged), so the decision reads them as it reads
a trial's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from bakeoff.scenarios.base import MetricSpec, Scenario, ScenarioContext, ScenarioResult
from bakeoff.stats import Estimate

__all__ = ["Service"]


def _quantile(judgement: Mapping[str, Any], q: float, anchor: str) -> Mapping[str, Any] | None:
    return next((x for x in judgement.get("latency") or () if x.get("q") == q and x.get("anchor") == anchor), None)


def _ms(found: Mapping[str, Any] | None) -> str:
    if found is None:
        return "-"
    high = found.get("high_ms")
    bound = f"{high:.1f}" if high is not None else "unbounded"
    return f"{found['value_ms']:.1f} ms [{found['low_ms']:.1f}, {bound}]"


def _searched_rate(result: Any, scenario: ScenarioResult | None) -> Estimate | None:
    """The highest rate within the objectives, as the search bracketed it: the rate shown to
    hold, within an interval up to the lowest rate shown not to (the rate held when none was
    too high); None when no rate was shown to hold, or none was searched."""
    search = (scenario.facts.get("search") or {}) if scenario is not None else {}
    low, high = search.get("low"), search.get("high")
    if low is None or (high is not None and high <= low):
        return None
    return Estimate(low, low, high if high is not None else low, len(search.get("steps") or ()))


class Service(Scenario):
    """See the module docstring."""

    name = "service"
    rates_are = ("requests answered within every objective, per second", "request")
    recorded_by = "bakeoff serve"
    metrics = (
        MetricSpec(
            "service.rate",
            "rate",
            "highest offered rate at which a service met every objective (bakeoff serve --search)",
            estimate=_searched_rate,
        ),
    )

    def not_applicable(self, context: ScenarioContext) -> str | None:
        return "a running service under its traffic is measured by bakeoff serve, not in a trial"

    def run(self, context: ScenarioContext, options: dict) -> tuple[dict, dict]:
        raise NotImplementedError("bakeoff serve measures a service")

    def figures(self, result: Any, scenario: ScenarioResult, estimate: Callable[..., str | None]) -> list[str]:
        facts = scenario.facts
        lines = [
            f"{facts.get('requests', 0)} requests at {facts.get('rate', 0):g}/s ({facts.get('arrivals', '')}) after "
            f"{facts.get('warmed', 0)} of {facts.get('warmup', 0)} warm-up requests answered"
        ]
        ready = (facts.get("lifecycle") or {}).get("ready_s")
        if ready is not None:
            lines.append(f"ready {ready:.2f} s after its process started")
        judgement = facts.get("judgement")
        if judgement:
            timed_out = (judgement.get("errors") or {}).get("timeout", 0)
            # these intervals are of the answers; a timed-out request has none (the table's p50,
            # p90 and p99 count it at its wait, the objectives above every answer)
            of = f" (of the {judgement.get('answered')} answered; {timed_out} timed out)" if timed_out else ""
            for q in (50.0, 99.0):
                lines.append(f"p{q:g} {_ms(_quantile(judgement, q, 'schedule'))} from the schedule{of}")
            lines.append(f"p99 {_ms(_quantile(judgement, 99.0, 'send'))} from the send{of}")
            for anchor, what in (("ttft", "time to first token"), ("tpot", "time per output token")):
                if _quantile(judgement, 50.0, anchor) is not None:
                    shown = ", ".join(f"p{q:g} {_ms(_quantile(judgement, q, anchor))}" for q in (50.0, 99.0))
                    lines.append(f"{what}: {shown}")
            errors = ", ".join(f"{kind} {n}" for kind, n in sorted((judgement.get("errors") or {}).items()))
            lines.append(
                f"goodput {judgement['goodput']:.2f}/s ({judgement['goodput_share'] * 100:.1f}% of requests); "
                f"errors {errors or 'none'}; dispatch lag p99 {judgement['lag_p99_ms']:.1f} ms"
            )
            lines += [f"not judged: {why}" for why in judgement.get("invalid_reasons") or ()]
        cold = facts.get("cold")
        if cold:
            first = f"; first request {cold['first_ms']:.1f} ms" if cold.get("first_ms") is not None else ""
            warm = f" (warm: {cold['warm'] * 100:.1f}%)" if cold.get("warm") is not None else ""
            lines.append(
                f"cold replica, first {cold['seconds']:g} s: {cold['attainment'] * 100:.1f}% of {cold['requests']} "
                f"requests within every objective [{cold['low'] * 100:.1f}%, {cold['high'] * 100:.1f}%]{warm}{first}"
            )
        search = facts.get("search")
        if search:
            steps = ", ".join(f"{s['rate']:.3g}/s {s['verdict'].replace('_', ' ')}" for s in search["steps"])
            lines.append(f"searched: {steps} ({search['stopped']})")
        if facts.get("capacity"):
            lines.append(f"capacity {facts['capacity']['text']}")
        return lines

    def rates(self, scenario: ScenarioResult) -> Mapping[str, float | None]:
        judgement = scenario.facts.get("judgement") or {}
        return {"goodput": judgement.get("goodput")}
