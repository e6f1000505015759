"""The server scenario's load: sweeps with known answers, and every target judged at one load.

Requests "take" a fixed time on a fake clock, so the latency at every rate is what the FIFO
recursion (:func:`~bakeoff.analysis.queueing.fifo_queue`) says for the same arrivals: the
known answer. With 100 requests (seed 0) and a 10 ms service, p99 at 10, 25, 50 and 70 requests/s
is 20.0, 24.2, 31.8 and 67.6 ms, so a bound of 50 ms is met up to 50/s and missed at 70/s.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from bakeoff.analysis.queueing import fifo_queue, poisson_arrivals
from bakeoff.metrics import parse_requirement
from bakeoff.results.values import ScenarioResult, TargetResult
from bakeoff.runner.trial import _scenarios_for
from bakeoff.scenarios.base import ScenarioContext
from bakeoff.scenarios.registry import parse_scenario
from bakeoff.scenarios.rounds import aligned_specs as common_load
from bakeoff.scenarios.server import SWEEP_FRACTIONS, Server
from bakeoff.stats import percentile
from bakeoff.target.spec import Target
from bakeoff.verdicts.metrics import check_target, metric_estimate

REQUESTS = 100


class FakeClock:
    """Time moves only when a request is served or the loop sleeps."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds

    def takes(self, seconds: float):
        def call() -> None:
            self.t += seconds

        return call


_server = Server().run
with_requirement_bound = Server().for_requirements


def _serve(service_s: float, spec: str, single_stream_s: float | None = None, **given) -> ScenarioResult:
    """The server scenario on a fake target whose every request takes ``service_s``."""
    clock = FakeClock()
    options = {**parse_scenario(spec).options, **given}
    stream = [single_stream_s or service_s] * 50
    ctx = ScenarioContext(None, None, None, lambda: None, clock, stream, [clock.takes(service_s)])
    series, facts = _server(ctx, options)
    return ScenarioResult("server", "ok", options=options, series=series, facts=facts)


def _oracle_p99_ms(service_s: float, rate: float) -> float:
    arrivals = poisson_arrivals(rate, REQUESTS, 0, exact=True)
    return percentile(fifo_queue(arrivals, [service_s] * REQUESTS).latencies(arrivals), 99) * 1e3


def _result(server: ScenarioResult, reference: bool = False, spec: str = "cpu") -> TargetResult:
    return TargetResult(target=Target(spec), status="ok", is_reference=reference, scenarios=(server,))


def _check(result: TargetResult, text: str):
    (check,) = check_target(result, [parse_requirement(text)])
    return check


def test_a_sweep_finds_the_known_highest_rate_within_the_bound():
    server = _serve(0.010, "server?rate=sweep&bound=p99<=50ms")  # capacity 100/s
    facts = server.facts
    assert [s["rate"] for s in facts["sweep"]] == pytest.approx([10, 25, 50, 70])  # stops at the first miss
    assert [s["met"] for s in facts["sweep"]] == [True, True, True, False]
    assert facts["max_rate"] == pytest.approx(50.0)
    assert facts["rate"] == facts["judged_rate"] == facts["max_rate"]  # the figures are at that rate
    assert [s["p99_ms"] for s in facts["sweep"]] == pytest.approx([_oracle_p99_ms(0.010, r) for r in (10, 25, 50, 70)])
    assert percentile(server.series["latency"], 99) == pytest.approx(_oracle_p99_ms(0.010, 50))
    assert facts["ladder"] == pytest.approx([f * 100 for f in SWEEP_FRACTIONS])
    assert facts["rates_from"] == "own"


def test_a_sweep_that_sustains_no_rate_reports_none_and_its_lowest_rate():
    server = _serve(0.010, "server?rate=sweep&bound=p99<=15ms")  # 20 ms at the lightest load already
    assert server.facts["max_rate"] is None and server.facts["judged_rate"] is None
    assert [s["rate"] for s in server.facts["sweep"]] == pytest.approx([10])
    assert server.facts["rate"] == pytest.approx(10)  # figures shown at the lowest rate tried


def test_the_default_bound_is_the_references_and_other_targets_inherit_it():
    reference = _serve(0.010, "server")  # default bound: twice the single-stream p99 of 10 ms
    assert reference.facts["bound"] == "server.p99<=20ms"
    slow = common_load((parse_scenario("server"),), _result(reference, reference=True))[0]
    assert slow.options["bound"] == "server.p99<=20ms"  # not twice its own p99
    assert slow.options["ladder"] == reference.facts["ladder"] and slow.options["judge_at"] == pytest.approx(10)
    assert slow.spec == "server?bound=server.p99<=20ms"  # the shared rates are kept with the results, not here
    fixed = parse_scenario("server?rate=20")
    assert common_load((fixed,), _result(reference, reference=True)) == (fixed,)  # a fixed rate is common already


