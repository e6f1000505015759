"""Rich tables for regressions and side-by-side comparisons (values from
:mod:`bakeoff.verdicts.regressions`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from bakeoff.units import significant
from bakeoff.verdicts.regressions import Comparison, MetricChange

__all__ = ["comparison_view", "regressions_table"]

_STYLE = {
    "regressed": "bold red",
    "failed": "bold magenta",
    "improved": "green",
    "unchanged": "dim",
    "not_comparable": "yellow",
}


def _value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return significant(value)
    return str(value)


def _changed(comparison: Comparison) -> str:
    if comparison.outcome == "not_comparable":
        return comparison.reason
    parts = [
        f"{m.metric} {_value(m.before)} -> {_value(m.after)}" + (f" ({m.detail})" if m.detail else "")
        for m in comparison.metrics
        if m.outcome in ("regressed", "improved", "failed")
    ]
    return "; ".join(parts) or "-"


def regressions_table(
    comparisons: Sequence[Comparison], paired: str = "the newest earlier run in another environment"
) -> Group:
    """One row per workload + target: the outcome, what changed and the environment change;
    ``paired`` says what each result was compared with."""
    table = Table(header_style="bold")
    for column in ("workload", "target", "outcome", "what changed", "environment change", "runs"):
        table.add_column(column, overflow="fold", no_wrap=column in ("outcome",))
    for c in comparisons:
        target = c.target + (f" [{c.variant}]" if c.variant != "as-is" else "")
        table.add_row(
            escape(c.workload),
            escape(target),
            Text(c.outcome.replace("_", " "), style=_STYLE[c.outcome]),
            escape(_changed(c)),
            escape(c.environment.summary()),
            f"{c.before_run} -> {c.after_run}",
        )
    counts = {o: sum(1 for c in comparisons if c.outcome == o) for o in _STYLE}
    summary = ", ".join(f"{n} {o.replace('_', ' ')}" for o, n in counts.items() if n)
    thresholds = comparisons[0].thresholds if comparisons else None
    parts: list[Any] = [table, Text(summary)]
    if thresholds is not None:
        costed = any(m.metric == "cost" for c in comparisons for m in c.metrics)
        cost = (
            f"cost (where both runs have prices) beyond {thresholds.cost:.0%} when the data can tell them apart; "
            if costed
            else ""
        )
        parts.append(
            Text(
                f"latency counts when it changes by more than {thresholds.latency:.0%} and its "
                f"{thresholds.confidence:.0%} bootstrap interval excludes no change; first call beyond "
                f"{thresholds.first_call:.0%} and {thresholds.first_call_floor_ms:g} ms; {cost}compared with "
                f"{paired}",
                style="dim",
            )
        )
    return Group(*parts)


def _metric_row(table: Table, m: MetricChange) -> None:
    interval = f"{m.low:.2f}-{m.high:.2f}" if m.low is not None and m.high is not None else ""
    ratio = m.metric.endswith("_ms") or m.metric == "cost"
    change = f"x{m.change:.2f}" if m.change is not None and ratio else _value(m.change)
    table.add_row(
        escape(m.metric),
        escape(_value(m.before)),
        escape(_value(m.after)),
        change if m.change is not None else "",
        interval,
        Text(m.outcome.replace("_", " "), style=_STYLE[m.outcome]),
        escape(m.detail),
    )


def comparison_view(comparisons: Sequence[Comparison]) -> Group:
    """Each pair side by side: every metric before and after, and its classification."""
    parts: list[Any] = []
    for c in comparisons:
        after_target = c.after_target or c.target
        title = (
            f"{c.workload}: {c.target} ({c.before_run}) vs {after_target} ({c.after_run})"
            if after_target != c.target
            else f"{c.workload} on {c.target}"
            + (f" [{c.variant}]" if c.variant != "as-is" else "")
            + f": {c.before_run} vs {c.after_run}"
        )
        table = Table(title=escape(title), title_justify="left", header_style="bold")
        for column in ("metric", "A", "B", "change", "95% CI", "outcome", "detail"):
            table.add_column(column, overflow="fold")
        for m in c.metrics:
            _metric_row(table, m)
        parts.append(table)
        line = Text.assemble(("outcome ", "bold"), (c.outcome.replace("_", " "), _STYLE[c.outcome]))
        if c.reason:
            line.append(f": {c.reason}")
        parts.append(line)
        parts.append(Text(f"environment: {c.environment.summary()}", style="dim"))
    return Group(*parts)
