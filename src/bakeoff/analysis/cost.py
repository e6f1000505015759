"""What running a target costs: prices per hour, and cost per million requests.

A price is what one hour of an instance costs, written ``cpu=0.34/h``, ``neuron=$1.34/h`` or
``cpu+inductor=5.6/min``, and it may say what the hour buys: ``cpu=0.34/h@4cores`` (an instance
of 4 cores) or ``neuron=$1.34/h@2devices``. The currency is whatever the user writes before the
number and is only repeated, never converted. A price named by a target's full spec applies to
that target; one named by a device (``cpu``, ``neuron``) applies to every target on that device
that has no price of its own (the instance costs the same whatever runs on it).

An instance serves several streams at once: one of N cores running a target whose workers use T
intra-op threads holds ``N // T`` streams (none when T > N), one of N devices (or of N cores of
an accelerator) holds N streams, one on each. A price without ``@`` keeps its older meaning, one
stream per price unit, and a cost says it assumed so. The trial measures one stream, so the rate
an instance serves is that stream's rate times its streams, **assumed to scale** (contention for
memory bandwidth or caches would make it lower): the cost says which basis it used.

Cost per million requests is ``price per second / (rate * streams) * 1e6``, where the rate is
the one a stream *sustained*: the server scenario's highest rate within the bound when it ran
(one server, a single observation unless the scenario gave an interval), else the single-stream
rate ``1 / median latency`` (one request at a time). A machine is costed at the rate its server
sustained, never at 1 / latency when a server scenario measured it. The interval of a
single-stream cost is the speed-up's interval against the reference (so it includes the spread
between worker processes); a sustained rate read once has none. All functions here are pure.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from bakeoff.codec import Value
from bakeoff.errors import SpecError

__all__ = [
    "MOST_PER_HOUR",
    "ONE_STREAM",
    "SERVICE_BASIS",
    "Cost",
    "Price",
    "cost_of",
    "parse_prices",
    "price_for",
    "streams_of",
]

_PER = {"h": 3600.0, "hour": 3600.0, "min": 60.0, "s": 1.0}
_PRICE = re.compile(r"^\s*([^\d\s.=+-]{0,3})\s*((?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*/\s*([a-z]+)\s*$")
#: An amount with a sign, or not finite: a currency is never a sign.
_NOT_POSITIVE = re.compile(
    r"^\s*[^\d\s.=+-]{0,3}\s*(?:(?P<sign>[-+])\s*[\d.]|[-+]?(?:nan|inf|infinity)\s*/)", re.IGNORECASE
)
#: The most an hour may cost, in any currency: costs per million requests stay finite numbers.
MOST_PER_HOUR = 1e12
_BUYS = re.compile(r"^\s*(.*?)\s*(cores?|devices?)\s*$")
_EXAMPLE = "e.g. --price cpu=0.34/h or --price 'neuron=$1.34/h'"
_BUYS_EXAMPLE = "e.g. --price 'cpu=0.34/h@4cores' or --price 'neuron=$1.34/h@1device'"
#: Said of a cost whose price names no ``@``: what it then assumes.
ONE_STREAM = "one stream per price unit assumed (the price names no @cores or @devices)"


@dataclass(frozen=True)
class Price(Value):
    """``per_hour`` of ``currency`` (as written, possibly empty) for targets named ``name`` (a
    target spec or a device); ``count`` ``unit`` (``cores`` or ``devices``) is what an hour
    buys, None where the price names no ``@`` (one stream per price unit); ``text`` as the user
    wrote it."""

    name: str
    per_hour: float
    currency: str = ""
    text: str = ""
    count: int | None = None
    unit: str = ""

    @property
    def buys(self) -> str:
        """What an hour buys, in words ("4 cores"); "" where the price does not say."""
        if self.count is None:
            return ""
        return f"{self.count} {self.unit if self.count != 1 else self.unit[:-1]}"


@dataclass(frozen=True)
class Cost(Value):
    """Cost per million requests (``value`` with its interval ``low``-``high``, None for a single
    observation), at ``rate`` requests per second: one stream's rate, read from ``basis``
    (``single-stream``, ``server``, or ``service``: a service's searched rate), times the
    ``streams`` the price's instance holds (``streams_from`` says why, in words; more than one
    is assumed to scale). ``price`` is what it was computed from; ``tokens_per_request`` the
    mean input tokens of a language model's request. A ``rehearsal`` is a cost computed the same
    way for the bundled test device: it exercises the cost path and says nothing of a real
    device. The reference's single-stream cost has a zero-width interval: its speed is the unit
    the others' intervals are measured in."""

    value: float
    low: float | None
    high: float | None
    rate: float
    basis: str
    price: Price
    tokens_per_request: float | None = None
    streams: int = 1
    streams_from: str = ""
    rehearsal: bool = False

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None

    @property
    def per_million_tokens(self) -> float | None:
        """Cost per million input tokens, for a language model (None for other workloads)."""
        return self.value / self.tokens_per_request if self.tokens_per_request else None

    @property
    def stream_rate(self) -> float:
        """One stream's rate (requests per second), the measured figure."""
        return self.rate / self.streams

    @property
    def basis_brief(self) -> str:
        """The basis in a few words: "single stream x 4" or "server rate x 1"."""
        return f"{_BASIS_BRIEF.get(self.basis, 'server rate')} x {self.streams}"

    @property
    def basis_text(self) -> str:
        """The basis in words: which rate, how many streams and why, and whether more than one
        is assumed to scale: "single stream x 4 (4 cores, 1 thread each), assumed to scale"."""
        what = _BASIS_TEXT.get(self.basis, "measured server rate")
        if self.basis == SERVICE_BASIS:
            return f"{what} x 1: one replica per priced instance"
        if self.price.count is None:
            return f"{what} x 1: {ONE_STREAM}"
        return f"{what} x {self.streams} ({self.streams_from})" + (", assumed to scale" if self.streams > 1 else "")


