"""``bakeoff fit``'s answer in the terminal: the map (one row per sequence length, one column per
batch size, each cell the expected peak, green where it fits), the edge per row, and how the
figures were made (capacity, calibration, verification)."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from bakeoff.results.fit import FitResult
from bakeoff.units import human_bytes

__all__ = ["fit_view"]


def _cell(point: Any) -> Text:
    peak = point.measured if point.measured is not None else point.expected
    if point.error:
        return Text("failed", style="red")
    shown = "out of memory" if point.out_of_memory else human_bytes(peak) + ("*" if point.measured is not None else "")
    return Text(shown, style="green" if point.fits else "red")


def fit_view(result: FitResult, console: Any) -> None:
    """Print ``result`` on ``console``."""
    what = "a training step (" + result.optimizer + ")" if result.training else "inference"
    console.print(f"fit of {result.workload} on {result.target}: {what}, capacity {human_bytes(result.capacity)} "
                  f"({result.capacity_from})")  # fmt: skip
    batches = sorted({p.batch for p in result.points})
    table = Table(title="expected peak per point (green: fits; *: measured on the target)", title_justify="left")
    table.add_column("seq \\ batch")
    for batch in batches:
        table.add_column(str(batch), justify="right")
    by_point = {(p.batch, p.seq): p for p in result.points}
    for seq in dict.fromkeys(p.seq for p in result.points):
        row: list[Any] = ["(own)" if seq is None else str(seq)]
        row += [_cell(by_point[(b, seq)]) if (b, seq) in by_point else "" for b in batches]
        table.add_row(*row)
    console.print(table)
    for edge in result.edges:
        where = "" if edge.seq is None else f"seq {edge.seq}: "
        if edge.batch is None:
            console.print(f"{where}no batch of the grid fits (the smallest does not)")
            continue
        beyond = f"; batch {edge.beyond} does not" if edge.beyond is not None else "; every batch of the grid fits"
        how = "measured on the target" if edge.verified else "predicted, not verified on the target"
        console.print(f"{where}largest batch that fits {edge.batch} ({how}), {edge.margin:.0%} of the capacity left, "
                      f"{edge.dominates or 'nothing'} dominate its peak{beyond}")  # fmt: skip
        for move in edge.moves:
            console.print(f"  batch {edge.beyond} with {move}")
    for req in result.requirements:
        how = "measured on the target" if req.measured else "predicted"
        console.print(f"{req.text}: {req.verdict} ({human_bytes(req.peak)} {how}, of {human_bytes(result.capacity)})")
    console.print(f"calibration: {result.calibration}")
    console.print(f"verification: {result.verification}")
    console.print(f"predicted {len(result.points)} point(s) in {result.predict_s:.1f} s on the host (fake tensors)")
