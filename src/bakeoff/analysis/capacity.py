"""How many replicas of a service a peak needs, and what they cost a month.

A replica sustains its objectives up to a rate between ``low`` and ``high`` requests per second
(:mod:`bakeoff.serve.search`'s bracket: met at ``low``, not met at ``high``). A peak of ``peak``
requests per second with ``headroom`` (a share above the peak: 0.2 plans for 120% of it) then
needs at most ``ceil(peak * (1 + headroom) / low)`` replicas (the capacity shown to hold) and at
least ``ceil(peak * (1 + headroom) / high)`` (the capacity shown not to hold: fewer is known too
few). With a price per replica-hour, each count costs ``count * price * 730`` a month.

What it cannot see: whether replicas scale linearly (a shared database, a load balancer's own
limit), the traffic's own shape at the peak (the search used the run's arrival process and
request mix), and start-up: replicas added at the peak take their ``ready`` time to serve.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bakeoff.analysis.cost import Price
from bakeoff.codec import Value

__all__ = ["HOURS_PER_MONTH", "CapacityPlan", "capacity_plan"]

#: Hours in an average month (8,760 a year over 12), as cloud price sheets count them.
HOURS_PER_MONTH = 730.0


@dataclass(frozen=True)
class CapacityPlan(Value):
    """Replicas for ``peak`` (per second) with ``headroom``: ``most`` (from the rate shown to hold)
    and ``least`` (None: no rate tried was too high, so fewer may do); a month of each at
    ``per_hour`` of ``currency`` (None: not priced)."""

    peak: float
    headroom: float
    most: int
    least: int | None
    per_hour: float | None = None
    currency: str = ""

    @property
    def monthly_most(self) -> float | None:
        return None if self.per_hour is None else self.most * self.per_hour * HOURS_PER_MONTH

    @property
    def monthly_least(self) -> float | None:
        return None if self.per_hour is None or self.least is None else self.least * self.per_hour * HOURS_PER_MONTH

    @property
    def text(self) -> str:
        """The plan in words, with its figures."""
        count = f"{self.most}" if self.least is None or self.least == self.most else f"{self.least} to {self.most}"
        if self.least is None:
            count = f"at most {self.most}"
        words = (
            f"for a peak of {self.peak:g}/s with {self.headroom * 100:g}% headroom: {count} "
            f"replica{'s' if self.most != 1 else ''}"
        )
        if self.per_hour is not None:
            most = f"{self.currency}{self.monthly_most:,.0f}"
            least = self.monthly_least
            money = most if least is None or self.least == self.most else f"{self.currency}{least:,.0f} to {most}"
            if self.least is None:
                money = f"at most {most}"
            words += f", {money} a month at {self.currency}{self.per_hour:g}/h each"
        return words


def capacity_plan(
    peak: float, headroom: float, low: float | None, high: float | None, price: Price | None = None
) -> CapacityPlan | None:
    """The plan (see the module docstring); None when no rate was shown to hold (``low`` None).

    Raises:
        ValueError: a peak that is not positive, a negative headroom, or ``low`` not positive.
    """
    if not (math.isfinite(peak) and peak > 0) or headroom < 0:
        raise ValueError(f"peak {peak}/s with headroom {headroom}: out of range")
    if low is None:
        return None
    if low <= 0:
        raise ValueError(f"a sustained rate of {low}/s is not positive")
    needed = peak * (1 + headroom)
    most = math.ceil(needed / low)
    least = math.ceil(needed / high) if high is not None and high > low else None
    return CapacityPlan(peak, headroom, most, least, price.per_hour if price else None, price.currency if price else "")
