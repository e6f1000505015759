"""What a process wrote to a file, read without reading it all: its lines one at a time, each
cut to a bound, or its end. A script or service that prints gigabytes costs bakeoff no more
memory than these bounds (reading a 512 MiB output whole took 1.3 GB)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

__all__ = ["LINE_LIMIT", "read_lines", "tail_text"]

#: The most characters of one line that are kept (the rest of the line is skipped).
LINE_LIMIT = 4096


def read_lines(path: Path) -> Iterator[str]:
    """The lines of ``path`` without their line ends, each cut to :data:`LINE_LIMIT`
    characters, read one at a time (undecodable bytes replaced)."""
    with path.open(encoding="utf-8", errors="replace") as handle:
        while line := handle.readline(LINE_LIMIT):
            if not line.endswith("\n"):  # a longer line: skip the rest of it
                while (rest := handle.readline(LINE_LIMIT)) and not rest.endswith("\n"):
                    pass
            yield line.rstrip("\n")


def tail_text(path: Path, chars: int) -> str:
    """The last ``chars`` characters of ``path`` (from at most its last ``4 * chars`` bytes:
    UTF-8 takes up to 4 a character); "" where it cannot be read."""
    try:
        with path.open("rb") as handle:
            handle.seek(max(path.stat().st_size - 4 * chars, 0))
            return handle.read().decode("utf-8", errors="replace")[-chars:]
    except OSError:
        return ""
