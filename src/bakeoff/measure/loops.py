"""Timing loops for the scenarios beyond single-stream, over plain callables and a clock.

Nothing here knows about models: the scenario modules (:mod:`bakeoff.scenarios`) build the callables (a
batch of a given size, one decoding step, one training step). Each loop synchronises the
device before every clock read and returns the raw observations in seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bakeoff.analysis.queueing import queue_depths
from bakeoff.measure.clock import Clock, PerfClock

__all__ = ["BatchRun", "GenerationRun", "ServerRun", "StepRun", "batch_sweep", "generate", "serve", "train"]


@dataclass(frozen=True)
class ServerRun:
    """Requests that arrived at ``arrivals`` (seconds from the start) and when each was served."""

    rate: float
    arrivals: tuple[float, ...]
    starts: tuple[float, ...]
    finishes: tuple[float, ...]
    depths: tuple[int, ...]

    @property
    def latencies(self) -> list[float]:
        """Arrival to finish: queueing delay included."""
        return [f - a for f, a in zip(self.finishes, self.arrivals, strict=True)]

    @property
    def waits(self) -> list[float]:
        return [s - a for s, a in zip(self.starts, self.arrivals, strict=True)]

    @property
    def achieved_rate(self) -> float:
        """Completions per second: ``n - 1`` intervals between the first and the last finish,
        counted as the offered rate counts ``n - 1`` gaps between arrivals."""
        span = self.finishes[-1] - self.finishes[0]
        return (len(self.finishes) - 1) / span if span > 0 else float("inf")


def serve(
    calls: Sequence[Callable[[], Any]],
    arrivals: Sequence[float],
    sync: Callable[[], None],
    rate: float,
    clock: Clock | None = None,
) -> ServerRun:
    """Run ``calls[i]`` once request ``i`` has arrived and the previous one is done (one server).

    The loop waits (``clock.sleep``) until an arrival if it is idle; a request that arrives
    while another is served queues, and its latency includes that wait.
    """
    clock = clock or PerfClock()
    sync()
    origin = clock.now()
    starts, finishes = [], []
    for call, arrival in zip(calls, arrivals, strict=True):
        idle = origin + arrival - clock.now()
        if idle > 0:
            clock.sleep(idle)
        starts.append(clock.now() - origin)
        call()
        sync()
        finishes.append(clock.now() - origin)
    return ServerRun(rate, tuple(arrivals), tuple(starts), tuple(finishes), tuple(queue_depths(arrivals, finishes)))


@dataclass(frozen=True)
class BatchRun:
    """One batch size of the offline sweep: per-call seconds, or why it stopped there."""

    batch: int
    samples_s: tuple[float, ...] = ()
    error: str = ""


def batch_sweep(
    make_call: Callable[[int], Callable[[], Any]],
    batches: Sequence[int],
    sync: Callable[[], None],
    min_samples: int = 5,
    min_seconds: float = 0.25,
    max_call_s: float = 2.0,
    clock: Clock | None = None,
) -> list[BatchRun]:
    """Time each batch size in turn (one untimed warm-up call first) until one fails or is slow.

    The sweep stops at the first batch size that raises (out of memory, say; recorded with
    its message) or whose call takes longer than ``max_call_s``: larger ones would only be
    slower still.
    """
    clock = clock or PerfClock()
    runs = []
    for batch in batches:
        try:
            call = make_call(batch)
            call()  # warm-up: allocations, and a compilation for a new shape
            sync()
            samples: list[float] = []
            loop_start = clock.now()
            while len(samples) < min_samples or clock.now() - loop_start < min_seconds:
                t0 = clock.now()
                call()
                sync()
                samples.append(clock.now() - t0)
                if samples[-1] > max_call_s:
                    break
        except Exception as exc:  # the batch size the target cannot take: the sweep's end
            runs.append(BatchRun(batch, error=f"{type(exc).__name__}: {str(exc).strip()[:300]}"))
            break
        runs.append(BatchRun(batch, tuple(samples)))
        if min(samples) > max_call_s:
            break
    return runs


@dataclass(frozen=True)
class GenerationRun:
    """Per generation: time to first token; per decoded token after it: time per output token."""

    ttft_s: tuple[float, ...]
    tpot_s: tuple[float, ...]
    tokens: int


def generate(
    prefill: Callable[[], Any],
    step: Callable[[Any], Any],
    tokens: int,
    runs: int,
    sync: Callable[[], None],
    clock: Clock | None = None,
) -> GenerationRun:
    """``runs`` generations of ``tokens`` tokens: ``prefill()`` gives the first token and a
    state, ``step(state)`` the next. The first generation is a warm-up and is not kept."""
    clock = clock or PerfClock()
    ttft, tpot = [], []
    for run in range(runs + 1):
        sync()
        start = clock.now()
        state = prefill()
        sync()
        first = clock.now() - start
        steps = []
        for _ in range(tokens - 1):
            t0 = clock.now()
            state = step(state)
            sync()
            steps.append(clock.now() - t0)
        if run:
            ttft.append(first)
            tpot.extend(steps)
    return GenerationRun(tuple(ttft), tuple(tpot), tokens)


@dataclass(frozen=True)
class StepRun:
    """Training: the first step (compilation included for compiled targets), then steady steps."""

    first_step_s: float
    samples_s: tuple[float, ...]


def train(
    step: Callable[[], Any], steps: int, warmup: int, sync: Callable[[], None], clock: Clock | None = None
) -> StepRun:
    """Time one first step, ``warmup`` untimed steps, then ``steps`` timed steps."""
    clock = clock or PerfClock()
    sync()
    start = clock.now()
    step()
    sync()
    first = clock.now() - start
    for _ in range(warmup):
        step()
    sync()
    samples = []
    for _ in range(steps):
        t0 = clock.now()
        step()
        sync()
        samples.append(clock.now() - t0)
    return StepRun(first, tuple(samples))
