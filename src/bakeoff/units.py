"""Figures as short strings in their unit: milliseconds, rates and bytes."""

from __future__ import annotations

__all__ = ["figure", "human_bytes"]


def human_bytes(value: int | None) -> str:
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(value)


def figure(value: float, unit: str) -> str:
    """``value`` in ``unit``: ``B`` (bytes, binary prefixes), ``/s`` (a rate), none (a count or a
    share) or milliseconds."""
    if unit == "":
        return f"{value:.4g}"
    if unit == "B":
        return human_bytes(int(value))
    if unit == "/s":
        return f"{value:,.1f}/s"
    return f"{value:.3g} ms" if value < 1000 else f"{value / 1000:.3g} s"
