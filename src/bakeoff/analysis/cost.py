"""What running a target costs: prices per hour, and cost per million requests.

A price is what one hour of the machine (or the share of it a target uses) costs, written
``cpu=0.34/h``, ``neuron=$1.34/h`` or ``cpu+inductor=5.6/min``; the currency is whatever the user
writes before the number and is only repeated, never converted. A price named by a target's
full spec applies to that target; one named by a device (``cpu``, ``neuron``) applies to every
target on that device that has no price of its own (the instance costs the same whatever runs
on it).

Cost per million requests is ``price per second / rate * 1e6``, where the rate is the one the
target *sustained*: the server scenario's highest rate within the bound when it ran (a single
observation), else the single-stream rate ``1 / median latency`` (one request at a time). A
machine that serves several streams at once is costed at the rate it sustained, never at
1 / latency when a server scenario measured more. The interval of a single-stream cost is the
speed-up's interval against the reference (so it includes the spread between worker
processes); a sustained rate has none. All functions here are pure.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from bakeoff.codec import Value
from bakeoff.errors import SpecError

__all__ = ["Cost", "Price", "cost_of", "parse_prices", "price_for"]

_PER = {"h": 3600.0, "hour": 3600.0, "min": 60.0, "s": 1.0}
_PRICE = re.compile(r"^\s*([^\d\s.=]{0,3})\s*((?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*/\s*([a-z]+)\s*$")


@dataclass(frozen=True)
class Price(Value):
    """``per_hour`` of ``currency`` (as written, possibly empty) for targets named ``name`` (a
    target spec or a device); ``text`` as the user wrote it."""

    name: str
    per_hour: float
    currency: str = ""
    text: str = ""


@dataclass(frozen=True)
class Cost(Value):
    """Cost per million requests (``value`` with its interval ``low``-``high``, None for a
    single observation), at ``rate`` requests per second, read from ``basis``
    (``single-stream`` or ``server``); ``price`` what it was computed from;
    ``tokens_per_request`` the mean input tokens of a language model's request. The reference's
    single-stream cost has a zero-width interval: its speed is the unit the others' intervals
    are measured in."""

    value: float
    low: float | None
    high: float | None
    rate: float
    basis: str
    price: Price
    tokens_per_request: float | None = None

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None

    @property
    def per_million_tokens(self) -> float | None:
        """Cost per million input tokens, for a language model (None for other workloads)."""
        return self.value / self.tokens_per_request if self.tokens_per_request else None


def parse_prices(texts: Iterable[str]) -> tuple[Price, ...]:
    """``["cpu=0.34/h", "neuron=$1.34/h"]`` -> prices.

    Raises:
        SpecError: a text that is not ``NAME=AMOUNT/UNIT``, a price that is not positive and
            finite, a name priced twice, or prices in different currencies (costs in two
            currencies cannot be compared).
    """
    prices: dict[str, Price] = {}
    for text in texts:
        name, eq, amount = text.partition("=")
        found = _PRICE.match(amount) if eq and name.strip() else None
        if found is None or found.group(3) not in _PER:
            raise SpecError(
                f"price {text!r} is not NAME=AMOUNT/UNIT", hint="e.g. --price cpu=0.34/h or --price 'neuron=$1.34/h'"
            )
        currency, unit = found.group(1), found.group(3)
        number = float(found.group(2))
        if not math.isfinite(number) or number <= 0:
            raise SpecError(f"price {text!r} must be a positive amount", hint="e.g. --price cpu=0.34/h")
        name = name.strip()
        if name in prices:
            raise SpecError(f"{name!r} priced twice", hint="give each target or device one price")
        prices[name] = Price(name, number * _PER["h"] / _PER[unit], currency, text.strip())
    currencies = {p.currency for p in prices.values()}
    if len(currencies) > 1:
        shown = ", ".join(repr(c) if c else "none" for c in sorted(currencies))
        raise SpecError(f"prices in different currencies ({shown})", hint="give every price in one currency")
    return tuple(prices.values())


def price_for(spec: str, device: str, prices: Iterable[Price]) -> Price | None:
    """The price of the target ``spec`` on ``device``: its own, else its device's, else None."""
    by_name: Mapping[str, Price] = {p.name: p for p in prices}
    return by_name.get(spec) or by_name.get(device)


def cost_of(
    price: Price,
    rate: float,
    basis: str,
    interval: tuple[float, float] | None = None,
    tokens_per_request: float | None = None,
) -> Cost:
    """Cost per million requests at ``rate`` requests per second; ``interval`` is the rate's
    (low, high), None for a single observation; ``tokens_per_request`` gives the cost per
    million tokens too.

    Raises:
        ValueError: a rate that is not positive and finite.
    """
    if not math.isfinite(rate) or rate <= 0:
        raise ValueError(f"rate {rate} is not a positive number of requests per second")
    per_million = price.per_hour / 3600.0 * 1e6
    if interval is None:
        return Cost(per_million / rate, None, None, rate, basis, price, tokens_per_request)
    low_rate, high_rate = interval
    high = per_million / low_rate if low_rate > 0 else math.inf
    return Cost(per_million / rate, per_million / high_rate, high, rate, basis, price, tokens_per_request)
