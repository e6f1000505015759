"""The numbers a numeric setting accepts, and the bounds every command shares."""

from __future__ import annotations

import math
from dataclasses import dataclass

from bakeoff.errors import SpecError

__all__ = ["COUNT", "FRACTION", "SEED", "TIMEOUT", "WEEK_S", "Bounds", "at_most"]


@dataclass(frozen=True)
class Bounds:
    """The numbers a numeric option accepts: finite values of ``kind`` (int or float) from
    ``low`` to ``high`` (``low_open``, ``high_open``: that bound itself excluded). ``example``
    is the value a refusal suggests; ``unit`` is said of the number ("of seconds").

    Every numeric option of every command declares one, so that nan, infinities and values no
    run can use (a negative seed, a timeout of 1e300 s) are refused in one line before anything
    is opened, never stored as a run that fails or that checks nothing.
    """

    kind: type
    low: float
    high: float
    example: float
    low_open: bool = False
    high_open: bool = False
    unit: str = ""

    def contains(self, value: float) -> bool:
        """Whether ``value`` is a finite number within the bounds."""
        if not math.isfinite(value):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    @property
    def words(self) -> str:
        """What the bounds accept, in words: "a whole number from 0 to 4294967295"."""
        unit = f" {self.unit}" if self.unit else ""
        if self.kind is int:
            return f"a whole number from {int(self.low)} to {int(self.high)}{unit}"
        low = f"> {self.low:g}" if self.low_open else f">= {self.low:g}"
        high = f" and {'<' if self.high_open else '<='} {self.high:g}" if math.isfinite(self.high) else ""
        return f"a finite number{unit} {low}{high}"

    def check(self, value: float, flag: str) -> float:
        """``value``, if within the bounds.

        Raises:
            SpecError: nan, an infinity or a value outside the bounds, naming ``flag``.
        """
        if not self.contains(value):
            shown = f"{value:g}" if isinstance(value, float) else str(value)
            raise SpecError(f"{flag} must be {self.words}, got {shown}", hint=f"e.g. {flag} {self.example:g}")
        return value


#: One week: the longest a timeout or a minimum timing time may be.
WEEK_S = 7 * 24 * 3600.0
#: A step's timeout, in seconds.
TIMEOUT = Bounds(float, 0.0, WEEK_S, 900.0, low_open=True, unit="of seconds")
#: A seed of random, numpy and torch (numpy takes 32 bits).
SEED = Bounds(int, 0, 2**32 - 1, 0)
#: A count of runs, calls or rows: at least one, and what SQLite and C take.
COUNT = Bounds(int, 1, 2**31 - 1, 20)
#: A relative change (a threshold): 0.10 is ten percent.
FRACTION = Bounds(float, 0.0, math.inf, 0.1)


def at_most(value: float, high: float, what: str, example: str) -> None:
    """Refuse a finite ``value`` above ``high``.

    Raises:
        SpecError: ``value`` is above ``high``, naming ``what`` with the ``example`` as a hint.
    """
    if value > high:
        shown = f"{value:g}" if isinstance(value, float) else str(value)
        most = f"{high:g}" if isinstance(value, float) else str(int(high))
        raise SpecError(f"{what} must be at most {most}, got {shown}", hint=f"e.g. {example}")
