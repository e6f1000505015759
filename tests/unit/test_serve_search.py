"""The highest rate within the objectives (a bracketing search) and the capacity plan built on it,
on synthetic load runs judged by the real judge: a model service that keeps its latencies low up
to its capacity and whose queue grows beyond it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bakeoff.analysis.capacity import HOURS_PER_MONTH, capacity_plan
from bakeoff.analysis.cost import parse_prices
from bakeoff.serve.load import LoadRun, Sent
from bakeoff.serve.objectives import judge_run, parse_objectives
from bakeoff.serve.search import search_rate

OBJECTIVES = parse_objectives(["p90<=50ms"])


def _run(rate: float, capacity: float, count: int = 600, seed: int = 0) -> LoadRun:
    """``count`` requests at ``rate``: 10 ms each below ``capacity``; above it, each waits for the
    queue ahead of it (``1/capacity - 1/rate`` more than the one before)."""
    noise = np.random.default_rng(seed).lognormal(np.log(0.010), 0.2, count)
    grow = max(0.0, 1 / capacity - 1 / rate)
    requests = tuple(Sent(i, i / rate, i / rate, i / rate + noise[i] + i * grow, 200, None) for i in range(count))
    return LoadRun(requests, count / rate)


def _measure(capacity: float, calls: list[tuple[float, int]] | None = None, undecided: set[float] = frozenset()):
    def measure(rate: float, scale: int):
        if calls is not None:
            calls.append((rate, scale))
        if rate in undecided:  # a run whose client fell behind: never judged
            run = _run(rate, capacity)
            late = tuple(Sent(r.index, r.planned, r.planned + 0.5, r.done, r.status, r.error) for r in run.requests)
            return judge_run(LoadRun(late, run.wall_s), OBJECTIVES, offered_rate=rate, min_duration_s=1.0)
        return judge_run(_run(rate, capacity, 600 * scale), OBJECTIVES, offered_rate=rate, min_duration_s=1.0)

    return measure


def test_the_search_brackets_the_capacity_and_every_step_agrees_with_its_verdict() -> None:
    found = search_rate(_measure(capacity=100.0), 20.0, max_steps=10)
    assert found.low is not None and found.high is not None
    assert found.low < 100.0 <= found.high * 1.0001 and found.high / found.low <= 1.25, found
    assert [s.rate for s in found.steps][:4] == [20.0, 40.0, 80.0, 160.0]  # doubling while met
    for step in found.steps:  # each step's verdict is the judge's on its own run
        assert step.verdict == ("met" if step.rate < 100.0 else "not_met"), step
    assert "between" in found.text and found.stopped.startswith("the bracket is within")


def test_a_start_above_the_capacity_halves_and_a_start_far_below_says_at_least() -> None:
    above = search_rate(_measure(capacity=30.0), 200.0, max_steps=10)
    assert above.steps[0].verdict == "not_met" and above.steps[1].rate == 100.0
    assert above.low is not None and above.low < 30.0 <= above.high
    short = search_rate(_measure(capacity=1000.0), 10.0, max_steps=3)
    assert (short.low, short.high) == (40.0, None) and short.text.startswith("at least 40/s")
    assert short.stopped == "the step limit (3) was reached"


def test_a_step_that_cannot_decide_is_retried_with_twice_the_requests_then_ends_the_search() -> None:
    calls: list[tuple[float, int]] = []
    found = search_rate(_measure(capacity=100.0, calls=calls, undecided={80.0}), 20.0, max_steps=10)
    assert calls[:3] == [(20.0, 1), (40.0, 1), (80.0, 1)] and calls[3][0] == 80.0 and calls[3][1] >= 2
    assert (found.low, found.high) == (40.0, None) and "could not decide at 80/s, twice" in found.stopped
    assert [s.verdict for s in found.steps] == ["met", "met", "unknown", "unknown"]
    assert "not judged: the client did not keep its schedule" in found.steps[-1].reason


def test_bad_search_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        search_rate(_measure(100.0), 0.0)
    with pytest.raises(ValueError):
        search_rate(_measure(100.0), 10.0, max_steps=0)


def test_the_capacity_plan_counts_replicas_from_both_ends_of_the_bracket_and_costs_a_month() -> None:
    (price,) = parse_prices(["neuron=$1.34/h"])
    plan = capacity_plan(400.0, 0.2, 45.0, 60.0, price)
    assert (plan.most, plan.least) == (math.ceil(480 / 45), math.ceil(480 / 60)) == (11, 8)
    assert plan.monthly_most == pytest.approx(11 * 1.34 * HOURS_PER_MONTH)
    assert (
        plan.text
        == "for a peak of 400/s with 20% headroom: 8 to 11 replicas, $7,826 to $10,760 a month at $1.34/h each"
    )
    open_ended = capacity_plan(400.0, 0.0, 100.0, None)
    assert (open_ended.most, open_ended.least, open_ended.monthly_most) == (4, None, None)
    assert open_ended.text == "for a peak of 400/s with 0% headroom: at most 4 replicas"
    assert capacity_plan(400.0, 0.2, None, 50.0) is None  # no rate shown to hold: no count is known


def test_a_search_or_a_peak_without_an_objective_is_refused_before_anything_starts() -> None:
    from bakeoff.errors import SpecError
    from bakeoff.settings.serve import ServeSettings

    for given, flag in (({"search": True}, "--search"), ({"peak": "400/s"}, "--peak")):
        with pytest.raises(SpecError, match=f"{flag} needs an objective"):
            ServeSettings.from_options(**given)
    assert ServeSettings.from_options(peak="400/s", slo="p90<=1s").searches
    with pytest.raises(SpecError, match="--headroom"):
        ServeSettings.from_options(headroom="lots")


def test_a_retry_asks_for_the_requests_its_percentile_fell_short_of_and_none_that_would_not_do() -> None:
    from bakeoff.serve.search import MAX_RETRY_SCALE, retry_scale

    short = _run(20.0, capacity=100.0, count=40, seed=1)  # independent, but too few to claim p90
    judged = judge_run(short, OBJECTIVES, offered_rate=20.0, min_duration_s=1.0)
    quantile = judged.quantile(90)
    assert not quantile.claimable
    expected = max(2, math.ceil(quantile.needed / quantile.effective * 1.3))
    assert retry_scale(judged) == expected and 2 < expected <= MAX_RETRY_SCALE
    fine = judge_run(_run(20.0, capacity=100.0), OBJECTIVES, offered_rate=20.0, min_duration_s=1.0)
    assert retry_scale(fine) == 2  # nothing short: twice, the least a retry adds
    climbing = _run(60.0, capacity=50.0, count=120)  # too correlated: four times as many would not claim p90
    judged = judge_run(climbing, parse_objectives(["p90<=5s"]), offered_rate=60.0, min_duration_s=1.0)
    quantile = judged.quantile(90)
    assert quantile.needed / quantile.effective * 1.3 > MAX_RETRY_SCALE and retry_scale(judged) is None
    calls: list[tuple[float, int]] = []

    def measure(rate: float, scale: int):
        calls.append((rate, scale))
        return judged

    found = search_rate(measure, 60.0, max_steps=5)
    assert calls == [(60.0, 1)] and [s.verdict for s in found.steps] == ["unknown"]
    assert found.stopped == (
        "a step could not decide at 60/s, and 4 times its requests would be too few for its percentile"
    )


def test_the_measured_run_is_the_first_step_when_it_decided_and_is_measured_again_when_not() -> None:
    calls: list[tuple[float, int]] = []
    measured = judge_run(_run(20.0, 100.0), OBJECTIVES, offered_rate=20.0, min_duration_s=1.0)
    found = search_rate(_measure(100.0, calls), 20.0, max_steps=3, first=measured)
    assert [c[0] for c in calls] == [40.0, 80.0] and found.steps[0].rate == 20.0  # 20/s not sent again
    assert found.steps[0].verdict == "met" and len(found.steps) == 3
    late = _run(20.0, 100.0)
    lagged = LoadRun(tuple(Sent(r.index, r.planned, r.planned + 0.5, r.done, 200, None) for r in late.requests), 30.0)
    undecided = judge_run(lagged, OBJECTIVES, offered_rate=20.0, min_duration_s=1.0)
    calls.clear()
    search_rate(_measure(100.0, calls), 20.0, max_steps=2, first=undecided)
    assert calls[0] == (20.0, 1)  # a measured run that could not decide is no step: 20/s is sent
