"""The terminal view of ``bakeoff regressions --bisect`` (values from :mod:`bakeoff.verdicts.bisect`)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group
from rich.table import Table

from bakeoff.report.printable import Shown as Text  # stored strings: control characters shown
from bakeoff.report.printable import escape
from bakeoff.units import significant
from bakeoff.verdicts.bisect import Bisection

__all__ = ["bisection_view"]

_STYLE = {"moves it back": "bold green", "makes it worse": "bold red", "no effect": "dim", "not conclusive": "yellow"}


def bisection_view(bisections: Sequence[Bisection]) -> Group:
    """Per bisected target: how it was measured, one row per environment change, the answer."""
    parts: list = []
    for b in bisections:
        control = f"{significant(b.control_p50_ms)} ms" if b.control_p50_ms is not None else "not timed"
        spread = f", two runs {b.control_spread * 100:.0f}% apart" if b.control_spread is not None else ""
        parts.append(
            Text(
                f"bisect {b.workload} on {b.target}: p50 {significant(b.before_p50_ms)} ms in run {b.before_run}, "
                f"{significant(b.after_p50_ms)} ms in run {b.after_run}; as it is here {control}{spread}; "
                f"still slower than before: {b.reproduced}"
            )
        )
        table = Table(header_style="bold")
        for column in ("change", "put back to", "verdict", "p50", "faster than as it is", "why"):
            table.add_column(column, overflow="fold")
        for s in b.steps:
            ratio = f"x{s.speedup['value']:.2f} ({s.speedup['low']:.2f}-{s.speedup['high']:.2f})" if s.speedup else "-"
            table.add_row(
                escape(f"{s.key.removeprefix('packages.')} (now {s.after})"),
                escape("unset" if s.before is None else str(s.before)),
                Text(s.verdict, style=_STYLE.get(s.verdict, "")),
                f"{significant(s.p50_ms)} ms" if s.p50_ms is not None else "-",
                ratio,
                Text(s.why),
            )
        if b.steps:
            parts.append(table)
        parts.append(Text(f"answer: {b.conclusion}", style="bold"))
    return Group(*parts)
