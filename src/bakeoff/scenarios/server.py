"""Server: Poisson arrivals at ``rate`` requests/s (or ``rate=sweep``: increasing rates, the
highest that keeps a latency percentile within ``bound``); latency includes queueing.

Every target of a trial is loaded alike: a sweep runs the reference's rates under the
reference's bound (:meth:`Server.aligned`), and a latency verdict is judged at the reference's
highest rate within the bound (:meth:`Server.judge`), so that no two targets are compared at
different loads.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar

from bakeoff.analysis.queueing import poisson_arrivals
from bakeoff.analysis.requirements import SINGLE_OBSERVATION, RequirementCheck
from bakeoff.errors import SpecError
from bakeoff.measure.loops import serve
from bakeoff.scenarios.base import (
    ROUNDS,
    MetricSpec,
    Option,
    Scenario,
    ScenarioContext,
    ScenarioResult,
    ScenarioSpec,
    point,
    rounds_text,
)
from bakeoff.stats import Estimate, percentile

__all__ = ["SWEEP_FRACTIONS", "Server"]

#: a sweep's rates as fractions of the reference's capacity (1 / mean single-stream time): light
#: to nearly saturated, then beyond, for targets faster than the reference
SWEEP_FRACTIONS = (0.1, 0.25, 0.5, 0.7, 0.85, 0.95, 1.2, 1.5, 2.0, 3.0, 5.0, 10.0)


def _round_bracket(facts: dict[str, Any]) -> tuple[float, float]:
    """Where one sweep puts the highest sustainable rate: at least the highest rate below the
    first miss (0 when none met), below the first miss (infinite when none missed)."""
    first_miss = next((s["rate"] for s in facts["sweep"] if not s["met"]), math.inf)
    return facts["max_rate"] or 0.0, first_miss


def _sustained(result: Any, server: ScenarioResult | None) -> Estimate | None:
    """The rate sustained: a sweep's highest rate within the bound (none, not 0/s, when no rate
    was), else the rate a fixed load achieved. One round's is a point. Over rounds run in
    turns: the median round's, within an interval from the lowest round's to the highest
    round's; for a sweep, from the lowest round's rate within the bound to the highest round's
    first miss (or the highest rate it tried, when none missed), the range its coarse steps
    leave the true rate in."""
    if server is None:
        return None
    each = server.facts.get("each_round") or [server.facts]
    if not server.facts.get("sweep"):
        rates = sorted(facts["achieved_rate"] for facts in each)
        return (
            point(rates[0]) if len(rates) == 1 else Estimate(statistics.median(rates), rates[0], rates[-1], len(rates))
        )
    if len(each) == 1 or all(facts["max_rate"] is None for facts in each):
        return point(server.facts["max_rate"])
    floors = sorted(facts["max_rate"] or 0.0 for facts in each)
    tops = [
        miss if math.isfinite(miss) else max(s["rate"] for s in facts["sweep"])
        for facts, (_, miss) in zip(each, map(_round_bracket, each), strict=True)
    ]
    return Estimate(statistics.median(floors), floors[0], max(tops), len(each))


def _sweep_bracket(facts: dict[str, Any]) -> tuple[float, float]:
    """:func:`_round_bracket` over every round, at its widest: the lowest round's floor and the
    highest round's first miss, so that a verdict on it holds in every round."""
    brackets = [_round_bracket(each) for each in facts.get("each_round") or [facts]]
    return min(low for low, _ in brackets), max(high for _, high in brackets)


def _rate_verdict(req: Any, low: float, high: float) -> str | None:
    """met / not_met when the requirement holds, or fails, at every rate in ``[low, high)``;
    None when the sweep's steps are too coarse to tell."""
    x = req.threshold
    holds = {">=": low >= x, ">": low > x, "<=": high <= x, "<": high <= x}[req.op]
    fails = {">=": high <= x, ">": high <= x, "<=": low > x, "<": low >= x}[req.op]
    return "met" if holds else "not_met" if fails else None


