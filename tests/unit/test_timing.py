"""The timing loop, driven by a scripted clock so every number is a known answer."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from bakeoff.measure import TimingSettings, time_callable
from bakeoff.measure.clock import PerfClock
from bakeoff.runner.traffic import OneInput, ProfileTraffic


class FakeClock:
    """A clock that only moves when the code under test says so."""

    def __init__(self) -> None:
        self.t = 0.0
        self.reads = 0

    def now(self) -> float:
        self.reads += 1
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class ScriptedCall:
    """The function being timed: each call takes the next scripted duration (the last repeats).

    Optionally "compiles" on each of its first ``compiling_calls`` calls, bumping an event counter.
    """

    def __init__(self, clock: FakeClock, durations: Sequence[float], compiling_calls: int = 0) -> None:
        self.clock = clock
        self.durations = list(durations)
        self.calls = 0
        self.events = 0
        self.compiling_calls = compiling_calls

    def __call__(self) -> int:
        duration = self.durations[min(self.calls, len(self.durations) - 1)]
        self.calls += 1
        if self.calls <= self.compiling_calls:
            self.events += 1
        self.clock.advance(duration)
        return self.calls

    def compile_events(self) -> int:
        return self.events


def _settings(**overrides: float) -> TimingSettings:
    values = {
        "min_samples": 3,
        "min_seconds": 0.0,
        "max_samples": 1000,
        "max_seconds": 1e9,
        "warmup_min": 2,
        "warmup_max": 20,
    }
    values.update(overrides)
    return TimingSettings(**values)  # type: ignore[arg-type]


def _no_sync() -> None:
    pass


def test_exact_samples_from_scripted_durations() -> None:
    clock = FakeClock()
    # first call 2.0 s, two warm-ups 1.0 s each, then timed calls
    fn = ScriptedCall(clock, [2.0, 1.0, 1.0, 0.25, 0.5, 0.125])
    run = time_callable(fn, _no_sync, _settings(min_samples=3), clock)
    assert run.first_call_s == 2.0
    assert run.first_output == 1  # what the first call returned
    assert run.warmup_calls == 2
    assert run.settled is True
    assert run.samples_s == (0.25, 0.5, 0.125)
    assert fn.calls == 1 + 2 + 3


def test_sync_time_is_inside_each_sample() -> None:
    clock = FakeClock()
    fn = ScriptedCall(clock, [1.0, 0.5, 0.5, 0.25])
    syncs = []

    def sync() -> None:  # a device that needs 0.125 s to drain its queue
        syncs.append(clock.t)
        clock.advance(0.125)

    run = time_callable(fn, sync, _settings(min_samples=4), clock)
    assert run.first_call_s == 1.0 + 0.125
    assert run.samples_s == (0.375,) * 4
    # once before the first call, once after it, once after warm-up, once per sample
    assert len(syncs) == 1 + 1 + 1 + 4


def test_no_compile_probe_means_warmup_min_calls() -> None:
    clock = FakeClock()
    fn = ScriptedCall(clock, [1.0])
    run = time_callable(fn, _no_sync, _settings(warmup_min=5, min_samples=1), clock)
    assert run.warmup_calls == 5
    assert run.settled is True


def test_warmup_stops_once_compilation_stops() -> None:
    clock = FakeClock()
    # first call plus the first three warm-ups compile; the fourth warm-up is quiet
    fn = ScriptedCall(clock, [1.0], compiling_calls=4)
    run = time_callable(
        fn, _no_sync, _settings(warmup_min=2, warmup_max=20, min_samples=1), clock, compile_events=fn.compile_events
    )
    assert run.warmup_calls == 4
    assert run.settled is True
    assert fn.calls == 1 + 4 + 1


def test_warmup_min_respected_when_compilation_stops_early() -> None:
    clock = FakeClock()
    fn = ScriptedCall(clock, [1.0], compiling_calls=1)  # only the first call compiles
    run = time_callable(
        fn, _no_sync, _settings(warmup_min=6, warmup_max=20, min_samples=1), clock, compile_events=fn.compile_events
    )
    assert run.warmup_calls == 6
    assert run.settled is True


def test_warmup_follows_the_probe_values() -> None:
    # a call is quiet when the probe reads the same before and after it
    clock = FakeClock()
    events = iter([0, 0, 0, 1, 1, 2, 2, 2])  # probe values read before/after each warm-up call

    fn = ScriptedCall(clock, [1.0])
    run = time_callable(
        fn, _no_sync, _settings(warmup_min=1, warmup_max=20, min_samples=1), clock, compile_events=lambda: next(events)
    )
    # call 1: 0 -> 0 quiet and >= warmup_min: stop at once
    assert run.warmup_calls == 1
    assert run.settled is True

    events2 = iter([0, 1, 1, 2, 2, 2])
    fn2 = ScriptedCall(clock, [1.0])
    run2 = time_callable(
        fn2,
        _no_sync,
        _settings(warmup_min=1, warmup_max=20, min_samples=1),
        clock,
        compile_events=lambda: next(events2),
    )
    # call 1: 0 -> 1 compiles, call 2: 1 -> 2 compiles, call 3: 2 -> 2 quiet
    assert run2.warmup_calls == 3
    assert run2.settled is True


def test_not_settled_when_compilation_never_stops() -> None:
    clock = FakeClock()
    fn = ScriptedCall(clock, [1.0, 0.5], compiling_calls=10**6)
    run = time_callable(
        fn, _no_sync, _settings(warmup_min=2, warmup_max=7, min_samples=2), clock, compile_events=fn.compile_events
    )
    assert run.settled is False
    assert run.warmup_calls == 7
    # measurement still happens after an unsettled warm-up
    assert run.samples_s == (0.5, 0.5)


def test_min_samples_honoured() -> None:
    clock = FakeClock()
    fn = ScriptedCall(clock, [1.0, 1.0, 1.0, 0.5])
    run = time_callable(fn, _no_sync, _settings(min_samples=17, min_seconds=0.0), clock)
    assert len(run.samples_s) == 17


def test_min_seconds_honoured() -> None:
    clock = FakeClock()
    fn = ScriptedCall(clock, [1.0, 1.0, 1.0, 0.25])
    # 3 samples would be enough by count, but 1.0 s of timed calls needs 4 calls of 0.25 s;
    # then keep going until both are met
    run = time_callable(fn, _no_sync, _settings(min_samples=3, min_seconds=1.0), clock)
    assert run.samples_s == (0.25,) * 4
    run = time_callable(
        ScriptedCall(clock, [1.0, 1.0, 1.0, 0.25]), _no_sync, _settings(min_samples=1, min_seconds=2.5), clock
    )
    assert len(run.samples_s) == 10


def test_both_minimums_needed() -> None:
    clock = FakeClock()
    fn = ScriptedCall(clock, [1.0, 1.0, 1.0, 2.0])
    # one sample already exceeds min_seconds, but min_samples wants five
    run = time_callable(fn, _no_sync, _settings(min_samples=5, min_seconds=1.0), clock)
    assert run.samples_s == (2.0,) * 5


def test_max_samples_caps() -> None:
    clock = FakeClock()
    fn = ScriptedCall(clock, [1.0, 1.0, 1.0, 0.125])
    run = time_callable(fn, _no_sync, _settings(min_samples=100, min_seconds=100.0, max_samples=6), clock)
    assert len(run.samples_s) == 6


def test_max_seconds_caps() -> None:
    clock = FakeClock()
    fn = ScriptedCall(clock, [1.0, 1.0, 1.0, 0.25])
    run = time_callable(fn, _no_sync, _settings(min_samples=100, min_seconds=100.0, max_seconds=1.0), clock)
    assert run.samples_s == (0.25,) * 4


def test_max_seconds_still_takes_one_sample() -> None:
    clock = FakeClock()
    fn = ScriptedCall(clock, [1.0, 1.0, 1.0, 5.0])
    run = time_callable(fn, _no_sync, _settings(min_samples=100, min_seconds=100.0, max_seconds=0.0), clock)
    assert run.samples_s == (5.0,)


def test_every_sample_is_kept_in_order() -> None:
    clock = FakeClock()
    durations = [1.0, 1.0, 1.0, 0.5, 0.25, 0.75, 0.125, 0.0625, 0.375]
    fn = ScriptedCall(clock, durations)
    run = time_callable(fn, _no_sync, _settings(min_samples=6), clock)
    assert run.samples_s == tuple(durations[3:])


def test_settings_round_trip() -> None:
    settings = TimingSettings(
        min_samples=5, min_seconds=0.25, max_samples=50, max_seconds=2.0, warmup_min=1, warmup_max=3
    )
    assert TimingSettings.from_dict(settings.to_dict()) == settings
    defaults = TimingSettings()
    assert defaults.min_samples == 30 and defaults.min_seconds == 0.5
    assert defaults.warmup_min <= defaults.warmup_max


def test_default_clock_counts_seconds_and_never_goes_back() -> None:
    import time

    clock = PerfClock()
    readings = [clock.now() for _ in range(1000)]
    assert readings == sorted(readings)
    start = clock.now()
    time.sleep(0.02)  # the OS sleeps at least this long: a lower bound, never an upper one
    assert clock.now() - start >= 0.019
    assert clock.now() - start < 1e6  # seconds, not nanoseconds


def test_real_clock_default_runs() -> None:
    calls = []
    run = time_callable(lambda: calls.append(1), _no_sync, _settings(min_samples=3, warmup_min=1, warmup_max=1))
    assert len(run.samples_s) == 3
    assert all(s >= 0 for s in run.samples_s)
    assert len(calls) == 1 + 1 + 3


@pytest.mark.parametrize("warmup_max", [1, 3])
def test_warmup_max_below_min(warmup_max: int) -> None:
    clock = FakeClock()
    fn = ScriptedCall(clock, [1.0])
    run = time_callable(fn, _no_sync, _settings(warmup_min=5, warmup_max=warmup_max, min_samples=1), clock)
    assert run.warmup_calls == warmup_max
    assert run.settled is False


# -- a round timed in turns starts cold: its first call is paid, not sampled ----------------


class ColdAfterOthers:
    """A call that is slow (``cold`` s) the first time after another worker ran, then ``warm`` s.

    ``other_worker_ran()`` is what the turn of another target does to this one's caches.
    """

    def __init__(self, clock: FakeClock, cold: float = 9.0, warm: float = 1.0) -> None:
        self.clock, self.cold_s, self.warm_s = clock, cold, warm
        self.is_cold = True
        self.calls = 0

    def other_worker_ran(self) -> None:
        self.is_cold = True

    def __call__(self) -> int:
        self.calls += 1
        self.clock.advance(self.cold_s if self.is_cold else self.warm_s)
        self.is_cold = False
        return self.calls


def test_time_block_warmup_keeps_the_cold_call_out_of_the_samples() -> None:
    from bakeoff.measure.timing import time_block, warm_calls

    clock = FakeClock()
    fn = ColdAfterOthers(clock)
    assert time_block(fn, _no_sync, clock, 3, 0.0, 1e9) == [9.0, 1.0, 1.0]  # the control: no warm call
    fn.other_worker_ran()
    assert time_block(fn, _no_sync, clock, 3, 0.0, 1e9, warmup=1) == [1.0, 1.0, 1.0]
    assert fn.calls == 3 + 1 + 3
    fn.other_worker_ran()
    assert warm_calls(fn, _no_sync, 2, clock) == 9.0 + 1.0  # timed apart when a clock is given
    assert warm_calls(fn, _no_sync, 0, clock) == 0.0 and fn.calls == 3 + 1 + 3 + 2


def test_time_pass_warmup_calls_the_first_shape_untimed() -> None:
    from bakeoff.measure.timing import time_pass

    clock = FakeClock()
    first, second = ColdAfterOthers(clock, cold=9.0, warm=2.0), ColdAfterOthers(clock, cold=0.5, warm=0.5)
    calls = {"a": first, "b": second}
    assert [s for _, s, _, _ in time_pass(calls, ["a", "b", "a"], _no_sync, clock)] == [9.0, 0.5, 2.0]
    first.other_worker_ran()
    assert [s for _, s, _, _ in time_pass(calls, ["a", "b", "a"], _no_sync, clock, warmup=1)] == [2.0, 0.5, 2.0]
    assert (first.calls, second.calls) == (2 + 3, 1 + 1)


_OPEN: list = []


@pytest.fixture(autouse=True)
def _close_sessions():
    """Close the sessions a test made: each holds a capture directory of its own."""
    yield
    while _OPEN:
        session = _OPEN.pop()
        session.prepared = None  # scripted calls, not a prepared model: nothing of theirs to close
        session._close()


def _session(clock: FakeClock, round_warmup: int, profile: bool = False):
    """A session already past ``start``: its calls are scripted, so no model is built."""
    from bakeoff.runner.job import TargetJob
    from bakeoff.runner.session import TargetSession
    from bakeoff.target.spec import Target
    from bakeoff.workload.profile import InputProfile, Request

    timing = _settings(min_samples=40, min_seconds=0.0, round_warmup=round_warmup)
    requests = (Request(1, 8), Request(1, 16))
    job = TargetJob(
        workload_spec="py:unused.py:make",
        target=Target("cpu"),
        fingerprint="0",
        baseline_path=None,
        timing=timing,
        profile=InputProfile(requests, "seq=8,16") if profile else None,
    )
    session = TargetSession(job, clock)
    _OPEN.append(session)
    session.sync, session.phase = _no_sync, "timing"
    session.prepared = type("Prepared", (), {"compile_summary": None})()
    return session, requests


@pytest.mark.parametrize("round_warmup", [0, 1])
def test_every_round_of_a_session_opens_with_an_untimed_call(round_warmup: int) -> None:
    clock = FakeClock()
    session, _ = _session(clock, round_warmup)
    fn = ColdAfterOthers(clock)
    session.prepared = fn  # the prepared model is what each round calls
    session.traffic = OneInput(session.job, fn)
    for _ in range(3):
        fn.other_worker_ran()
        session.round()
    per_round = [r["samples"] for r in session.rounds]
    assert per_round == [4, 4, 4]  # ceil(40 / ROUNDS) samples each
    assert fn.calls == sum(per_round) + 3 * round_warmup
    cold = [s for s in session.samples if s == 9.0]
    assert len(cold) == (0 if round_warmup else 3)  # the control shows the per-round excess
    assert len(session.samples) == 12
    # the round-start penalty is reported apart: what the warm call took, per round
    assert [r.get("warm_ms") for r in session.rounds] == ([9000.0] * 3 if round_warmup else [None] * 3)


@pytest.mark.parametrize("round_warmup", [0, 1])
def test_every_profile_pass_opens_with_an_untimed_call(round_warmup: int) -> None:
    clock = FakeClock()
    session, requests = _session(clock, round_warmup, profile=True)
    first, second = ColdAfterOthers(clock), ColdAfterOthers(clock, cold=2.0, warm=2.0)
    keys = [(r.batch, r.seq) for r in requests]
    calls = dict(zip(keys, [first, second], strict=True))
    session.traffic = ProfileTraffic(session.job, session.prepared, calls, dict.fromkeys(keys, 16))
    assert session.traffic.order == keys
    for _ in range(2):
        first.other_worker_ran()
        session.round()
    assert session.traffic.per_shape[keys[0]] == ([1.0, 1.0] if round_warmup else [9.0, 9.0])
    assert session.traffic.per_shape[keys[1]] == [2.0, 2.0]
    assert [r.get("warm_ms") for r in session.rounds] == ([9000.0] * 2 if round_warmup else [None] * 2)


def test_settings_stored_before_round_warmup_read_as_zero() -> None:
    stored = {k: v for k, v in TimingSettings().to_dict().items() if k != "round_warmup"}
    assert TimingSettings.from_dict(stored).round_warmup == 0  # older runs timed every first call
    assert TimingSettings().round_warmup == 1
    assert TimingSettings.from_dict({**stored, "from_the_future": 1}) == TimingSettings(round_warmup=0)
