"""A single-server FIFO queue: what a service that handles one request at a time sees.

Pure functions: arrivals of a Poisson process, and the Lindley recursion that turns arrival
and service times into waiting times and queue depths. The server scenario measures real
service times under real arrivals; these functions give the known answers its tests check
and explain what it reports.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["QueueTrace", "fifo_queue", "poisson_arrivals", "queue_depths"]


def poisson_arrivals(rate: float, count: int, seed: int = 0, exact: bool = False) -> list[float]:
    """``count`` arrival times (seconds from 0) of a Poisson process with ``rate`` per second.

    Inter-arrival gaps are independent exponentials with mean ``1 / rate``; the first request
    arrives at 0 so a run starts with work to do. Over a hundred arrivals the offered rate
    varies by about 10% from draw to draw; ``exact`` rescales the gaps so that the offered rate
    is ``rate`` exactly (the gaps keep their exponential shape), so that a rate in a report is
    the load that was applied.
    """
    if rate <= 0:
        raise ValueError(f"arrival rate {rate} must be positive")
    if count < 1:
        raise ValueError("at least one arrival")
    import numpy as np

    gaps = np.random.default_rng(seed).exponential(1.0 / rate, count - 1)
    if exact and count > 1:
        gaps *= (count - 1) / rate / gaps.sum()
    return [0.0, *(float(t) for t in np.cumsum(gaps))]


def queue_depths(arrivals: Sequence[float], finishes: Sequence[float]) -> list[int]:
    """For each request, how many earlier requests were still queued or in service when it arrived.

    A single FIFO server finishes requests in order, so the earlier requests already done are
    found by bisection: O(n log n).
    """
    if any(b < a for a, b in itertools.pairwise(finishes)):
        raise ValueError("finishes of a FIFO server must be in order")
    return [i - bisect.bisect_right(finishes, arrival, 0, i) for i, arrival in enumerate(arrivals)]


@dataclass(frozen=True)
class QueueTrace:
    """Per request: when service started and finished, time spent waiting, and queue depth."""

    starts: tuple[float, ...]
    finishes: tuple[float, ...]
    waits: tuple[float, ...]
    depths: tuple[int, ...]

    def latencies(self, arrivals: Sequence[float]) -> list[float]:
        """Arrival to finish: queueing delay plus service."""
        return [f - a for f, a in zip(self.finishes, arrivals, strict=True)]


def fifo_queue(arrivals: Sequence[float], services: Sequence[float]) -> QueueTrace:
    """Lindley's recursion: service starts at ``max(arrival, previous finish)``.

    Raises:
        ValueError: lengths differ, or arrivals are not in order.
    """
    if len(arrivals) != len(services):
        raise ValueError("one service time per arrival")
    if any(b < a for a, b in itertools.pairwise(arrivals)):
        raise ValueError("arrivals must be in time order")
    starts, finishes, free_at = [], [], float("-inf")
    for arrival, service in zip(arrivals, services, strict=True):
        start = max(arrival, free_at)
        free_at = start + service
        starts.append(start)
        finishes.append(free_at)
    waits = tuple(s - a for s, a in zip(starts, arrivals, strict=True))
    return QueueTrace(tuple(starts), tuple(finishes), waits, tuple(queue_depths(arrivals, finishes)))
