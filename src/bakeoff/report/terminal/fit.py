"""``bakeoff fit``'s answer in the terminal: the map (one row per sequence length, one column per
batch size, each cell the expected peak, green where it fits), the edge per row, and how the
figures were made (capacity, calibration, verification)."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table

from bakeoff.report.printable import Shown as Text  # stored text shows its control characters
from bakeoff.scenarios.fit import FitPoint, FitResult, edge_words, map_rows, requirement_words
from bakeoff.units import human_bytes

__all__ = ["fit_view"]


def _cell(point: FitPoint | None) -> Text | str:
    if point is None:
        return ""
    style = "red" if point.out_of_memory or point.error else "yellow" if point.timed_out else (
        "green" if point.fits else "red")  # fmt: skip
    return Text(point.word() + ("*" if point.measured is not None else ""), style=style)


def fit_view(result: FitResult) -> Group:
    """``result`` as one renderable: the headline, the map, the edges with what would move them,
    the requirements, and how the figures were made."""
    what = "a training step (" + result.optimizer + ")" if result.training else "inference"
    lines: list[Any] = [Text(f"fit of {result.workload} on {result.target}: {what}, capacity "
                             f"{human_bytes(result.capacity)} ({result.capacity_from})")]  # fmt: skip
    batches, rows = map_rows(result)
    table = Table(title="expected peak per point (green: fits; *: measured on the target)", title_justify="left")
    table.add_column("seq \\ batch")
    for batch in batches:
        table.add_column(str(batch), justify="right")
    for seq, points in rows:
        table.add_row("(own)" if seq is None else str(seq), *(_cell(point) for point in points))
    lines.append(table)
    for edge in result.edges:
        lines.append(Text(edge_words(edge)))
        lines += [Text(f"  batch {edge.beyond} with {move}") for move in edge.moves]
    for req in result.requirements:
        style = {"met": "green", "not met": "red"}.get(req.verdict, "yellow")
        lines.append(Text(f"{req.text}: {req.verdict} ({requirement_words(req, result.capacity)})", style=style))
    lines += [Text(f"note: {note}", style="dim") for note in result.notes]
    lines.append(Text(f"calibration: {result.calibration}"))
    lines.append(Text(f"verification: {result.verification}"))
    made = f"predicted {len(result.points)} point(s) in {result.predict_s:.1f} s on the host (fake tensors)"
    lines.append(Text(made))
    return Group(*lines)
