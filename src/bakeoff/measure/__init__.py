"""Clocks and timing loops. Measuring code returns values; it never prints."""

from __future__ import annotations

from bakeoff.measure.clock import Clock, PerfClock
from bakeoff.measure.timing import TimingSettings, time_callable

__all__ = ["Clock", "PerfClock", "TimingSettings", "time_callable"]
