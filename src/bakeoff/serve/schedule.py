"""When each request of a load run is due: an open-loop arrival schedule.

An open-loop client sends each request at its planned time whether or not earlier ones have
been answered, as independent users do; a closed-loop client (send, wait for the answer, send the
next) slows down exactly when the service does and hides its stalls. The schedules:

* ``poisson``: independent exponential gaps (many independent users);
* ``gamma?cv=C``: gamma-distributed gaps with coefficient of variation ``C`` (``cv=1`` is
  Poisson; above 1 the arrivals come in bursts, below 1 more evenly);
* ``constant``: one request every ``1 / rate`` seconds;
* a recorded trace (:func:`from_trace`): its own timestamps, scaled to a rate if asked.

Drawn gaps are rescaled so that their sum is exactly ``(count - 1) / rate`` (as vLLM's serving
benchmark does): the offered rate in a report is the load that was applied, not a draw about it.
Times are seconds from the run's start; the first request is due at 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from bakeoff.analysis.queueing import poisson_arrivals
from bakeoff.errors import SpecError

__all__ = ["KINDS", "Schedule", "from_trace", "parse_schedule"]

KINDS = ("poisson", "gamma", "constant")


@dataclass(frozen=True)
class Schedule:
    """An arrival process: ``kind`` (one of :data:`KINDS`) and, for ``gamma``, its ``cv``."""

    kind: str = "poisson"
    cv: float = 1.0

    def times(self, rate: float, count: int, seed: int = 0) -> list[float]:
        """``count`` send times (seconds from 0, the first at 0) at ``rate`` requests per second."""
        if rate <= 0:
            raise SpecError(f"the request rate must be positive, got {rate:g}", hint="e.g. --rate 20/s")
        if count < 1:
            raise SpecError("a load run needs at least one request", hint="e.g. --requests 200")
        if self.kind == "constant":
            return [i / rate for i in range(count)]
        if self.kind == "poisson" or (self.kind == "gamma" and self.cv == 1.0):
            return poisson_arrivals(rate, count, seed=seed, exact=True)
        import numpy as np

        shape = 1.0 / self.cv**2  # gamma gaps: mean 1/rate, coefficient of variation cv
        gaps = np.random.default_rng(seed).gamma(shape, 1.0 / (rate * shape), count - 1)
        if count > 1 and gaps.sum() > 0:
            gaps *= (count - 1) / rate / gaps.sum()
        return [0.0, *(float(t) for t in np.cumsum(gaps))]


def parse_schedule(spec: str) -> Schedule:
    """``poisson``, ``constant`` or ``gamma?cv=2`` as a :class:`Schedule`.

    Raises:
        SpecError: an unknown kind, an option other than ``cv`` (gamma's), a ``cv`` that is not
            a positive number.
    """
    kind, _, query = spec.strip().partition("?")
    if kind not in KINDS:
        raise SpecError(
            f"unknown arrival schedule '{spec}'", hint=f"use one of {', '.join(KINDS)} (e.g. poisson, gamma?cv=2)"
        )
    options = dict(part.partition("=")[::2] for part in query.split("&") if part)
    unknown = set(options) - ({"cv"} if kind == "gamma" else set())
    if unknown:
        raise SpecError(
            f"arrival schedule '{spec}' takes no option {', '.join(sorted(unknown))}",
            hint="only gamma takes one: gamma?cv=2",
        )
    if kind != "gamma":
        return Schedule(kind)
    try:
        cv = float(options.get("cv", "1"))
    except ValueError:
        cv = -1.0
    if not (cv > 0 and math.isfinite(cv)):
        raise SpecError(f"gamma's cv must be a positive number, got '{options.get('cv')}'", hint="e.g. gamma?cv=2")
    return Schedule(kind, cv)


def from_trace(timestamps: Sequence[float], rate: float | None = None) -> list[float]:
    """A recorded trace's send times: its timestamps from the earliest, each in its own place (the
    ``i``-th is the ``i``-th request's, so that it stays paired with that request's body),
    optionally scaled so that the trace's mean rate becomes ``rate`` (its bursts keep their shape).

    Raises:
        SpecError: an empty trace, or a rate asked of a trace whose timestamps are all equal.
    """
    if not timestamps:
        raise SpecError("the trace holds no timestamps", hint="give one timestamp (seconds) per request")
    first = min(float(t) for t in timestamps)
    times = [float(t) - first for t in timestamps]
    if rate is None or len(times) == 1:
        return times
    if rate <= 0:
        raise SpecError(f"the request rate must be positive, got {rate:g}", hint="e.g. --rate 20/s")
    span = max(times)
    if span <= 0:
        raise SpecError("a trace whose requests all share one timestamp has no rate to scale")
    scale = (len(times) - 1) / rate / span
    return [t * scale for t in times]
