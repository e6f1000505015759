"""Arrival schedules and the load run's own validity rule, on synthetic values with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from bakeoff.errors import SpecError
from bakeoff.serve.load import LoadRun, Sent
from bakeoff.serve.schedule import Schedule, from_trace, parse_schedule


@pytest.mark.parametrize(
    ("spec", "cv"), [("poisson", 1.0), ("constant", 0.0), ("gamma?cv=2", 2.0), ("gamma?cv=0.5", 0.5)]
)
def test_each_schedule_offers_its_rate_exactly_with_its_burstiness(spec: str, cv: float) -> None:
    times = parse_schedule(spec).times(rate=50, count=4001, seed=7)
    assert times[0] == 0.0 and times[-1] == pytest.approx(4000 / 50)  # the offered rate is the rate
    gaps = np.diff(times)
    assert (gaps >= 0).all()
    assert gaps.std() / gaps.mean() == pytest.approx(cv, abs=0.08)


def test_a_schedule_is_the_same_for_a_seed_and_differs_for_another() -> None:
    poisson = Schedule("poisson")
    assert poisson.times(10, 50, seed=1) == poisson.times(10, 50, seed=1) != poisson.times(10, 50, seed=2)


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("posson", "unknown arrival schedule 'posson'"),
        ("poisson?cv=2", "takes no option cv"),
        ("gamma?cv=0", "gamma's cv must be a positive number, got '0'"),
        ("gamma?cv=abc", "gamma's cv must be a positive number, got 'abc'"),
        ("gamma?burst=2", "takes no option burst"),
    ],
)
def test_a_malformed_schedule_is_refused_with_what_was_wrong(spec: str, said: str) -> None:
    with pytest.raises(SpecError, match=said.replace("?", r"\?")):
        parse_schedule(spec)


def test_a_trace_keeps_its_shape_and_scales_to_a_rate() -> None:
    assert from_trace([10.0, 10.5, 12.0]) == [0.0, 0.5, 2.0]
    assert from_trace([10.0, 10.5, 12.0], rate=2.0) == pytest.approx([0.0, 0.25, 1.0])  # 2 gaps in 1 s
    with pytest.raises(SpecError):
        from_trace([])
    with pytest.raises(SpecError):
        from_trace([3.0, 3.0], rate=1.0)


def _run(lag_s: float, latency_s: float, n: int = 100) -> LoadRun:
    sent = [Sent(i, i * 0.01, i * 0.01 + lag_s, i * 0.01 + latency_s, 200) for i in range(n)]
    return LoadRun(tuple(sent), wall_s=n * 0.01)


def test_a_run_whose_client_fell_behind_its_schedule_is_not_to_be_judged() -> None:
    # the seeded fault: the client sent every request 20 ms late against 10 ms latencies
    late = _run(lag_s=0.020, latency_s=0.030)
    assert late.lag_p99_s() == pytest.approx(0.020) and not late.kept_schedule
    # the control: half a millisecond of lag against 10 ms is a kept schedule
    kept = _run(lag_s=0.0005, latency_s=0.010)
    assert kept.kept_schedule
    # judged at an objective: 2 ms of lag is too much for a 10 ms objective, not for a 300 ms one
    lagging = _run(lag_s=0.002, latency_s=0.010)
    assert not lagging.kept_schedule_for(0.010) and lagging.kept_schedule_for(0.300)
    assert kept.latencies() == pytest.approx([0.010] * 100) and kept.latencies("send") == pytest.approx([0.0095] * 100)


def test_bodies_and_send_times_must_pair_up() -> None:
    from bakeoff.errors import BakeoffError
    from bakeoff.serve.load import send_on_schedule

    with pytest.raises(BakeoffError, match="2 request bodies for 3 send times"):
        send_on_schedule("http://127.0.0.1:9/", [{}, {}], [0.0, 0.1, 0.2])
