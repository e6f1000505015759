"""The detail tables of one run: buckets, scenarios, requirements and library messages.

``bakeoff show --verbose`` adds the first three below the run table (:mod:`.run`), and
``bakeoff show --log`` prints the last. Each is a Rich table with one row per target (and
scenario, requirement or message line); :func:`target_label` is how every table names a target.
"""

from __future__ import annotations

from rich.console import Group
from rich.table import Table

from bakeoff.analysis.requirements import requirement_state
from bakeoff.report.figures import human_bytes as _bytes
from bakeoff.report.figures import interval_heading, requirement_figures, scenario_figures, with_level
from bakeoff.report.printable import Shown as Text  # every line shows the control characters of stored text
from bakeoff.report.printable import escape
from bakeoff.results.values import RunResult, TargetResult
from bakeoff.units import duration

__all__ = ["STATUS_STYLE", "buckets_view", "log_view", "requirements_view", "scenarios_view", "target_label"]

STATUS_STYLE = {"ok": "green", "error": "bold red", "skipped": "dim"}


def target_label(result: TargetResult) -> str:
    return result.target.spec + (f" [{result.variant}]" if result.variant != "as-is" else "")


def buckets_view(run: RunResult) -> Table:
    """As-is vs bucketed, side by side, for each target that ran both ways."""
    buckets = run.settings.get("buckets") or {}
    table = Table(
        title=f"static-shape what-if: buckets {buckets.get('chosen')} "
        f"(padding waste {buckets.get('waste', 0):.1%}; powers of two {buckets.get('power_of_two')} "
        f"would waste {buckets.get('power_of_two_waste', 0):.1%})",
        title_justify="left",
        header_style="bold",
    )
    for column in (
        "target",
        "variant",
        "correct",
        "graphs",
        "recompiles",
        "compile",
        "first pass",
        "p50",
        "p90",
        "waste",
    ):
        table.add_column(column, justify="left" if column in ("target", "variant", "correct") else "right")
    for result in run.results:
        if not any(r.target == result.target and r.variant != "as-is" for r in run.results):
            continue
        c, latency, profile = result.compilation, result.latency, result.profile or {}
        table.add_row(
            escape(result.target.spec),
            escape(result.variant),
            escape(result.verdict or "-"),
            str(c.graphs) if c else "-",
            str(c.recompiles) if c else "-",
            duration(c.compile_seconds_total * 1e3) if c else "-",
            duration(profile.get("first_pass_ms")),
            duration(latency.p50_ms if latency and latency.count else None),
            duration(latency.p(90) if latency and latency.count else None),
            f"{profile.get('padding_waste', 0):.1%}",
        )
    return table


def log_view(run: RunResult) -> Group:
    """What the libraries said while each target ran, one row per distinct line and phase."""
    if not any(r.log for r in run.results):
        return Group(Text(f"run {run.run_id}: no library messages were captured"))
    table = Table(header_style="bold", title=f"library messages of run {run.run_id}", title_justify="left")
    table.add_column("target", overflow="fold")
    table.add_column("phase")
    table.add_column("source")
    table.add_column("count", justify="right")
    table.add_column("text", overflow="fold")
    for result in run.results:
        for line in result.log:
            table.add_row(
                escape(target_label(result)),
                escape(line["phase"]),
                escape(line["source"]),
                escape(str(line["count"])),
                escape(line["text"]),
            )
    return Group(table)


def scenarios_view(run: RunResult) -> Table:
    """One row per target and scenario: headline figures with their intervals (a trial's: 95%
    bootstrap; a service's: 99%, accounting for the correlation between successive requests)."""
    title = (
        "scenarios (figures with 99% intervals that account for the correlation between requests)"
        if run.workload.get("kind") == "service"
        else "scenarios (figures with 95% bootstrap intervals)"
    )
    table = Table(header_style="bold", title=title)
    for name, justify in (("target", "left"), ("scenario", "left"), ("status", "left"), ("figures", "left")):
        table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
    table.add_column("ran", justify="right", no_wrap=True)
    table.add_column("peak RSS", justify="right", no_wrap=True)
    for result in run.results:
        for scenario in result.scenarios:
            ok = scenario.status == "ok"
            figures = "; ".join(scenario_figures(result, scenario)) if ok else scenario.reason
            table.add_row(
                escape(target_label(result)),
                escape(scenario.name),
                Text(scenario.status, style=STATUS_STYLE.get(scenario.status, "yellow")),
                escape(figures),
                duration(scenario.run_seconds * 1e3),
                _bytes(scenario.peak_host_rss_bytes),
            )
    return table


_REQUIREMENT_STYLE = {"met": "green", "not_met": "bold red", "not_measured": "yellow", "not_applicable": "dim"}


def requirements_view(run: RunResult) -> Table:
    """Each target against each requirement: verdict, the measured value and its interval."""
    table = Table(header_style="bold", title="requirements")
    heading = interval_heading(check for result in run.results for check in result.requirements)
    for name in ("target", "requirement", "verdict", "measured", heading, "note"):
        table.add_column(name, overflow="fold")
    for result in run.results:
        for check in result.requirements:
            measured, interval = requirement_figures(check)
            interval = with_level(interval, check, heading)
            state = requirement_state(check)  # one word, the decision's
            note = check["reason"]
            if state == "not conclusive":
                leaning = "met" if check["verdict"] == "met" else "not met"
                note = "; ".join(
                    filter(None, [note, f"the interval straddles the threshold (the estimate: {leaning})"])
                )
            table.add_row(
                escape(target_label(result)),
                escape(check["text"]),
                Text(state, style=_REQUIREMENT_STYLE.get(state.replace(" ", "_"), "yellow")),
                measured,
                interval,
                escape(note),
            )
    return table
