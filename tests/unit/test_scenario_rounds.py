"""Scenarios run in rounds, in turns with the other targets: what one result pooled from its
rounds says, and that a round the machine slowed (a busy spell) widens the intervals, so a
requirement or a cost ranking never rests on one round's luck.

The server rounds are real runs of the scenario's loop on a fake clock where every request
takes a known time (as in ``test_server_load``); the honest control's rounds differ by a
hundredth of that, as timings on a quiet machine would.
"""

from __future__ import annotations

import pytest
from tests.unit.test_server_load import FakeClock

from bakeoff.analysis.cost import cost_of, parse_prices
from bakeoff.analysis.requirements import requirement_state
from bakeoff.metrics import parse_requirement
from bakeoff.results.values import ScenarioResult, TargetResult
from bakeoff.scenarios.base import ScenarioContext, round_series
from bakeoff.scenarios.registry import parse_scenario, scenario_named
from bakeoff.scenarios.rounds import merge_rounds, scenario_rounds
from bakeoff.target.spec import Target
from bakeoff.verdicts.metrics import check_target, metric_estimate


def _serve(service_s: float, spec: str) -> ScenarioResult:
    """One round of the server scenario on a fake target whose every request takes ``service_s``;
    its single-stream time is always 10 ms, so every round tries the same rates."""
    clock = FakeClock()

    def call() -> None:
        clock.t += service_s

    options = parse_scenario(spec).options
    ctx = ScenarioContext(None, None, None, lambda: None, clock, [0.010] * 50, [call])
    series, facts = scenario_named("server").run(ctx, options)
    return ScenarioResult("server", "ok", options=options, series=series, facts=facts)


def _target(*scenarios: ScenarioResult, reference: bool = True) -> TargetResult:
    return TargetResult(target=Target("cpu"), status="ok", is_reference=reference, scenarios=scenarios)


def _state(result: TargetResult, text: str) -> str:
    (check,) = check_target(result, [parse_requirement(text)])
    return requirement_state(check.to_dict())


def _generation(ttft_ms: list[float]) -> ScenarioResult:
    return ScenarioResult(
        "generation", "ok", series={"ttft": tuple(ttft_ms), "tpot": (1.0,)}, facts={"runs": 20, "tokens": 2}
    )


def test_three_rounds_by_default_and_training_runs_once():
    specs = [parse_scenario("server"), parse_scenario("offline"), parse_scenario("generation?rounds=5")]
    assert scenario_rounds(specs) == 5
    assert scenario_rounds([parse_scenario("server?rounds=1"), parse_scenario("training")]) == 1
    assert scenario_rounds([parse_scenario("training")]) == 0  # it changes the model: once, last
    with pytest.raises(Exception, match="at least 1"):
        parse_scenario("server?rounds=0")


def test_rounds_pool_their_series_keep_each_rounds_facts_and_sum_what_they_compiled():
    rounds = [
        ScenarioResult("offline", "ok", series={"batch=1": (1.0, 1.1)}, facts={"best_batch": 1, "graphs": 1}),
        ScenarioResult("offline", "ok", series={"batch=1": (2.0,)}, facts={"best_batch": 1, "graphs": 0}),
        ScenarioResult("offline", "ok", series={"batch=1": (1.2, 1.3, 1.4)}, facts={"best_batch": 2, "graphs": 2}),
    ]
    (merged,) = merge_rounds(rounds)
    assert merged.series["batch=1"] == (1.0, 1.1, 2.0, 1.2, 1.3, 1.4)
    assert round_series(merged, "batch=1") == [(1.0, 1.1), (2.0,), (1.2, 1.3, 1.4)]
    assert merged.facts["rounds"] == 3 and merged.facts["best_batch"] == 1  # the first round's facts lead
    assert [f["best_batch"] for f in merged.facts["each_round"]] == [1, 1, 2]
    assert merged.facts["graphs"] == 3  # a later round that compiles again is counted


def test_a_round_that_failed_is_the_result_and_says_which_round():
    ok = ScenarioResult("generation", "ok", series={"ttft": (1.0,)}, facts={})
    bad = ScenarioResult("generation", "error", "RuntimeError: out of memory")
    (merged,) = merge_rounds([ok, bad, ok])
    assert (merged.status, merged.reason) == ("error", "round 2 of 3: RuntimeError: out of memory")


