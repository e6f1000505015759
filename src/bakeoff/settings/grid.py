"""The grid of ``bakeoff fit``: ``batch=1,2,4,...,64&seq=128,...,4096``.

Each axis is a list of whole numbers; ``...`` continues the progression the numbers before it
start, up to the number after it: with one number before it, doubling (``128,...,4096``); with
two, their ratio when the second is a whole multiple of the first (``1,2,...,64``: x2), else
their difference; with three or more, the difference or ratio they share (``8,16,24,...,64``:
+8). ``batch`` is required; ``seq`` is for workloads whose inputs have a length (language
models); without it the workload's own length is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from bakeoff.errors import SpecError

__all__ = ["Grid", "parse_grid"]

#: The most points a grid may have (each is a prediction; the probes are few).
MOST_POINTS = 4096
HINT = "e.g. --grid 'batch=1,2,4,...,64&seq=128,...,4096'"


@dataclass(frozen=True)
class Grid:
    """Batch sizes and sequence lengths (``seqs`` empty: the workload's own length)."""

    batches: tuple[int, ...]
    seqs: tuple[int, ...] = ()

    @property
    def points(self) -> list[tuple[int, int | None]]:
        return [(b, s) for s in (self.seqs or (None,)) for b in self.batches]

    @property
    def text(self) -> str:
        axes = [f"batch={','.join(map(str, self.batches))}"]
        if self.seqs:
            axes.append(f"seq={','.join(map(str, self.seqs))}")
        return "&".join(axes)


def _number(text: str, axis: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise SpecError(f"{axis}={text!r} in the grid is not a whole number", hint=HINT) from None
    if value < 1:
        raise SpecError(f"{axis}={value} in the grid must be at least 1", hint=HINT)
    return value


def _axis(axis: str, text: str) -> tuple[int, ...]:
    parts = [p.strip() for p in text.split(",")]
    if "..." not in parts:
        values = [_number(p, axis) for p in parts]
    else:
        at = parts.index("...")
        if parts.count("...") > 1 or at == 0 or at != len(parts) - 2:
            raise SpecError(f"{axis}={text!r}: '...' goes once, between the start and the last value", hint=HINT)
        start = [_number(p, axis) for p in parts[:at]]
        last = _number(parts[-1], axis)
        values = _continue(start, last, axis, text)
    if len(set(values)) != len(values) or values != sorted(values):
        raise SpecError(f"{axis}={text!r}: give the values once each, rising", hint=HINT)
    return tuple(values)


def _continue(start: list[int], last: int, axis: str, text: str) -> list[int]:
    if len(start) == 1:
        ratio, step = 2, None
    else:
        a, b = start[-2], start[-1]
        ratios = {y / x for x, y in pairwise(start)}
        steps = {y - x for x, y in pairwise(start)}
        if len(start) == 2:
            ratio, step = (b // a, None) if b % a == 0 and b // a >= 2 else (None, b - a)
        elif len(steps) == 1:
            ratio, step = None, b - a
        elif len(ratios) == 1 and b % a == 0:
            ratio, step = b // a, None
        else:
            raise SpecError(f"{axis}={text!r}: the values before '...' share no step or ratio", hint=HINT)
        if step is not None and step <= 0:
            raise SpecError(f"{axis}={text!r}: the values before '...' must rise", hint=HINT)
    values = list(start)
    while True:
        following = values[-1] * ratio if ratio else values[-1] + step
        if following > last:
            break
        if len(values) >= MOST_POINTS:
            raise SpecError(f"{axis}={text!r} has more than {MOST_POINTS} values", hint=HINT)
        values.append(following)
    if values[-1] != last:
        raise SpecError(f"{axis}={text!r}: the progression does not reach {last}", hint=HINT)
    return values


def parse_grid(text: str) -> Grid:
    """Read ``batch=...&seq=...``.

    Raises:
        SpecError: a malformed grid (unknown axis, no batch, a value that is not a whole number
            of at least 1, a progression that does not reach its last value, too many points).
    """
    axes: dict[str, tuple[int, ...]] = {}
    for part in text.split("&"):
        name, eq, values = part.partition("=")
        name = name.strip()
        if not eq or name not in ("batch", "seq") or not values.strip():
            raise SpecError(f"grid {text!r}: {part!r} is not batch=... or seq=...", hint=HINT)
        if name in axes:
            raise SpecError(f"grid {text!r} gives {name} twice", hint=HINT)
        axes[name] = _axis(name, values)
    if "batch" not in axes:
        raise SpecError(f"grid {text!r} gives no batch sizes", hint=HINT)
    grid = Grid(axes["batch"], axes.get("seq", ()))
    if len(grid.points) > MOST_POINTS:
        raise SpecError(f"grid {text!r} has {len(grid.points)} points (at most {MOST_POINTS})", hint=HINT)
    return grid