class Server(Scenario):
    """A service under Poisson traffic (see the module docstring)."""

    name = "server"
    options: ClassVar[Mapping[str, Option]] = {
        "rate": Option(str, "sweep"),
        "requests": Option(int, 100, minimum=1),
        "bound": Option(str, None),
        "seed": Option(int, 0),
        "rounds": ROUNDS,
    }
    metrics = (
        MetricSpec("server", "time", "request latency including queueing", series="latency"),
        MetricSpec(
            "server.rate",
            "rate",
            "highest arrival rate that met the latency bound (or the rate achieved)",
            estimate=_sustained,
        ),
    )
    compared: ClassVar[Mapping[str, str]] = {"server_latency_p50_ms": "latency"}

    def validate(self, options: dict[str, Any], text: str) -> None:
        from bakeoff.scenarios.registry import parse_scenario_requirement as parse_requirement

        super().validate(options, text)
        if options["rate"] != "sweep":
            try:
                rate = float(options["rate"])
            except ValueError:
                raise SpecError(
                    f"server rate {options['rate']!r} is not a number or 'sweep'", hint="e.g. server?rate=20"
                ) from None
            if rate <= 0:
                raise SpecError(f"server rate {rate:g} must be positive", hint="e.g. server?rate=20")
        if options["bound"] is not None:
            bound = parse_requirement(options["bound"])
            if bound.unit != "ms" or not bound.op.startswith("<"):
                raise SpecError(
                    f"server bound {options['bound']!r} must be a latency limit", hint="e.g. bound=p99<=50ms"
                )

    def run(self, ctx: ScenarioContext, options: dict) -> tuple[dict, dict]:
        """Serve Poisson traffic at a fixed rate, or sweep rising rates until one misses the bound.

        A sweep's rates are ``ladder`` when the trial gives the reference's (with ``judge_at``,
        the reference's highest rate within the bound: this target runs at least up to it, even
        past a miss, so its latency there is measured), else :data:`SWEEP_FRACTIONS` of this
        target's own capacity. ``max_rate`` is the highest rate below the first miss; the latency
        figures are at ``judge_at`` when given, else at ``max_rate`` (or the lowest rate tried
        when none met).
        """
        from bakeoff.scenarios.registry import parse_scenario_requirement as parse_requirement

        count = options["requests"]
        calls = [ctx.requests[i % len(ctx.requests)] for i in range(count)]
        samples = ctx.service_s or [1e-3]
        service = max(sum(samples) / len(samples), 1e-6)  # mean service time: 1/mean is the capacity
        if options["bound"] is not None:
            bound = parse_requirement(options["bound"])
        else:  # a stated default: queueing may at most double the single-stream p99
            bound = parse_requirement(f"server.p99<={2 * percentile(samples, 99) * 1e3:.6g}ms")
        pct = float(bound.metric.rsplit("p", 1)[1])

        def run(rate: float, seed: int) -> tuple[Any, float]:
            result = serve(calls, poisson_arrivals(rate, count, seed, exact=True), ctx.sync, rate, ctx.clock)
            return result, percentile(result.latencies, pct) * 1e3

        sweep: list[dict[str, Any]] = []
        ladder: list[float] = []
        if options["rate"] == "sweep":
            given = options.get("ladder")
            ladder = [float(r) for r in given] if given else [float(f"{f / service:.6g}") for f in SWEEP_FRACTIONS]
            judge_at = options.get("judge_at") if given else None
            missed, max_rate, best, judged, first = False, None, None, None, None
            for rate in ladder:
                result, value = run(rate, options["seed"])
                met = bound.holds(value)
                sweep.append({"rate": rate, "achieved_rate": result.achieved_rate, f"p{pct:g}_ms": value, "met": met})
                first = first or result
                if met and not missed:
                    max_rate, best = rate, result
                missed = missed or not met
                if judge_at is not None and math.isclose(rate, judge_at, rel_tol=1e-9):
                    judged = result
                if missed and (judge_at is None or rate >= judge_at * (1 - 1e-9)):
                    break  # every rate up to the common load is measured; beyond a miss, none
            if given:
                chosen, judged_rate, rates_from = judged or best or first, judge_at if judged else None, "reference"
            else:
                chosen, judged_rate, rates_from = best or first, max_rate, "own"
        else:
            chosen, _ = run(float(options["rate"]), options["seed"])
            max_rate, judged_rate, rates_from = None, chosen.rate, "fixed"
        assert chosen is not None
        facts = {
            "rate": chosen.rate,
            "achieved_rate": chosen.achieved_rate,
            "mean_queue_depth": sum(chosen.depths) / len(chosen.depths),
            "max_queue_depth": max(chosen.depths),
            "bound": bound.text,
            "sweep": sweep,
            "max_rate": max_rate,
            "ladder": ladder,
            "rates_from": rates_from,
            "judged_rate": judged_rate,
        }
        series = {"latency": tuple(x * 1e3 for x in chosen.latencies), "wait": tuple(x * 1e3 for x in chosen.waits)}
        return series, facts

    def figures(self, result: Any, scenario: ScenarioResult, estimate: Any) -> list[str]:
        facts = scenario.facts
        figures = [
            f"rate {facts['rate']:.1f}/s (achieved {facts['achieved_rate']:.1f}/s)",
            estimate("server.p50", "p50"),
            estimate("server.p99", "p99"),
            f"queue depth mean {facts['mean_queue_depth']:.2f}, max {facts['max_queue_depth']}",
        ]
        if facts.get("sweep"):
            best = facts.get("max_rate")
            figures.append(
                f"highest rate within {facts['bound']}: "
                + (f"{best:.1f}/s" if best is not None else "none of the rates tried")
            )
            if facts.get("rates_from") == "reference":  # the load is the reference's, and says so
                judged = facts.get("judged_rate")
                figures.append(
                    "swept at the reference's rates; "
                    + (f"latency at its highest within the bound, {judged:.1f}/s" if judged else "it sustained none")
                )
        sustained = _sustained(result, scenario) if rounds_text(scenario) else None
        if sustained is not None:  # over rounds: the median round's, within the rounds' range
            figures.append(
                f"sustained {sustained.value:.1f}/s over the rounds ({sustained.low:.1f}-{sustained.high:.1f}/s)"
            )
        return figures

    def for_requirements(self, spec: ScenarioSpec, requirements: Sequence[Any]) -> ScenarioSpec:
        """The first server latency requirement is the bound, unless the spec has one:
        ``--require 'server.p99<=50ms'`` then decides which rates a sweep counts as sustained,
        the same for every target, instead of a bound derived from a target's own latency."""
        if spec.options.get("bound") is not None:
            return spec
        for req in requirements:
            if req.scenario == self.name and req.unit == "ms" and req.op.startswith("<"):
                return ScenarioSpec(self.name, {**spec.options, "bound": req.text})
        return spec

    def aligned(self, spec: ScenarioSpec, reference: Any) -> ScenarioSpec:
        """A sweep takes the reference's rates (its whole ladder), its bound, and its highest
        rate within the bound as the load every target's latency is judged at. Without a
        reference sweep (it failed, or did not run) the spec is unchanged and the verdicts
        refuse to compare."""
        server = reference.scenario(self.name) if reference is not None and reference.status == "ok" else None
        if spec.options.get("rate") != "sweep" or server is None:
            return spec
        facts = server.facts if server.status == "ok" else {}
        if not facts.get("ladder"):
            return spec
        options = {
            **spec.options,
            "bound": facts["bound"],
            "ladder": list(facts["ladder"]),
            "judge_at": facts["max_rate"],
        }
        return ScenarioSpec(self.name, options)

    def judge(self, result: Any, server: ScenarioResult, check: RequirementCheck) -> RequirementCheck:
        """A server verdict only under the load every target ran: a fixed rate, or the
        reference's rates (its highest rate within the bound, for latency). It states that load."""
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
        rounds = facts.get("rounds") or 1
        if rounds > 1:
            held = f"{low:.1f}/s" if low else "no rate"
            held += f" kept latency within {bound} in every round"
            missed = "" if math.isinf(high) else f", {high:.1f}/s missed it in at least one"
            found = f"over {rounds} rounds in turns: {held}{missed}"
        elif facts["max_rate"] is None:
            found = f"no rate tried kept latency within {bound}: none sustained (the lowest, {high:.1f}/s, missed)"
        elif math.isinf(high):
            found = f"every rate tried, up to {low:.1f}/s, kept latency within {bound}"
        else:
            found = f"{low:.1f}/s kept latency within {bound}, {high:.1f}/s did not"
        common = "" if result.is_reference else ", at the reference's rates"
        sustained = _sustained(result, server)
        value = sustained.value if sustained is not None else None
        if verdict is None:
            why = f"{found}{common}: the sweep cannot tell whether {req.text} holds; give server?rate={req.threshold:g}"
            return RequirementCheck(req, "not_measured", value, samples=rounds, reason=why)
        said = found if rounds > 1 else f"{SINGLE_OBSERVATION}: {found}"
        return replace(check, verdict=verdict, value=value, samples=rounds, reason=f"{said}{common}")
