"""The plotly figures of the answers a trial does not make: ``bakeoff fit``'s map and
``bakeoff dist``'s bandwidth and tail per message size, with the text escaping and the layout
every figure of the HTML report shares."""

from __future__ import annotations

import html
from typing import Any

from bakeoff.scenarios.dist import DistResult
from bakeoff.scenarios.fit import FitResult, map_rows
from bakeoff.units import human_bytes

__all__ = ["dist_charts", "fit_map", "plot_layout", "plot_text"]


def plot_text(text: Any) -> str:
    """A string shown by plotly: entities, so that a tag in a name stays text."""
    return html.escape(str(text), quote=False)


def plot_layout(title: str, yaxis: str, **extra: Any) -> dict[str, Any]:
    return {
        "title": {"text": plot_text(title), "font": {"size": 14}},
        "yaxis": {"title": {"text": yaxis}, "zeroline": False},
        "margin": {"l": 60, "r": 20, "t": 40, "b": 60},
        "height": 320,
        "showlegend": False,
        "paper_bgcolor": "white",
        "plot_bgcolor": "#f7f9fb",
        **extra,
    }


def fit_map(label: str, fitted: FitResult) -> tuple[str, dict[str, Any]]:
    """``bakeoff fit``'s map as a heat-map: one row per sequence length, one column per batch,
    each cell its peak as a share of the capacity (measured where a probe ran, else expected);
    green where it fits, red where it does not (a point the target refused or failed on is red
    whatever its figure)."""
    batches, rows = map_rows(fitted)
    seqs = [seq for seq, _ in rows]
    z: list[list[float | None]] = []
    text: list[list[str]] = []
    for _, points in rows:
        shares: list[float | None] = []
        words = []
        for point in points:
            if point is None:
                shares.append(None)
                words.append("")
                continue
            share = point.peak / fitted.capacity
            # the scale turns red at 1: a point that does not fit is drawn at or above it
            shares.append(min(share, 0.999) if point.fits else max(min(share, 2.0), 1.0))
            words.append(plot_text(point.word() + (" (measured)" if point.measured is not None else "")))
        z.append(shares)
        text.append(words)
    edges = "; ".join(
        f"seq {e.seq}: {e.batch}" if e.seq is not None else f"{e.batch}" for e in fitted.edges if e.batch is not None
    )
    caption = (
        f"Peak memory of {label} per point as a share of its capacity ({human_bytes(fitted.capacity)}, "
        f"{fitted.capacity_from}): green fits, red does not; (measured) where the target ran it, else predicted "
        f"on the host and calibrated. Largest batch that fits: {edges or 'none'}"
    )
    figure = {
        "data": [
            {
                "type": "heatmap",
                "x": [str(b) for b in batches],
                "y": ["own" if s is None else str(s) for s in seqs],
                "z": z,
                "text": text,
                "texttemplate": "%{text}",
                "hovertemplate": "batch %{x}, seq %{y}: %{text}<extra></extra>",
                "zmin": 0,
                "zmax": 2,
                "colorscale": [[0, "#e8f5e9"], [0.4999, "#2e7d32"], [0.5, "#ef9a9a"], [1, "#b71c1c"]],
                "colorbar": {"title": {"text": "share of capacity"}},
            }
        ],
        "layout": plot_layout(
            f"fit map: {label}", "sequence length", xaxis={"title": {"text": "batch"}, "type": "category"}
        ),
    }
    figure["layout"]["yaxis"]["type"] = "category"
    return caption, figure


def dist_charts(label: str, found: DistResult) -> list[tuple[str, dict[str, Any]]]:
    """Per world size that ran to its end: the bus bandwidth of each collective and dtype over
    the message sizes, and the tail of its calls (p99 / p50) over the same sizes; a collective
    that gave a wrong value is drawn with crosses."""
    figures = []
    for world in found.worlds:
        cells = [c for c in world.cells if c.size and c.p50_us is not None]
        if not cells:
            continue
        lines: dict[tuple[str, str], list[Any]] = {}
        for cell in cells:
            lines.setdefault((cell.op, cell.dtype), []).append(cell)
        for what, value, axis in (("bus bandwidth", "busbw_gbs", "GB/s"), ("tail", "tail", "p99 / p50")):
            data = [
                {
                    "type": "scatter",
                    "mode": "lines+markers",
                    "name": plot_text(f"{op} {dtype}"),
                    "x": [c.size for c in row],
                    "y": [getattr(c, value) for c in row],
                    "text": [plot_text(f"{human_bytes(c.size)}: {c.verdict}") for c in row],
                    "marker": {"symbol": ["x" if c.verdict != "pass" else "circle" for c in row], "size": 8},
                    "line": {"dash": "dot" if dtype != "float32" else "solid"},
                }
                for (op, dtype), row in lines.items()
            ]
            shown = (
                "nccl-tests bus bandwidth from the median call"
                if value == "busbw_gbs"
                else "the slowest calls against the typical one (1 = no tail)"
            )
            caption = (
                f"{what.capitalize()} of each collective on {label} at {world.world} ranks ({world.backend}), per "
                f"message size: {shown}; crosses mark a collective that gave a wrong value"
            )
            layout = plot_layout(f"{what}: {label}, {world.world} ranks", axis, showlegend=True,
                                 xaxis={"title": {"text": "message size (bytes)"}, "type": "log"})  # fmt: skip
            figures.append((caption, {"data": data, "layout": layout}))
    return figures
