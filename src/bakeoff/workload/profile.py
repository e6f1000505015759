"""Input profiles: the request sizes a trial runs over, instead of one prepared input.

Syntax (``--profile``):
    ``seq=16,17,32,33,64``                 one request per listed length, in this order
    ``seq=16,32&batch=1,4``                with batch sizes (one per length, or one for all)
    ``seq=uniform(8,128)&n=50``            50 lengths drawn uniformly from 8..128
    ``seq=lognormal(8,512)&n=50&batch=1,2,4``  log-normal lengths within 8..512 (the bounds are
                                           the 2.5th and 97.5th percentiles; draws are clipped),
                                           batches drawn from the set
    ``requests.csv`` / ``requests.jsonl``  recorded requests: one per row/line with ``length``
                                           (or ``seq``) and optional ``batch``
    ``&seed=N`` makes the draws reproducible (default 0).
"""

from __future__ import annotations

import csv
import json
import math
import random
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bakeoff.errors import SpecError

__all__ = ["InputProfile", "Request", "parse_profile"]

_DIST = re.compile(r"^(uniform|lognormal)\((\d+),(\d+)\)$")
_BAD_BOUNDS = re.compile(r"^(uniform|lognormal)\(.*\)$")  # a known distribution whose bounds are not whole
_HINT = "e.g. --profile 'seq=16,32,64', 'seq=uniform(8,128)&n=50' or a .csv/.jsonl file of lengths"


@dataclass(frozen=True, order=True)
class Request:
    batch: int
    seq: int


@dataclass(frozen=True)
class InputProfile:
    """Requests in arrival order, and the text they came from."""

    requests: tuple[Request, ...]
    source: str

    @property
    def shapes(self) -> list[Request]:
        """Distinct request shapes in order of first appearance."""
        return list(dict.fromkeys(self.requests))

    def counts(self) -> Counter:
        return Counter(self.requests)

    def to_dict(self) -> dict:
        return {"source": self.source, "requests": [[r.batch, r.seq] for r in self.requests]}

    @classmethod
    def from_dict(cls, data: dict) -> InputProfile:
        return cls(tuple(Request(b, s) for b, s in data["requests"]), data["source"])


#: Bounds that keep a typo from allocating the machine away.
MAX_LENGTH = 1_000_000
MAX_REQUESTS = 100_000


def _size(value: int, key: str, where: str) -> int:
    """One length or batch size, from the command line or a file: the same bounds for both."""
    if value < 1:
        raise SpecError(f"{where} has {key} {value}: sizes must be at least 1", hint="use positive sizes")
    if value > MAX_LENGTH:
        raise SpecError(
            f"{where} has {key} {value:,}, above the cap of {MAX_LENGTH:,}", hint=f"use sizes up to {MAX_LENGTH:,}"
        )
    return value


def _count(count: int, what: str) -> int:
    """How many requests a profile holds, from the command line or a file: at most the cap."""
    if count > MAX_REQUESTS:
        raise SpecError(
            f"{what} {count:,} requests, above the cap of {MAX_REQUESTS:,}", hint=f"use at most {MAX_REQUESTS:,}"
        )
    return count


def _ints(text: str, key: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise SpecError(f"{key}={text!r} is not a list of integers", hint=_HINT) from None
    return [_size(v, "length" if key == "seq" else key, f"{key}={text!r}") for v in values]


def _draw(kind: str, low: int, high: int, count: int, rng: random.Random) -> list[int]:
    if kind == "uniform":
        return [rng.randint(low, high) for _ in range(count)]
    mu = (math.log(low) + math.log(high)) / 2
    sigma = max((math.log(high) - math.log(low)) / (2 * 1.96), 1e-9)
    return [min(high, max(low, round(rng.lognormvariate(mu, sigma)))) for _ in range(count)]


def _whole(value: object, default: int | None) -> int:
    """A whole number (possibly negative: the bounds are checked apart) from a CSV cell or JSON
    value; floats and booleans are refused."""
    if value is None or value == "":
        if default is None:
            raise ValueError("missing")
        return default
    if isinstance(value, bool | float):
        raise ValueError("not a whole number")
    text = str(value).strip()
    digits = text[1:] if text[:1] in "+-" else text
    if not (digits.isascii() and digits.isdigit()):
        raise ValueError("not a whole number")
    return int(text)


def _from_file(path: Path) -> list[Request]:
    rows: list[dict] = []
    try:
        if path.suffix == ".csv":
            with path.open(newline="", encoding="utf-8") as handle:
                rows = list(csv.DictReader(handle))
        else:
            with path.open(encoding="utf-8") as handle:
                rows = [json.loads(line) for line in handle if line.strip()]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, csv.Error) as exc:
        raise SpecError(f"cannot read profile {path}: {exc}", hint="one request per line with a length") from exc
    requests = []
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, dict):
            raise SpecError(
                f"{path} row {number} is not an object with a length",
                hint='one request per line, e.g. {"length": 12, "batch": 1}',
            )
        row = {str(k).lstrip("\ufeff").strip(): v for k, v in row.items() if k is not None}
        try:
            request = Request(_whole(row.get("batch"), 1), _whole(row.get("length", row.get("seq")), None))
        except (TypeError, ValueError):
            raise SpecError(
                f"{path} row {number} has no integer length",
                hint="give a 'length' (or 'seq') column and optionally 'batch'",
            ) from None
        _size(request.seq, "length", f"{path} row {number}")
        _size(request.batch, "batch", f"{path} row {number}")
        requests.append(request)
    if not requests:
        raise SpecError(f"profile {path} has no requests", hint="one request per line with a length")
    _count(len(requests), f"profile {path} has")
    return requests


