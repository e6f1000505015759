"""The timing loop, driven by a scripted clock so every number is a known answer."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from bakeoff.measure import TimingSettings, time_callable
from bakeoff.measure.clock import PerfClock


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