#: The basis of a service's cost: the highest rate its search showed within the objectives.
SERVICE_BASIS = "service"
_BASIS_BRIEF = {"single-stream": "single stream", SERVICE_BASIS: "searched service rate"}
_BASIS_TEXT = {"single-stream": "single stream", SERVICE_BASIS: "highest rate within the objectives (searched)"}


def _buys(text: str, capacity: str) -> tuple[int, str]:
    """``4cores`` -> (4, "cores").

    Raises:
        SpecError: not a positive whole number of cores or devices.
    """
    found = _BUYS.match(capacity)
    if found is None:
        raise SpecError(f"price {text!r}: @{capacity.strip()} is not @N cores or @N devices", hint=_BUYS_EXAMPLE)
    number, unit = found.group(1), found.group(2).rstrip("s") + "s"
    if not number.isascii() or not number.isdigit() or int(number) < 1:
        said = f"price {text!r}: @{capacity.strip()} is not a positive whole number of {unit}"
        raise SpecError(said, hint=_BUYS_EXAMPLE)
    return int(number), unit


def parse_prices(texts: Iterable[str]) -> tuple[Price, ...]:
    """``["cpu=0.34/h@4cores", "neuron=$1.34/h"]`` -> prices.

    Raises:
        SpecError: a text that is not ``NAME=AMOUNT/UNIT[@N cores|devices]``, a price that is not
            positive and finite (a sign is never a currency) or that is more than
            :data:`MOST_PER_HOUR` an hour, a count that is not a positive whole number, a name priced
            twice, or prices in different currencies (costs in two currencies cannot be
            compared).
    """
    prices: dict[str, Price] = {}
    for text in texts:
        name, eq, written = text.partition("=")
        amount, at, capacity = written.partition("@")
        found = _PRICE.match(amount) if eq and name.strip() else None
        refused = _NOT_POSITIVE.match(amount) if found is None else None
        if refused is not None:
            signed = ", written without a sign" if refused.group("sign") else ""
            raise SpecError(f"price {text!r} must be a positive amount{signed}", hint="e.g. --price cpu=0.34/h")
        if found is None or found.group(3) not in _PER:
            raise SpecError(f"price {text!r} is not NAME=AMOUNT/UNIT", hint=_EXAMPLE)
        currency, unit = found.group(1), found.group(3)
        number = float(found.group(2))
        if not math.isfinite(number) or number <= 0:
            raise SpecError(f"price {text!r} must be a positive amount", hint="e.g. --price cpu=0.34/h")
        per_hour = number * _PER["h"] / _PER[unit]
        if not per_hour <= MOST_PER_HOUR:
            raise SpecError(f"price {text!r} is more than {MOST_PER_HOUR:g} an hour", hint="e.g. --price cpu=0.34/h")
        count, buys = _buys(text, capacity) if at else (None, "")
        name = name.strip()
        if name in prices:
            raise SpecError(f"{name!r} priced twice", hint="give each target or device one price")
        prices[name] = Price(name, per_hour, currency, text.strip(), count, buys)
    currencies = {p.currency for p in prices.values()}
    if len(currencies) > 1:
        shown = ", ".join(repr(c) if c else "none" for c in sorted(currencies))
        raise SpecError(f"prices in different currencies ({shown})", hint="give every price in one currency")
    return tuple(prices.values())


