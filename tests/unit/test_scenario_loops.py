"""The scenario timing loops on a fake clock: calls that "take" a known time give known answers."""

from __future__ import annotations

import pytest

from bakeoff.analysis.queueing import fifo_queue, poisson_arrivals
from bakeoff.measure.loops import batch_sweep, generate, serve, train


class FakeClock:
    """Time moves only when a fake call runs (``advance``) or the loop sleeps."""

    def __init__(self) -> None:
        self.t = 0.0
        self.slept = 0.0

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept += seconds
        self.t += seconds

    def takes(self, seconds: float):
        def call():
            self.t += seconds
            return seconds

        return call


def _sync() -> None:
    pass


def test_server_latency_includes_queueing_exactly_as_the_fifo_recursion_says():
    clock = FakeClock()
    arrivals = poisson_arrivals(80.0, 300, seed=5)  # service 10 ms at 80/s: load 0.8, queues form
    run = serve([clock.takes(0.010)] * 300, arrivals, _sync, 80.0, clock)
    expected = fifo_queue(arrivals, [0.010] * 300)
    assert run.starts == pytest.approx(expected.starts)
    assert run.latencies == pytest.approx(expected.latencies(arrivals))
    assert run.depths == expected.depths and max(run.depths) >= 2
    assert run.waits == pytest.approx(expected.waits)
    assert clock.slept > 0  # idle periods were waited out, not skipped
    assert run.achieved_rate == pytest.approx(299 / (run.finishes[-1] - run.finishes[0]))
    assert run.achieved_rate <= 299 / arrivals[-1] * 1.05  # one server cannot finish faster than work arrives


def test_server_at_low_load_serves_each_request_on_arrival():
    clock = FakeClock()
    arrivals = [0.0, 1.0, 2.0, 3.0]
    run = serve([clock.takes(0.001)] * 4, arrivals, _sync, 1.0, clock)
    assert run.latencies == pytest.approx([0.001] * 4)
    assert run.depths == (0, 0, 0, 0)


def test_batch_sweep_stops_at_the_first_failing_batch_size():
    clock = FakeClock()

    def make_call(batch: int):
        if batch >= 8:
            raise RuntimeError("out of memory")
        return clock.takes(0.001 * batch)

    runs = batch_sweep(make_call, [1, 2, 4, 8, 16], _sync, min_samples=3, min_seconds=0.0, clock=clock)
    assert [r.batch for r in runs] == [1, 2, 4, 8]
    assert runs[0].samples_s == pytest.approx((0.001,) * 3)
    assert runs[2].samples_s == pytest.approx((0.004,) * 3)
    assert runs[-1].samples_s == () and runs[-1].error == "RuntimeError: out of memory"


def test_batch_sweep_stops_after_a_slow_batch_size():
    clock = FakeClock()
    runs = batch_sweep(lambda b: clock.takes(1.5 * b), [1, 2, 4], _sync, min_samples=2, max_call_s=2.0, clock=clock)
    assert [r.batch for r in runs] == [1, 2]  # batch 2 takes 3 s a call: larger would be slower still
    assert len(runs[1].samples_s) == 1  # a call over the limit ends that batch size's timing


def test_generation_times_first_token_and_each_later_token_without_the_warm_up_run():
    clock = FakeClock()
    prefill = clock.takes(0.050)

    def step(state):
        clock.t += 0.005
        return state

    run = generate(prefill, step, tokens=5, runs=3, sync=_sync, clock=clock)
    assert run.ttft_s == pytest.approx((0.050,) * 3)
    assert run.tpot_s == pytest.approx((0.005,) * 12)  # 3 runs x 4 tokens after the first


def test_training_keeps_the_first_step_apart_from_steady_steps():
    clock = FakeClock()
    steps = iter([0.5] + [0.02] * 10)

    def step():
        clock.t += next(steps)

    run = train(step, steps=8, warmup=2, sync=_sync, clock=clock)
    assert run.first_step_s == pytest.approx(0.5)
    assert run.samples_s == pytest.approx((0.02,) * 8)
