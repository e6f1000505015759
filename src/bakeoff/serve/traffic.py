"""The requests of a load run, from a file: one JSON value per line (JSONL), sent as written.

A line is a request body: a JSON object (or any JSON value) that the service's endpoint takes.
Blank lines are skipped. A line may carry its own send time instead, as ``{"at": SECONDS,
"body": {...}}`` in every line of the file: a recorded trace, replayed at its own timestamps
(:func:`bakeoff.serve.schedule.from_trace`). A run with more requests than lines cycles through
them in order.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bakeoff.errors import SpecError

__all__ = ["Traffic", "read_traffic"]


@dataclass(frozen=True)
class Traffic:
    """The request bodies of a file, in order, and their recorded send times (None: the file
    holds bodies only, to be sent on a drawn schedule)."""

    bodies: tuple[Any, ...]
    at: tuple[float, ...] | None = None

    def take(self, count: int) -> list[Any]:
        """``count`` bodies, cycling through the file's in order."""
        return [self.bodies[i % len(self.bodies)] for i in range(count)]


def read_traffic(path: Path | str) -> Traffic:
    """The requests of ``path`` (see the module docstring).

    Raises:
        SpecError: the file cannot be read, holds no request, a line is not JSON (its number is
            named), or some lines carry a send time and others do not.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(
            f"cannot read the traffic file {path}: {exc}", hint="give a JSONL file of request bodies"
        ) from None
    values: list[tuple[int, Any]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            values.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise SpecError(
                f"line {number} of {path} is not JSON ({exc.msg})", hint="one JSON request body per line"
            ) from None
    if not values:
        raise SpecError(f"the traffic file {path} holds no request", hint="one JSON request body per line")
    timed = [isinstance(v, dict) and set(v) == {"at", "body"} for _, v in values]
    if not any(timed):
        return Traffic(tuple(v for _, v in values))
    if not all(timed):
        first = next(number for (number, _), t in zip(values, timed, strict=True) if not t)
        raise SpecError(
            f"line {first} of {path} has no send time, and other lines have one",
            hint='every line {"at": SECONDS, "body": {...}}, or none',
        )
    at = []
    for number, value in values:
        when = value["at"]
        if isinstance(when, bool) or not isinstance(when, (int, float)) or not math.isfinite(when):
            raise SpecError(f"line {number} of {path}: 'at' must be a number of seconds, got {when!r}")
        at.append(float(when))
    return Traffic(tuple(v["body"] for _, v in values), tuple(at))