def price_for(spec: str, device: str, prices: Iterable[Price]) -> Price | None:
    """The price of the target ``spec`` on ``device``: its own, else its device's, else None."""
    by_name: Mapping[str, Price] = {p.name: p for p in prices}
    return by_name.get(spec) or by_name.get(device)


def streams_of(price: Price, device: str, threads: int | None) -> tuple[int, str]:
    """How many streams of a target on ``device`` whose workers run ``threads`` intra-op
    threads (None: the device's own) the instance ``price`` buys holds, and why in words.

    N cores of the CPU hold ``N // threads`` streams (0 when the target needs more threads than
    the instance has cores); N devices, or N cores of an accelerator, hold one stream on each. A
    price that does not say what it buys holds one stream.
    """
    if price.count is None:
        return 1, ONE_STREAM
    if price.unit == "cores" and device == "cpu":
        each = max(threads or 1, 1)
        return price.count // each, f"{price.buys}, {each} thread{'s' if each != 1 else ''} each"
    return price.count, f"{price.buys}, one stream on each"


def cost_of(
    price: Price,
    rate: float,
    basis: str,
    interval: tuple[float, float] | None = None,
    tokens_per_request: float | None = None,
    streams: int = 1,
    streams_from: str = "",
    rehearsal: bool = False,
) -> Cost:
    """Cost per million requests of an instance holding ``streams`` streams, each at ``rate``
    requests per second; ``interval`` is the rate's (low, high), None for a single observation;
    ``tokens_per_request`` gives the cost per million tokens too.

    Raises:
        ValueError: a rate that is not positive and finite, or fewer than one stream.
    """
    if not math.isfinite(rate) or rate <= 0:
        raise ValueError(f"rate {rate} is not a positive number of requests per second")
    if streams < 1:
        raise ValueError(f"{streams} streams: an instance must hold at least one")
    per_million = price.per_hour / 3600.0 * 1e6
    served = rate * streams
    said = (tokens_per_request, streams, streams_from or (ONE_STREAM if price.count is None else ""), rehearsal)
    if interval is None:
        return Cost(per_million / served, None, None, served, basis, price, *said)
    low_rate, high_rate = (bound * streams for bound in interval)
    high = per_million / low_rate if low_rate > 0 else math.inf
    return Cost(per_million / served, per_million / high_rate, high, served, basis, price, *said)
