"""What the libraries said while a target ran: warnings, log records and raw output, counted.

A backend library can print the same line thousands of times (ONNX Runtime's "Evaluation
failed" on every call, dynamo's recompile-limit warning on every new shape). Shown raw, it
buries bakeoff's own output and nobody can tell whether it matters; dropped, nobody can look.
So each distinct line is kept once per (source, phase, text) with how often it came, and the
terminal says one sentence about them (:func:`bakeoff.report.figures.log_fact`).

Bounded: at most :data:`MAX_LINES` distinct lines of at most :data:`MAX_CHARS` characters per
target; what does not fit is counted in one last line, :data:`DROPPED`. A line is stored as a
plain dict, ``{"text", "count", "source", "phase"}``, with ``source`` one of ``warnings``,
``logging``, ``stderr`` or ``stdout`` (what was written to that file descriptor).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

__all__ = ["DROPPED", "MAX_CHARS", "MAX_LINES", "LibraryLog", "OutputLog", "merge_logs", "normalise"]

MAX_LINES = 200
MAX_CHARS = 500
#: The text of the line that counts what did not fit.
DROPPED = "further distinct lines not kept"

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# "2025-01-09 10:22:33.123456789 [W:onnxruntime:...]": a time stamp makes every line distinct
_STAMP = re.compile(r"^\[?\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\]?\s*")


def normalise(text: str) -> str:
    """One line of at most :data:`MAX_CHARS` characters: colours and a leading time stamp
    removed, line breaks inside one message shown as `` | ``."""
    text = _STAMP.sub("", _ANSI.sub("", text).strip())
    text = " | ".join(part.rstrip() for part in text.splitlines() if part.strip())
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 3] + "..."


class LibraryLog:
    """Distinct lines with their counts, in the order they first came."""

    def __init__(self, max_lines: int = MAX_LINES) -> None:
        self.max_lines = max_lines
        self._counts: dict[tuple[str, str, str], int] = {}
        self.dropped = 0

    def add(self, source: str, phase: str, text: str, count: int = 1) -> None:
        text = normalise(text)
        if not text or count <= 0:
            return
        key = (source, phase, text)
        if key in self._counts:
            self._counts[key] += count
        elif text == DROPPED:
            self.dropped += count
        elif len(self._counts) < self.max_lines:
            self._counts[key] = count
        else:
            self.dropped += count

    def extend(self, lines: Iterable[dict[str, Any]]) -> None:
        for line in lines:
            self.add(line["source"], line["phase"], line["text"], line["count"])

    def __len__(self) -> int:
        return len(self._counts) + (1 if self.dropped else 0)

    def entries(self) -> tuple[dict[str, Any], ...]:
        """The lines as stored with a target's result (see the module docstring)."""
        lines = tuple(
            {"text": text, "count": count, "source": source, "phase": phase}
            for (source, phase, text), count in self._counts.items()
        )
        if self.dropped:
            lines += ({"text": DROPPED, "count": self.dropped, "source": "bakeoff", "phase": ""},)
        return lines


class OutputLog:
    """A script's own output, in the order it came: what ``bakeoff show --log`` reads as the
    script printed it, a traceback included (its repeated frames, such as PyTorch's
    ``_call_impl`` lines, stay where they came, with their indentation). Only a line that comes
    again right after itself is counted instead of repeated. Bounded like :class:`LibraryLog`,
    but keeping both ends: the first and the last ``max_lines // 2`` lines, with how many between
    were not kept (where an error is, at the end, is never the part dropped). Stored as
    :class:`LibraryLog` lines are."""

    def __init__(self, max_lines: int = MAX_LINES) -> None:
        from collections import deque

        self.max_lines = max_lines
        self._head: list[list[Any]] = []
        self._tail: deque[list[Any]] = deque()
        self.dropped = 0

    def add(self, source: str, phase: str, text: str, count: int = 1) -> None:
        indent = len(text) - len(text.lstrip(" \t"))
        text = normalise(text)
        if not text or count <= 0:
            return
        key = (source, phase, " " * min(indent, 16) + text)
        lines = self._tail if self._tail or len(self._head) >= self.max_lines // 2 else self._head
        last = lines[-1] if lines else None
        if last is not None and last[0] == key:
            last[1] += count
            return
        lines.append([key, count])
        if len(self._tail) > self.max_lines - self.max_lines // 2:
            self.dropped += self._tail.popleft()[1]

    def extend(self, lines: Iterable[dict[str, Any]]) -> None:
        for line in lines:
            self.add(line["source"], line["phase"], line["text"], line["count"])

    def __len__(self) -> int:
        return len(self.entries())

    def entries(self) -> tuple[dict[str, Any], ...]:
        def stored(line: list[Any]) -> dict[str, Any]:
            (source, phase, text), count = line
            return {"text": text, "count": count, "source": source, "phase": phase}

        gap = ({"text": DROPPED, "count": self.dropped, "source": "bakeoff", "phase": ""},) if self.dropped else ()
        return (*map(stored, self._head), *gap, *map(stored, self._tail))


def merge_logs(*logs: Iterable[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    """Several stored logs as one (replicates of a target, the reference and its baseline):
    the same line in the same phase is counted together."""
    merged = LibraryLog()
    for log in logs:
        merged.extend(log)
    return merged.entries()