def test_a_busy_round_makes_a_latency_requirement_not_conclusive_and_a_quiet_one_does_not():
    quiet = [10.0 + 0.01 * (i % 3) for i in range(20)]
    busy = [2 * x for x in quiet]  # the machine was busy in the second round: twice as slow
    (seeded,) = merge_rounds([_generation(quiet), _generation(busy), _generation(quiet)])
    (control,) = merge_rounds([_generation(quiet), _generation([x * 1.001 for x in quiet]), _generation(quiet)])
    # pooled alone, the busy round is a third of the samples and the median's bootstrap ignores it
    assert metric_estimate(_target(seeded), "ttft").high == pytest.approx(20.0, rel=0.01)
    assert _state(_target(seeded), "ttft<=15ms") == "not conclusive"
    assert _state(_target(control), "ttft<=15ms") == "met"
    assert metric_estimate(_target(control), "ttft").high < 10.1


def test_a_fixed_rate_server_gives_the_rounds_range_as_its_rate_interval():
    spec = "server?rate=150&requests=100"  # beyond capacity: each round achieves what its service allows
    (merged,) = merge_rounds([_serve(0.010, spec), _serve(0.0101, spec), _serve(0.0099, spec)])
    rate = metric_estimate(_target(merged), "server.rate")
    assert rate.samples == 3 and rate.low < rate.value < rate.high  # each round achieved its own rate
    assert len(merged.series["latency"]) == 300 and merged.facts["rounds"] == 3


def test_a_sweep_whose_rounds_disagree_is_not_conclusive_about_its_rate_and_one_that_agrees_is():
    # 10 ms a request: a bound of 50 ms is met up to 50/s and missed at 70/s; at 16 ms (busy)
    # the sweep misses at 50/s already
    spec = "server?rate=sweep&requests=100&bound=p99<=50ms"
    steady = [_serve(0.010, spec), _serve(0.0100 * 1.001, spec), _serve(0.010 * 0.999, spec)]
    (control,) = merge_rounds(steady)
    (seeded,) = merge_rounds([steady[0], _serve(0.016, spec), steady[2]])
    assert [each["max_rate"] for each in control.facts["each_round"]] == [50.0, 50.0, 50.0]
    assert _state(_target(control), "server.rate>=40") == "met"
    (check,) = check_target(_target(control), [parse_requirement("server.rate>=40")])
    assert check.reason.startswith("over 3 rounds in turns: 50.0/s kept latency within p99<=50ms in every round")
    busy_round = seeded.facts["each_round"][1]["max_rate"]
    assert busy_round < 40
    assert _state(_target(seeded), "server.rate>=40") == "not measured"  # no verdict on one round's luck
    rate = metric_estimate(_target(seeded), "server.rate")
    assert (rate.value, rate.low, rate.high) == (50.0, busy_round, 70.0)  # the median, the busy floor, the miss


def test_server_costs_from_rounds_carry_an_interval_so_they_can_be_ranked():
    spec = "server?rate=sweep&requests=100&bound=p99<=50ms"
    (merged,) = merge_rounds([_serve(0.010, spec), _serve(0.0101, spec), _serve(0.0099, spec)])
    rate = metric_estimate(_target(merged), "server.rate")
    (price,) = parse_prices(["cpu=1.0/h"])
    cost = cost_of(price, rate.value, "server", (rate.low, rate.high), None)
    assert cost.has_interval and cost.low < cost.high  # one reading could only tie; rounds can rank


def test_the_figures_say_a_scenario_ran_in_rounds_and_the_rate_it_sustained_over_them():
    from bakeoff.report.figures import scenario_figures

    spec = "server?rate=sweep&requests=100&bound=p99<=50ms"
    (merged,) = merge_rounds([_serve(0.010, spec), _serve(0.016, spec), _serve(0.010, spec)])
    shown = scenario_figures(_target(merged), merged)
    assert "3 rounds in turns, pooled" in shown
    assert any(f.startswith("sustained 50.0/s over the rounds (") for f in shown), shown
    (once,) = merge_rounds([_serve(0.010, spec)])  # the control: one round says nothing of rounds
    assert not any("rounds" in f for f in scenario_figures(_target(once), once))
    (generation,) = merge_rounds([_generation([10.0] * 5)] * 2)  # every scenario, not only the server
    assert "2 rounds in turns, pooled" in scenario_figures(_target(generation), generation)
