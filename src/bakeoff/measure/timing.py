"""The timing loop: first call, warm-up until compilation stops, then timed iterations.

Algorithm:
    1. Time the first call on its own: for compiled targets it includes compilation, which is
       what a service pays on its first request ("time to first result").
    2. Warm up: call again until a call triggers no new compilation (probed through a
       caller-supplied counter) and at least ``warmup_min`` calls were made; stop at
       ``warmup_max`` and report that compilation had not settled.
    3. Time single calls, synchronising the device before each clock read, until both
       ``min_samples`` and ``min_seconds`` are reached (or a cap is hit). Every sample is kept.

The phases are separate functions so that a trial can time targets in turns: a round of
:func:`time_block` (or one :func:`time_pass` over an input profile) for one target, then one
for the next, until :func:`enough_samples` says each has enough. :func:`time_callable` runs
all three phases in one go.

A round timed in turns starts after another worker ran: caches, branch predictors and the
scheduler's view of the process are cold, and its first call is not a sample of steady state
(several times its neighbours). So each round begins with
``round_warmup`` untimed calls (:func:`warm_calls`): that penalty is paid, not sampled.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bakeoff.measure.clock import Clock, PerfClock

__all__ = [
    "ROUNDS",
    "ProfileRun",
    "TimingRun",
    "TimingSettings",
    "enough_samples",
    "first_call",
    "time_block",
    "time_callable",
    "time_pass",
    "warm_calls",
    "warm_up",
]

#: Interleaved timing splits a target's minimum samples and seconds into about this many rounds.
ROUNDS = 10


@dataclass(frozen=True)
class TimingSettings:
    """How long to measure. Defaults give >= 30 samples and >= 0.5 s of timed calls.

    ``round_warmup`` untimed calls open every timing round (see the module docstring).
    """

    min_samples: int = 30
    min_seconds: float = 0.5
    max_samples: int = 10_000
    max_seconds: float = 60.0
    warmup_min: int = 2
    warmup_max: int = 20
    round_warmup: int = 1

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict) -> TimingSettings:
        """Tolerant of older documents: settings stored before ``round_warmup`` existed timed
        every round's first call, so a missing value reads as 0; unknown keys are ignored."""
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known.setdefault("round_warmup", 0)
        return cls(**known)


@dataclass(frozen=True)
class TimingRun:
    """What the loop observed (seconds)."""

    first_call_s: float
    first_output: Any
    warmup_calls: int
    settled: bool
    samples_s: tuple[float, ...]


def first_call(fn: Callable[[], Any], sync: Callable[[], None], clock: Clock) -> tuple[float, Any]:
    """Phase 1: the first call on its own (compilation included), and its output."""
    sync()
    start = clock.now()
    output = fn()
    sync()
    return clock.now() - start, output


def warm_up(
    fn: Callable[[], Any], settings: TimingSettings, compile_events: Callable[[], int] | None = None
) -> tuple[int, bool]:
    """Phase 2: call until a call compiles nothing and ``warmup_min`` calls were made.

    Returns the number of calls and whether compilation settled before ``warmup_max``.
    """
    warmups = 0
    while warmups < settings.warmup_max:
        before = compile_events() if compile_events else 0
        fn()
        warmups += 1
        quiet = compile_events is None or compile_events() == before
        if quiet and warmups >= settings.warmup_min:
            return warmups, True
    return warmups, False


def warm_calls(fn: Callable[[], Any], sync: Callable[[], None], calls: int, clock: Clock | None = None) -> float:
    """``calls`` calls kept out of the samples: a round's cold start, paid before its samples.

    Returns the seconds they took (0 without a ``clock``), so that the round-start penalty can
    be reported apart from the samples.
    """
    if not calls:
        return 0.0
    sync()
    start = clock.now() if clock else 0.0
    for _ in range(calls):
        fn()
    sync()
    return clock.now() - start if clock else 0.0


def time_block(
    fn: Callable[[], Any],
    sync: Callable[[], None],
    clock: Clock,
    count: int,
    seconds: float,
    cap_s: float,
    warmup: int = 0,
) -> list[float]:
    """Time single calls until at least ``count`` calls and ``seconds`` (or ``cap_s``) passed.

    ``warmup`` untimed calls come first (a round's cold start); they count towards nothing.
    """
    warm_calls(fn, sync, warmup)
    sync()
    samples: list[float] = []
    loop_start = clock.now()
    while True:
        elapsed = clock.now() - loop_start
        if samples and ((len(samples) >= count and elapsed >= seconds) or elapsed >= cap_s):
            return samples
        t0 = clock.now()
        fn()
        sync()
        samples.append(clock.now() - t0)


def enough_samples(count: int, seconds: float, settings: TimingSettings) -> bool:
    """Whether a target has been timed enough: both minimums met, or a cap reached."""
    if count >= settings.max_samples or (count and seconds >= settings.max_seconds):
        return True
    return count >= settings.min_samples and seconds >= settings.min_seconds


def time_callable(
    fn: Callable[[], Any],
    sync: Callable[[], None],
    settings: TimingSettings | None = None,
    clock: Clock | None = None,
    compile_events: Callable[[], int] | None = None,
) -> TimingRun:
    """Run the three phases above on ``fn`` in one go and return the raw observations."""
    settings = settings or TimingSettings()
    clock = clock or PerfClock()
    first_call_s, first_output = first_call(fn, sync, clock)
    warmups, settled = warm_up(fn, settings, compile_events)
    samples = time_block(fn, sync, clock, settings.min_samples, settings.min_seconds, settings.max_seconds)[
        : settings.max_samples
    ]
    return TimingRun(
        first_call_s=first_call_s,
        first_output=first_output,
        warmup_calls=warmups,
        settled=settled,
        samples_s=tuple(samples),
    )


@dataclass(frozen=True)
class ProfileRun:
    """What a pass over an input profile observed (seconds).

    ``first_pass`` holds, per request in arrival order, ``(shape, seconds, compiled)``: the
    traffic a freshly started service sees, compilations included. ``steady`` pools, per
    shape, every later call; ``outputs`` is one steady-state output per shape; ``unsteady``
    the shapes that still compiled during the steady check.
    """

    first_pass: tuple[tuple[Any, float, bool], ...]
    steady: dict[Any, tuple[float, ...]]
    outputs: dict[Any, Any]
    unsteady: tuple[Any, ...]
    passes: int


def time_pass(
    calls: dict[Any, Callable[[], Any]],
    order: list[Any],
    sync: Callable[[], None],
    clock: Clock,
    compile_events: Callable[[], int] | None = None,
    warmup: int = 0,
) -> list[tuple[Any, float, Any, bool]]:
    """One pass over the profile in arrival order: ``(shape, seconds, output, compiled)`` per request.

    ``warmup`` untimed calls of the first request's shape come first (a round's cold start).
    """
    if order:
        warm_calls(calls[order[0]], sync, warmup)
    observed = []
    for shape in order:
        before = compile_events() if compile_events else 0
        sync()
        start = clock.now()
        out = calls[shape]()
        sync()
        seconds = clock.now() - start
        observed.append((shape, seconds, out, bool(compile_events and compile_events() != before)))
    return observed
