"""Figures as short strings in their unit: milliseconds, rates and bytes; and text cut to a width."""

from __future__ import annotations

import math

__all__ = ["ELLIPSIS", "clip", "duration", "figure", "human_bytes", "significant"]

#: What marks text that :func:`clip` cut.
ELLIPSIS = "\u2026"


def human_bytes(value: int | None) -> str:
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(value)


def significant(value: float, digits: int = 3) -> str:
    """``value`` to ``digits`` significant figures, without an exponent: 4008.1 -> "4010",
    0.91734 -> "0.917", 35.7476 -> "35.7", 7.2 -> "7.2"."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    places = digits - 1 - math.floor(math.log10(abs(value)))
    rounded = round(value, places)
    if rounded and math.floor(math.log10(abs(rounded))) != math.floor(math.log10(abs(value))):
        places -= 1  # 9.996 rounds to 10.0: one place fewer keeps three figures
        rounded = round(value, places)
    text = f"{rounded:.{max(places, 0)}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text  # like %g: 7.2, not 7.20


def duration(ms: float | None) -> str:
    """A duration given in milliseconds, in human units: milliseconds to three significant figures
    below 10,000 ms, seconds (three figures) from there, minutes past 600 s ("-" for None)."""
    if ms is None:
        return "-"
    if abs(ms) < 10_000:
        return f"{significant(ms)} ms"
    if abs(ms) < 600_000:
        return f"{significant(ms / 1000)} s"
    return f"{significant(ms / 60_000)} min"


def figure(value: float, unit: str) -> str:
    """``value`` in ``unit``: ``B`` (bytes, binary prefixes), ``/s`` (a rate), none (a count or a
    share) or milliseconds."""
    if unit == "":
        return f"{value:.4g}"
    if unit == "B":
        return human_bytes(int(value))
    if unit == "/s":
        return f"{value:,.1f}/s"
    return duration(value)


def clip(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters: cut at the last word boundary that keeps at
    least half of it (else mid-word, for one long word or path), ending in "…" only when it cut.

    An error message cut mid-word ("CUDA out of mem") reads as a different message; cut at a
    word ("CUDA out of…") it reads as what it is, the start of a longer one.
    """
    if len(text) <= width:
        return text
    keep = text[: max(width - len(ELLIPSIS), 0)]
    space = keep.rfind(" ")
    if space > 0 and space >= len(keep) // 2 and not text[len(keep)].isspace():
        keep = keep[:space]
    return keep.rstrip(" ,;:") + ELLIPSIS