def parse_profile(text: str) -> InputProfile:
    """Parse a profile spec (see the module docstring).

    Raises:
        SpecError: malformed text, a bad distribution, or an unreadable file.
    """
    text = text.strip()
    if text.endswith((".csv", ".jsonl", ".json")):
        path = Path(text).expanduser()
        if not path.is_file():
            what = "is a directory, not a profile file" if path.is_dir() else "does not exist"
            raise SpecError(f"profile {text!r} {what}", hint=_HINT)
        return InputProfile(tuple(_from_file(path)), text)
    options: dict[str, str] = {}
    for pair in text.split("&"):
        key, eq, value = pair.partition("=")
        if not eq or not value or key in options:
            raise SpecError(f"malformed profile {text!r}", hint=_HINT)
        options[key] = value
    unknown = set(options) - {"seq", "batch", "n", "seed"}
    if unknown or "seq" not in options:
        raise SpecError(f"profile {text!r} needs seq= and takes only seq, batch, n and seed", hint=_HINT)
    seed_text = options.get("seed", "0")
    if not (seed_text.isascii() and seed_text.isdigit()):
        raise SpecError(f"seed={seed_text!r} is not a non-negative integer", hint=_HINT)
    seed = int(seed_text)
    rng = random.Random(seed)
    seq = options["seq"].replace(" ", "")
    dist = _DIST.match(seq)
    if dist:
        kind, low, high = dist[1], int(dist[2]), int(dist[3])
        if not 1 <= low <= high:
            raise SpecError(f"bad bounds in {options['seq']!r}", hint="need 1 <= low <= high")
        _size(high, "upper bound", f"seq={options['seq']!r}")
        n_text = options.get("n", "50")
        if not (n_text.isascii() and n_text.isdigit()):
            raise SpecError(f"n={n_text!r} must be one whole number of requests", hint="e.g. n=50")
        count = _count(int(n_text), f"n={n_text} asks for")
        if count < 1:
            raise SpecError(f"n={n_text} draws no requests", hint="e.g. n=50")
        lengths = _draw(kind, low, high, count, rng)
        batches = _ints(options.get("batch", "1"), "batch")
        batch_list = [rng.choice(batches) for _ in lengths]
    else:
        if _BAD_BOUNDS.match(seq):
            raise SpecError(
                f"the bounds in seq={options['seq']!r} must be whole numbers",
                hint=f"e.g. {seq.partition('(')[0]}(8,128)",
            )
        if "(" in options["seq"]:
            raise SpecError(
                f"unknown distribution in seq={options['seq']!r}", hint="use uniform(lo,hi) or lognormal(lo,hi)"
            )
        if "n" in options:
            raise SpecError("n= applies to distributions, not to a list of lengths", hint=_HINT)
        lengths = _ints(options["seq"], "seq")
        batches = _ints(options.get("batch", "1"), "batch")
        if len(batches) not in (1, len(lengths)):
            raise SpecError(
                f"batch= has {len(batches)} values for {len(lengths)} lengths",
                hint="give one batch size, or one per length",
            )
        batch_list = batches * len(lengths) if len(batches) == 1 else batches
        _count(len(lengths), "seq= lists")
    return InputProfile(tuple(Request(b, s) for b, s in zip(batch_list, lengths, strict=True)), text)
