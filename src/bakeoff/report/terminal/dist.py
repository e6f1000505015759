"""``bakeoff dist``'s answer in the terminal: per world size how it ended, then a table of every
collective (its verdict against its analytic value, latency percentiles, the tail and the bus
bandwidth), and for a hang where every rank was."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from bakeoff.scenarios.dist import DistResult, WorldRun, world_words
from bakeoff.units import human_bytes

__all__ = ["dist_view"]

_STYLE = {"pass": "green", "fail": "red", "hang": "red", "error": "red"}


def _figure(value: float | None, form: str) -> str:
    return "-" if value is None else format(value, form)


def _table(world: WorldRun) -> Table:
    table = Table(title=f"{world.world} ranks: each collective against its analytic value", title_justify="left")
    for name in ("collective", "dtype", "size", "verdict", "error (ulp)", "p50", "p99", "p99/p50", "bus GB/s"):
        table.add_column(name, justify="left" if name in ("collective", "dtype", "verdict") else "right")
    for cell in world.cells:
        error = "-" if cell.max_error is None else f"{cell.max_error:.3g} / {cell.tolerance:g}"
        table.add_row(
            cell.op, cell.dtype or "-", human_bytes(cell.size) if cell.size else "-",
            Text(cell.verdict, style=_STYLE.get(cell.verdict, "")), error,
            _figure(cell.p50_us, ".0f") + (" us" if cell.p50_us is not None else ""),
            _figure(cell.p99_us, ".0f") + (" us" if cell.p99_us is not None else ""),
            _figure(cell.tail, ".1f"), _figure(cell.busbw_gbs, ".3g"),
        )  # fmt: skip
    return table


def _steps(world: WorldRun) -> Table:
    said = f"{world.world} ranks: each {world.mode.upper()} step (golden: one float64 process on the global batch; "
    table = Table(title=said + "reference: the same job on the CPU with gloo)", title_justify="left")
    for name in ("step", "loss golden", "loss ref", "loss target", "grad norm golden", "grad norm ref",
                 "grad norm target", "weights off golden: ref", "target"):  # fmt: skip
        table.add_column(name, justify="right")
    for step in world.training:
        table.add_row(str(step.step), *(f"{v:.6g}" for v in (*step.loss, *step.grad_norm)),
                      f"{step.weights[0]:.3g}", f"{step.weights[1]:.3g}")  # fmt: skip
    return table


def dist_view(result: DistResult) -> Group:
    """``result`` as one renderable: the headline, then each world size (see the module docstring)."""
    lines: list[Any] = [Text(f"dist {result.workload} on {result.target}: {result.verdict}",
                             style=_STYLE.get(result.verdict, ""))]  # fmt: skip
    for world in result.worlds:
        lines.append(Text(world_words(world), style=_STYLE.get(world.verdict, "")))
        starts = ", ".join(f"{s:.1f}" for s in world.startup_s)
        devices = ", ".join(world.devices) if "?" not in world.devices else "not reported (a rank did not finish)"
        lines.append(Text(f"  devices {devices or '-'}; ranks started after {starts or '-'} s; "
                          f"{world.seconds:.1f} s in all", style="dim"))  # fmt: skip
        if world.cells:
            lines.append(_table(world))
        if world.training:
            lines.append(_steps(world))
    lines += [Text(f"note: {note}", style="dim") for note in result.notes]
    return Group(*lines)