def test_a_server_latency_requirement_becomes_the_sweep_bound_for_every_target():
    reqs = [parse_requirement("p90<=5ms"), parse_requirement("server.p99<=50ms")]
    (server,) = _scenarios_for([], reqs)
    assert server.options["bound"] == "server.p99<=50ms"
    given = parse_scenario("server?bound=p99<=80ms")
    assert with_requirement_bound(given, reqs) == given  # a bound the user wrote is kept
    assert (
        with_requirement_bound(parse_scenario("server"), [parse_requirement("server.rate>=5")]).options["bound"] is None
    )


def _reference_and(service_s: float, bound: str) -> tuple[TargetResult, TargetResult]:
    """The reference (10 ms a request) swept on its own, then a target swept at its rates."""
    spec = f"server?rate=sweep&bound={bound}"
    reference = _result(_serve(0.010, spec), reference=True)
    (shared,) = common_load((parse_scenario(spec),), reference)
    other = _serve(service_s, spec, **{k: v for k, v in shared.options.items() if k in ("ladder", "judge_at")})
    return reference, _result(other, spec="cpu?threads=1")


def test_a_slower_target_is_judged_at_the_references_load_and_fails_there():
    # 0.94x as fast: on its own rates it would be judged at 47/s and pass; at the reference's 50/s it does not
    reference, slower = _reference_and(0.0106, "p99<=35ms")
    assert reference.scenario("server").facts["max_rate"] == pytest.approx(50.0)
    facts = slower.scenario("server").facts
    assert facts["rates_from"] == "reference" and facts["judged_rate"] == pytest.approx(50.0)
    assert [s["rate"] for s in facts["sweep"]] == pytest.approx([10, 25, 50])  # its first miss is at 50
    ref_check, check = _check(reference, "server.p99<=35ms"), _check(slower, "server.p99<=35ms")
    assert (ref_check.verdict, ref_check.judged_at) == ("met", pytest.approx(50.0))
    assert (check.verdict, check.judged_at) == ("not_met", pytest.approx(50.0))  # the same load for both
    assert check.value == pytest.approx(_oracle_p99_ms(0.0106, 50), rel=0.05)
    assert check.reason.endswith("judged at 50.0/s, the reference's highest rate within p99<=35ms")
    # the clean control: just as fast as the reference, the same verdict at the same load
    _, same = _reference_and(0.010, "p99<=35ms")
    assert (_check(same, "server.p99<=35ms").verdict, _check(same, "server.p99<=35ms").judged_at) == (
        "met",
        pytest.approx(50.0),
    )


def test_a_much_slower_target_is_still_measured_at_the_references_load_past_its_own_miss():
    _, slow = _reference_and(0.020, "p99<=50ms")  # half as fast: misses at 25/s
    facts = slow.scenario("server").facts
    assert [s["met"] for s in facts["sweep"]] == [True, False, False]  # went on to 50/s, then stopped
    assert facts["max_rate"] == pytest.approx(10.0) and facts["rate"] == pytest.approx(50.0)
    assert percentile(slow.scenario("server").series["latency"], 99) == pytest.approx(_oracle_p99_ms(0.020, 50))
    check = _check(slow, "server.p99<=50ms")
    assert (check.verdict, check.judged_at) == ("not_met", pytest.approx(50.0))
    rate = _check(slow, "server.rate>=25")  # the same rates as the reference: comparable
    assert (rate.verdict, rate.value, rate.samples, rate.low, rate.high) == ("not_met", 10.0, 1, None, None)
    assert rate.reason == (
        "single observation: 10.0/s kept latency within p99<=50ms, 25.0/s did not, at the reference's rates"
    )


def test_a_rate_met_again_after_a_miss_is_not_sustained():
    clock, served = FakeClock(), []

    def call() -> None:  # the second rate's 100 requests take 30 ms each, the others 5 ms
        clock.t += 0.030 if REQUESTS <= len(served) < 2 * REQUESTS else 0.005
        served.append(1)

    ctx = ScenarioContext(None, None, None, lambda: None, clock, [0.005] * 50, [call])
    options = {**parse_scenario("server?bound=p99<=20ms").options, "ladder": [10.0, 25.0, 50.0], "judge_at": 50.0}
    _, facts = _server(ctx, options)
    assert [s["met"] for s in facts["sweep"]] == [True, False, True]  # on to the common load, 50/s, past a miss
    assert facts["max_rate"] == 10.0 and facts["judged_rate"] == 50.0  # 50/s met, but 25/s below it did not


