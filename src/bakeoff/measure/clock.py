"""The clock seam: real time in production, a scripted clock in tests."""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "PerfClock"]


class Clock(Protocol):
    def now(self) -> float:
        """Seconds from an arbitrary origin, monotonic."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (the server scenario waits for the next arrival)."""
        ...


class PerfClock:
    """``time.perf_counter``: the highest-resolution monotonic clock Python offers."""

    def now(self) -> float:
        return time.perf_counter()

    def sleep(self, seconds: float) -> None:
        # time.sleep overshoots by up to ~0.1 ms; spin through the last millisecond
        deadline = time.perf_counter() + seconds
        if seconds > 1e-3:
            time.sleep(seconds - 1e-3)
        while time.perf_counter() < deadline:
            pass
