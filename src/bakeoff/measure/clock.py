"""The clock seam: real time in production, a scripted clock in tests."""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "PerfClock"]


class Clock(Protocol):
    def now(self) -> float:
        """Seconds from an arbitrary origin, monotonic."""
        ...


class PerfClock:
    """``time.perf_counter``: the highest-resolution monotonic clock Python offers."""

    def now(self) -> float:
        return time.perf_counter()