def test_targets_swept_at_their_own_rates_are_not_compared():
    own = _result(_serve(0.0106, "server?rate=sweep&bound=p99<=50ms"))  # not the reference, no shared rates
    for text in ("server.p99<=50ms", "server.rate>=10"):
        check = _check(own, text)
        assert check.verdict == "not_measured" and check.value is None
        assert check.reason == (
            "the reference swept no rates to share: this target's own rates are not compared "
            "(give server?rate=R to judge every target at one fixed load)"
        )
    assert _check(_result(own.scenario("server"), reference=True), "server.p99<=50ms").verdict == "met"  # control


def test_no_common_load_when_the_reference_sustains_none():
    reference = _result(_serve(0.010, "server?rate=sweep&bound=p99<=15ms"), reference=True)
    (shared,) = common_load((parse_scenario("server?bound=p99<=15ms"),), reference)
    assert shared.options["judge_at"] is None
    other = _result(_serve(0.005, "server", ladder=shared.options["ladder"], judge_at=None, bound="p99<=15ms"))
    assert other.scenario("server").facts["max_rate"] == pytest.approx(95.0)  # twice as fast: p99 14.9 ms at 95/s
    for result, whose in ((reference, "this target"), (other, "the reference")):
        check = _check(result, "server.p99<=15ms")
        assert check.verdict == "not_measured"
        assert check.reason == (
            f"{whose} sustained none of the rates tried within p99<=15ms: no common load to judge at "
            "(give server?rate=R to judge every target at one fixed load)"
        )
    assert _check(other, "server.rate>=20").verdict == "met"  # rates are still comparable: the same ones


@pytest.mark.parametrize(
    ("text", "verdict", "reason"),
    [
        ("server.rate>=50", "met", "single observation: 50.0/s kept latency within p99<=50ms, 70.0/s did not"),
        ("server.rate>=70", "not_met", "single observation: 50.0/s kept latency within p99<=50ms, 70.0/s did not"),
        (
            "server.rate>=60",
            "not_measured",
            "50.0/s kept latency within p99<=50ms, 70.0/s did not: the sweep cannot tell whether "
            "server.rate>=60 holds; give server?rate=60",
        ),
        ("server.rate<70", "met", "single observation: 50.0/s kept latency within p99<=50ms, 70.0/s did not"),
        ("server.rate<40", "not_met", "single observation: 50.0/s kept latency within p99<=50ms, 70.0/s did not"),
    ],
)
def test_a_rate_requirement_is_judged_only_where_the_sweep_can_tell(text, verdict, reason):
    reference = _result(_serve(0.010, "server?rate=sweep&bound=p99<=50ms"), reference=True)
    check = _check(reference, text)
    assert (check.verdict, check.reason) == (verdict, reason)
    assert (check.low, check.high, check.confident) == (None, None, False)  # one reading: no interval


def test_a_rate_requirement_below_the_lowest_rate_missed_is_not_judged():
    reference = _result(_serve(0.010, "server?rate=sweep&bound=p99<=15ms"), reference=True)
    low = _check(reference, "server.rate>=5")  # it missed at 10/s: 5/s may or may not be sustained
    assert (low.verdict, low.value) == ("not_measured", None)
    high = _check(reference, "server.rate>=20")
    assert (high.verdict, high.value) == ("not_met", None)  # none sustained, not 0/s
    assert metric_estimate(reference, "server.rate") is None
    assert high.reason == (
        "single observation: no rate tried kept latency within p99<=15ms: none sustained (the lowest, 10.0/s, missed)"
    )


def test_a_rate_above_every_rate_met_is_not_judged():
    reference = _result(_serve(0.010, "server?rate=sweep&bound=p99<=10s"), reference=True)  # meets every rate
    assert all(s["met"] for s in reference.scenario("server").facts["sweep"])
    check = _check(reference, "server.rate>=2000")
    assert check.verdict == "not_measured" and check.reason.startswith("every rate tried, up to 1000.0/s, kept")
    assert _check(reference, "server.rate>=1000").verdict == "met"


