"""A sweep's coverage for people: the terminal tables, Markdown and the HTML heat-map page.

Every figure is printed with its population (name, unit, size, transformers version, date)
and the grade ladder it counts, so that a share is never read without what it is a share of.
"""

from __future__ import annotations

import secrets
from typing import Any

from bakeoff.units import clip
from bakeoff.verdicts.coverage import GRADE_MEANING, GRADES, Coverage

__all__ = ["coverage_markdown", "coverage_view", "expectations_view", "render_coverage_html"]

_STYLE = {None: "red", "builds": "red", "runs": "dark_orange", "on_device": "yellow", "correct": "green3"}
_STYLE[GRADES[-1]] = "bold green"


def _population(c: Coverage) -> str:
    p = c.population
    version = f", transformers {p['transformers']}" if p.get("transformers") else ""
    listed = str(p.get("listed_at", ""))[:10]
    return f"{p.get('name')} ({c.size} {p.get('unit', 'workload')}s: {p.get('source', '')}{version}, listed {listed})"


def _share(figure: dict[str, Any], grade: str, size: int) -> str:
    count = figure["grades"][grade]["count"]
    return f"{count}/{size} ({count / size:.0%})" if size else "-"


def coverage_view(c: Coverage, matrix: bool = True, reasons: int = 15) -> Any:
    """A rich renderable: heading, ladder, figures, the matrix and the top ``reasons``."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from bakeoff.report.printable import escape, visible

    done = c.size - len(c.pending)
    parts: list[Any] = [
        Text.assemble(
            ("sweep ", "bold"), (c.sweep_id, "bold cyan"), f"  started {c.created_at[:19].replace('T', ' ')} UTC"
        ),
        Text(visible(f"population {_population(c)}")),
        Text(
            f"{done} of {c.size} stored"
            + (
                f", {len(c.pending)} pending (counted as not reached; resume with bakeoff sweep --resume {c.sweep_id})"
                if c.pending
                else ""
            ),
            style="yellow" if c.pending else "",
        ),
    ]
    ladder = Table(title="grade ladder (each includes the ones above it)", title_justify="left", show_edge=False)
    ladder.add_column("grade")
    ladder.add_column("meaning")
    for grade in GRADES:
        ladder.add_row(grade, GRADE_MEANING[grade])
    parts.append(ladder)
    figures = Table(
        title=f"coverage: share of the {c.size} {c.population.get('unit', 'workload')}s at each grade or higher",
        title_justify="left",
    )
    figures.add_column("target")
    for grade in GRADES:
        figures.add_column(f">= {grade}", justify="right")
    figures.add_column("skipped", justify="right")
    for target, figure in c.figures.items():
        figures.add_row(escape(target), *(_share(figure, g, c.size) for g in GRADES), str(figure["skipped"]))
    parts.append(figures)
    if matrix:
        grid = Table(title="matrix: the grade each reached (none: not even built)", title_justify="left")
        grid.add_column(c.population.get("unit", "workload"))
        for target in c.targets:
            grid.add_column(escape(target))
        for workload, row in c.grid().items():
            cells = [row.get(t) for t in c.targets]
            grid.add_row(
                escape(workload),
                *(
                    Text("-") if cell is None else Text(cell.grade or "none", style=_STYLE.get(cell.grade, "dim"))
                    for cell in cells
                ),
            )
        parts.append(grid)
    found = c.reasons
    if found:
        table = Table(title=f"why cells stopped ({len(found)} reasons, most frequent first)", title_justify="left")
        table.add_column(c.population.get("unit", "workload") + "s", justify="right")
        table.add_column("reason")
        table.add_column("stopped after")
        table.add_column("targets")
        table.add_column("e.g.")
        for r in found[:reasons]:
            more = f" +{r['count'] - 3}" if r["count"] > 3 else ""
            table.add_row(
                str(r["count"]),
                escape(r["reason"]),
                escape(", ".join(r["stopped_at"])),
                escape(", ".join(r["targets"])),
                escape(", ".join(r["workloads"][:3]) + more),
            )
        parts.append(table)
    return Group(*parts)


def _md(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def coverage_markdown(c: Coverage) -> str:
    """The same as tables in Markdown."""
    lines = [
        f"# Coverage, sweep {c.sweep_id}",
        "",
        f"Population {_md(_population(c))}; {c.size - len(c.pending)} of {c.size} stored.",
        "",
        "| grade | meaning |",
        "|---|---|",
        *(f"| {g} | {_md(GRADE_MEANING[g])} |" for g in GRADES),
        "",
        "| target | " + " | ".join(f">= {g}" for g in GRADES) + " | skipped |",
        "|---|" + "---:|" * (len(GRADES) + 1),
    ]
    for target, figure in c.figures.items():
        lines.append(
            f"| {_md(target)} | " + " | ".join(_share(figure, g, c.size) for g in GRADES) + f" | {figure['skipped']} |"
        )
    lines += ["", "| workload | " + " | ".join(_md(t) for t in c.targets) + " |", "|---|" + "---|" * len(c.targets)]
    for workload, row in c.grid().items():
        lines.append(
            f"| {_md(workload)} | "
            + " | ".join(_md((row[t].grade or "none") if t in row else "-") for t in c.targets)
            + " |"
        )
    reasons = c.reasons
    if reasons:
        lines += ["", "| count | reason | stopped after | targets | which |", "|---:|---|---|---|---|"]
        for r in reasons:
            lines.append(
                f"| {r['count']} | {_md(r['reason'])} | {_md(', '.join(r['stopped_at']))} | "
                f"{_md(', '.join(r['targets']))} | {_md(', '.join(r['workloads']))} |"
            )
    return "\n".join(lines) + "\n"


def _heatmap(c: Coverage) -> dict[str, Any]:
    from bakeoff.report.charts import plot_text as _t

    grid = c.grid()
    workloads = list(grid)
    levels = ["none", *GRADES]
    z, text = [], []
    for workload, row in grid.items():
        z.append(
            [
                None if t not in row or row[t].grade == "skipped" else levels.index(row[t].grade or "none")
                for t in c.targets
            ]
        )
        text.append(
            [
                _t(
                    f"{workload} on {t}: {row[t].grade or 'none'}"
                    + (f" - {clip(row[t].reason, 200)}" if row[t].reason else "")
                )
                if t in row
                else ""
                for t in c.targets
            ]
        )
    colours = ["#b71c1c", "#e53935", "#fb8c00", "#fdd835", "#7cb342", "#1b5e20"]
    scale = [[i / (len(colours) - 1), colour] for i, colour in enumerate(colours)]
    return {
        "data": [
            {
                "type": "heatmap",
                "z": z,
                "x": [_t(t) for t in c.targets],
                "y": [_t(w) for w in workloads],
                "text": text,
                "hoverinfo": "text",
                "zmin": 0,
                "zmax": len(levels) - 1,
                "colorscale": scale,
                "colorbar": {"tickvals": list(range(len(levels))), "ticktext": levels},
            }
        ],
        "layout": {"margin": {"l": 220, "r": 20, "t": 20, "b": 80}, "yaxis": {"autorange": "reversed"}},
    }


def render_coverage_html(c: Coverage) -> str:
    """A self-contained page: plotly inlined, every user string escaped, no network loads."""
    from markupsafe import Markup

    from bakeoff.report.html import _plotly_js, _template, safe_json

    figures = [
        {"target": t, "cells": [_share(f, g, c.size) for g in GRADES], "skipped": f["skipped"]}
        for t, f in c.figures.items()
    ]
    return _template("coverage.html.j2").render(
        c=c,
        population=_population(c),
        unit=c.population.get("unit", "workload"),
        done=c.size - len(c.pending),
        grades=[(g, GRADE_MEANING[g]) for g in GRADES],
        figures=figures,
        reasons=c.reasons,
        heatmap=Markup(safe_json(_heatmap(c))),
        height=max(300, 22 * len(c.grid()) + 120),
        plotly_js=Markup(_plotly_js()),
        nonce=secrets.token_urlsafe(16),
    )


def expectations_view(checked: list[Any], path: str, before: str = "expected") -> Any:
    """The cells that differ from the expectations file (or, ``before="was"``, from an earlier
    sweep's grades), and a count per status."""
    from collections import Counter

    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from bakeoff.report.printable import escape

    counts = Counter(e.status for e in checked)
    order = ("regressed", "improved", "new", "missing", "expected_failure", "pass", "skipped")
    line = ", ".join(f"{counts[s]} {s}" for s in order if counts[s])
    style = "bold red" if counts["regressed"] else "green"
    parts: list[Any] = [Text(f"against {path}: {line}", style=style)]
    changed = [e for e in checked if e.status in ("regressed", "improved", "new", "missing")]
    if changed:
        table = Table(title_justify="left")
        for column in ("status", "workload", "target", before, "now", "why"):
            table.add_column(column)
        for e in sorted(changed, key=lambda e: (order.index(e.status), e.workload, e.target)):
            why = escape(clip(e.reason, 120))
            table.add_row(
                e.status, escape(e.workload), escape(e.target), escape(e.expected or "-"), escape(e.actual or "-"), why
            )
        parts.append(table)
    return Group(*parts)
