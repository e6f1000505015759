"""Rich tables for regressions and side-by-side comparisons (values from
:mod:`bakeoff.verdicts.regressions`).

What differs between the two environments is listed apart from what changed, under a heading
that says it was not tested as a cause: an update and a regression that arrive together are
not thereby cause and effect."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from bakeoff.report.printable import escape
from bakeoff.units import significant
from bakeoff.verdicts.regressions import INCONCLUSIVE, Comparison, MetricChange

__all__ = ["ENVIRONMENT", "comparison_view", "regressions_table"]

_STYLE = {
    "regressed": "bold red",
    "failed": "bold magenta",
    "improved": "green",
    "unchanged": "dim",
    "not_comparable": "yellow",
}
#: The environment column's heading, and the label before the difference in a comparison.
ENVIRONMENT = "environment differences (not tested as causes)"


def _value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return significant(value)
    return str(value)


def _changed(comparison: Comparison) -> str:
    """What moved: each metric beyond its threshold, and each timing figure that moved but is
    not conclusive (its detail says why first: noise, or an interval that contains no change)."""
    if comparison.outcome == "not_comparable":
        return comparison.reason
    parts = []
    for m in comparison.metrics:
        moved = f"{m.metric} {_value(m.before)} -> {_value(m.after)}"
        if m in comparison.inconclusive:
            parts.append(f"{moved}: {m.detail}")
        elif m.outcome in ("regressed", "improved", "failed"):
            parts.append(moved + (f" ({m.detail})" if m.detail else ""))
    return "; ".join(parts) or "-"


def _said(comparison: Comparison) -> tuple[str, str]:
    """The outcome as the table says it, with its style: a comparison whose only movement is not
    conclusive reads so (its outcome stays ``unchanged``: nothing counts for ``--strict``)."""
    if comparison.outcome == "unchanged" and comparison.inconclusive:
        return INCONCLUSIVE, _STYLE["not_comparable"]
    return comparison.outcome.replace("_", " "), _STYLE[comparison.outcome]


def regressions_table(
    comparisons: Sequence[Comparison], paired: str = "the newest earlier run in another environment"
) -> Group:
    """One row per workload + target: the outcome, what changed, the runs, and apart from
    them what differs between the environments (not tested as causes); ``paired`` says what
    each result was compared with."""
    table = Table(header_style="bold")
    for column in ("workload", "target", "outcome", "what changed", "runs", ENVIRONMENT):
        table.add_column(column, overflow="fold", no_wrap=column in ("outcome",))
    for c in comparisons:
        target = c.target + (f" [{c.variant}]" if c.variant != "as-is" else "")
        table.add_row(
            escape(c.workload),
            escape(target),
            Text(*_said(c)),
            escape(_changed(c)),
            f"{c.before_run} -> {c.after_run}",
            Text(c.environment.summary(), style="dim"),
        )
    said = [_said(c)[0] for c in comparisons]
    order = [o.replace("_", " ") for o in ("regressed", "failed", "improved", "unchanged")]
    order += [INCONCLUSIVE, "not comparable"]
    summary = ", ".join(f"{said.count(o)} {o}" for o in order if o in said)
    unsure = sum(1 for c in comparisons if c.inconclusive and c.outcome != "unchanged")
    if unsure:
        summary += f"; {unsure} of these also with a timing change that is not conclusive"
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
                f"{thresholds.first_call:.0%} and {thresholds.first_call_floor_ms:g} ms; {cost}a timing change on "
                "a side flagged noisy is not conclusive, never worse; compared with "
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
        Text(INCONCLUSIVE if m.inconclusive else m.outcome.replace("_", " "), style=_STYLE[m.outcome]),
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
        line = Text.assemble(("outcome ", "bold"), _said(c))
        if c.reason:
            line.append(f": {c.reason}")
        parts.append(line)
        parts.append(Text(f"{ENVIRONMENT}: {c.environment.summary()}", style="dim"))
    return Group(*parts)