def test_a_fixed_rate_is_the_load_every_target_is_judged_at():
    fixed = _result(_serve(0.010, "server?rate=50"))  # not the reference: a fixed rate needs no shared rates
    check = _check(fixed, "server.p99<=50ms")
    assert (check.verdict, check.judged_at) == ("met", pytest.approx(50.0))
    assert check.reason.endswith("judged at the fixed offered rate 50.0/s, the same for every target")
    rate = _check(fixed, "server.rate>=40")
    assert (rate.verdict, rate.samples, rate.low, rate.high) == ("met", 1, None, None)
    assert rate.reason == (
        "single observation: no interval; the rate achieved at the fixed offered rate 50.0/s, the same for every target"
    )


class _Session:
    """A stand-in for a target's session that logs its steps; the reference's server sweeps 10
    and 20/s in its first round."""

    def __init__(self, job, log: list) -> None:
        self.job, self.log, self.timing_done = job, log, False

    def use_scenarios(self, specs: tuple) -> None:
        self.log.append(("use", self.job.target.spec, None, specs))
        self.job = replace(self.job, scenarios=specs)

    def start(self) -> bool:
        return False

    def round(self) -> bool:
        self.timing_done = True
        return True

    def run_scenarios(self, index: int = 0) -> list:
        self.log.append(("scenarios", self.job.target.spec, index, self.job.scenarios))
        facts = {"ladder": [10.0, 20.0], "bound": "p99<=5ms", "max_rate": 10.0}
        return [ScenarioResult("server", "ok", facts=facts)]

    def finish(self) -> TargetResult:
        self.log.append(("finish", self.job.target.spec, None, None))
        facts = {"ladder": [10.0, 20.0], "bound": "p99<=5ms", "max_rate": 10.0}
        server = ScenarioResult("server", "ok", facts=facts)
        return TargetResult(self.job.target, "ok", is_reference=self.job.is_reference, scenarios=(server,))


@pytest.mark.parametrize("interleave", [True, False])
def test_the_reference_sets_the_server_load_in_its_first_round_for_every_target_and_round(interleave):
    from bakeoff.runner.job import TargetJob
    from bakeoff.runner.trial import _drive

    sweep = (parse_scenario("server"),)
    jobs = [
        TargetJob("w", Target("cpu?threads=1"), "", None, scenarios=sweep),  # listed before the reference
        TargetJob("w", Target("cpu"), "", None, is_reference=True, scenarios=sweep),
    ]
    log: list = []
    results = _drive(
        [(j.target.spec, j) for j in jobs],
        lambda job: _Session(
            job,
            log,
        ),
        interleave,
        print,
    )
    assert [r.target.spec for r in results] == ["cpu?threads=1", "cpu"]  # in the order given
    rounds = [(spec, index) for step, spec, index, _ in log if step == "scenarios"]
    if interleave:  # round k on every target before k + 1 on any; the reference first, then in turns
        assert rounds == [
            ("cpu", 0),
            ("cpu?threads=1", 0),
            ("cpu?threads=1", 1),
            ("cpu", 1),
            ("cpu", 2),
            ("cpu?threads=1", 2),
        ]
    else:  # one target after another, the reference first
        assert rounds == [
            ("cpu", 0),
            ("cpu", 1),
            ("cpu", 2),
            ("cpu?threads=1", 0),
            ("cpu?threads=1", 1),
            ("cpu?threads=1", 2),
        ]
    ran = {(spec, index): specs for step, spec, index, specs in log if step == "scenarios"}
    assert ran[("cpu", 0)] == sweep  # the reference's first round sweeps its own capacity
    aligned = {**sweep[0].options, "bound": "p99<=5ms", "ladder": [10.0, 20.0], "judge_at": 10.0}
    later = [key for key in ran if key != ("cpu", 0)]
    assert all(ran[key][0].options == aligned for key in later), {k: ran[k][0].options for k in later}


def test_the_server_figures_state_the_load_they_were_measured_at():
    from bakeoff.report.figures import scenario_figures

    reference, slower = _reference_and(0.0106, "p99<=35ms")
    shown = scenario_figures(slower, slower.scenario("server"))
    assert shown[0].startswith("rate 50.0/s (achieved")  # the latency figures beside it are at 50/s
    assert "highest rate within p99<=35ms: 25.0/s" in shown
    assert "swept at the reference's rates; latency at its highest within the bound, 50.0/s" in shown
    own = scenario_figures(reference, reference.scenario("server"))
    assert not any("swept at the reference's rates" in f for f in own)
