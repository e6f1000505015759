"""Rich tables for runs, history, targets and workloads."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Group
from rich.table import Table

from bakeoff.analysis.cost import Price
from bakeoff.analysis.requirements import requirement_state
from bakeoff.checks.registry import guarded, registered_checks
from bakeoff.report.evidence import answers_for
from bakeoff.report.figures import human_bytes as _bytes
from bakeoff.report.figures import (
    log_fact,
    requirement_figures,
    scenario_figures,
    settings_line,
    spans_fact,
    speed_caveat,
)
from bakeoff.report.printable import Shown as Text  # every line shows the control characters of stored text
from bakeoff.report.printable import escape
from bakeoff.results.summary import RunSummary
from bakeoff.results.values import BaselineInfo, Placement, RunResult, TargetResult
from bakeoff.units import clip, duration, figure, significant
from bakeoff.verdicts.decision import REHEARSAL, RULE_BRIEF, Decision, Standing, decide_run, label_of
from bakeoff.verdicts.plan import Plan
from bakeoff.verdicts.remedies import Remedy, what_it_takes

__all__ = ["baseline_view", "history_table", "log_view", "run_view", "targets_view", "workloads_view"]

_VERDICT_STYLE = {
    "pass": "green",
    "fail": "bold red",
    "not comparable": "yellow",
    "error": "bold red",
    "not run": "dim",
}
_STATUS_STYLE = {"ok": "green", "error": "bold red", "skipped": "dim"}
_PLACEMENT_STYLE = {
    "on_device": "green",
    "fallbacks": "bold yellow",
    "left_on_host": "bold red",
    "engine_did_not_run": "bold red",
    "not_applicable": "dim",
}


def _err(value: float | None) -> str:
    return "-" if value is None else f"{value:.2e}"


def _speed(result: TargetResult) -> str:
    if result.speedup is None:
        return "-"
    if result.is_reference:
        return f"{result.speedup:.2f}x (ref)"
    ci = result.speedup_ci or {}
    return f"{result.speedup:.2f}x" + (" (n.s.)" if ci and not ci.get("significant") else "")


def _label(result: TargetResult) -> str:
    return result.target.spec + (f" [{result.variant}]" if result.variant != "as-is" else "")


def _graphs(result: TargetResult) -> str:
    compilation = result.compilation
    if compilation is None:
        return "-"
    text = str(compilation.graphs)
    if compilation.recompiles:
        text += f" ({compilation.recompiles} recompiles)"
    return text


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


def _share(placement: Placement | None, cpu: bool = False) -> str:
    """The device's share; on a CPU target only an engine's own share means anything."""
    if placement is not None and placement.engine_work and placement.engine_work.get("share") is not None:
        return f"{placement.engine_work['share']:.0%} in {placement.engine_work.get('engine', 'engine')}"
    if placement is None or placement.verdict == "not_applicable" or placement.device_op_share is None or cpu:
        return "-"
    text = f"{placement.device_op_share:.0%} ops"
    if placement.device_flop_share is not None:
        text += f", {placement.device_flop_share:.0%} FLOPs"
    return text


def _failure(result: TargetResult) -> list[str]:
    """How the target failed, in one line (none when it did not)."""
    if result.error is None:
        return []
    where = f" during {result.error.phase}" if result.error.phase else ""
    message = clip((result.error.message.splitlines() or [""])[0], 160)
    return [f"{result.error.category}{where}: {result.error.type}: {message}"]


def _notes(result: TargetResult, run_id: str = "RUN") -> str:
    parts: list[str] = []
    if result.reason:
        parts.append(result.reason)
    parts += _failure(result)
    for check in registered_checks():
        value = result.checks.get(check.name)
        if value is not None:
            parts.extend(guarded(check, "facts", value, result, fallback=[]))
    if result.unknown:
        parts.append("written by a newer bakeoff or an absent plugin: " + ", ".join(sorted(result.unknown)))
    ci = result.speedup_ci
    if ci and not result.is_reference:
        parts.append(
            f"speed {ci['low']:.2f}-{ci['high']:.2f}x (95% CI)"
            + ("" if ci["significant"] else ": no significant difference from eager CPU")
            + (f" ({speed_caveat(result)})" if speed_caveat(result) else "")
        )
    if result.target.is_compiled and result.time_to_first_result_ms is not None:
        parts.append(
            f"time to first result {figure(result.time_to_first_result_ms, 'ms')} "
            f"(prepare {figure(result.prepare_ms or 0.0, 'ms')} + first call {figure(result.first_call_ms, 'ms')})"
        )
    if result.break_even_requests is not None and result.target.is_compiled:
        parts.append(f"pays back its first call after {result.break_even_requests:.0f} request(s)")
    if result.adjustments:
        parts.append("adjustments: " + ", ".join(f"{a['name']}={a['value']}" for a in result.adjustments))
    parts.extend(result.notes)
    spans = spans_fact(result)
    if spans:
        parts.append(spans)
    said = log_fact(result, run_id)
    if said:
        parts.append(said)
    parts.extend(result.noise)
    return "; ".join(parts)


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
                escape(_label(result)),
                escape(line["phase"]),
                escape(line["source"]),
                escape(str(line["count"])),
                escape(line["text"]),
            )
    return Group(table)


def scenarios_view(run: RunResult) -> Table:
    """One row per target and scenario: headline figures with their 95% intervals."""
    table = Table(header_style="bold", title="scenarios (figures with 95% bootstrap intervals)")
    for name, justify in (("target", "left"), ("scenario", "left"), ("status", "left"), ("figures", "left")):
        table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
    table.add_column("ran", justify="right", no_wrap=True)
    table.add_column("peak RSS", justify="right", no_wrap=True)
    for result in run.results:
        for scenario in result.scenarios:
            ok = scenario.status == "ok"
            figures = "; ".join(scenario_figures(result, scenario)) if ok else scenario.reason
            table.add_row(
                escape(_label(result)),
                escape(scenario.name),
                Text(scenario.status, style=_STATUS_STYLE.get(scenario.status, "yellow")),
                escape(figures),
                duration(scenario.run_seconds * 1e3),
                _bytes(scenario.peak_host_rss_bytes),
            )
    return table


_REQUIREMENT_STYLE = {"met": "green", "not_met": "bold red", "not_measured": "yellow", "not_applicable": "dim"}


def requirements_view(run: RunResult) -> Table:
    """Each target against each requirement: verdict, the measured value and its interval."""
    table = Table(header_style="bold", title="requirements")
    for name in ("target", "requirement", "verdict", "measured", "95% interval", "note"):
        table.add_column(name, overflow="fold")
    for result in run.results:
        for check in result.requirements:
            measured, interval = requirement_figures(check)
            state = requirement_state(check)  # one word, the decision's
            note = check["reason"]
            if state == "not conclusive":
                leaning = "met" if check["verdict"] == "met" else "not met"
                note = "; ".join(
                    filter(None, [note, f"the interval straddles the threshold (the estimate: {leaning})"])
                )
            table.add_row(
                escape(_label(result)),
                escape(check["text"]),
                Text(state, style=_REQUIREMENT_STYLE.get(state.replace(" ", "_"), "yellow")),
                measured,
                interval,
                escape(note),
            )
    return table


_LEFT = ("status", "correct", "placement", "requirements")
#: columns of the run table, the first to leave a narrow terminal first
_DROP_ORDER = (
    "max abs err", "on device", "graphs", "p90", "first call", "first result", "peak RSS", "requirements",
    "placement", "status",
)  # fmt: skip
_COST = "cost /1M req"


def _fitting_columns(rows: Sequence[dict[str, Any]], width: int | None) -> list[str]:
    """The run table's columns that fit in ``width`` (all of them when it is None)."""
    columns = list(rows[0]) if rows else []
    if width is None or not columns:
        return columns

    def needed(names: list[str]) -> int:
        widths = [
            max(len(name), *(len(row[name].plain if isinstance(row[name], Text) else str(row[name])) for row in rows))
            for name in names
        ]
        widths[names.index("target")] = max(16, min(widths[names.index("target")], 40))
        return sum(widths) + 3 * len(names) + 1

    for name in _DROP_ORDER:
        if needed(columns) <= width:
            break
        if name in columns:
            columns.remove(name)
    return columns


_OUTCOME = {
    "recommended": ("recommended: ", "bold green"),
    "tie": ("no clear winner, best estimate: ", "bold yellow"),
    "inconclusive": ("inconclusive, best candidate: ", "bold yellow"),
    "none": ("no target qualifies; closest: ", "bold red"),
}


def decision_view(decision: Decision, verbose: bool = True) -> Group:
    """The decision block: the outcome, the lines that say why, what could not run, the rule
    (in one line unless ``verbose``)."""
    said, style = _OUTCOME[decision.outcome]
    head = Text.assemble(("decision ", "bold"), f"(by {decision.basis}) ", (said, style), decision.target or "-")
    lines = [Text(f"  {line}") for line in (decision.lines if verbose else decision.brief_lines())]
    if decision.cost_basis:
        lines.insert(0, Text(f"  cost basis: {decision.cost_basis}"))
    if decision.unmeasured:
        lines.append(Text(f"  not measured here: {'; '.join(decision.unmeasured)}", style="dim"))
    rule = decision.rule if verbose else f"{RULE_BRIEF} (the full rule: --verbose)"
    return Group(head, *lines, Text(f"rule: {rule}", style="dim"))


def plan_view(plan: Plan) -> Group:
    """A plan: what each stage tried and where its evidence is (or why it has none), what the
    budget left untried, the decision over all of them, and what the recommended variant
    changed."""
    over = plan.seconds - plan.budget_s
    lines = [
        Text.assemble(
            ("plan ", "bold"),
            f"{plan.workload}: {duration(plan.seconds * 1e3)} of a {duration(plan.budget_s * 1e3)} budget"
            + (f" (over by {duration(over * 1e3)}, ending a stage stopped at its end)" if over >= 1 else ""),
        )
    ]
    for stage in plan.stages:
        tried = ", ".join(stage.targets) + (f" (buckets {stage.buckets})" if stage.buckets else "")
        if stage.untried:  # why, under "left untried"
            where = "skipped" if stage.skipped else f"stopped after {duration(stage.seconds * 1e3)}"
        else:
            where = f"run {stage.run_id}, {duration(stage.seconds * 1e3)}"
            if stage.estimate_s is not None:
                floor = "at least " if stage is plan.stages[0] else ""  # the first's: its timing alone
                where += f" (estimated {floor}{duration(stage.estimate_s * 1e3)})"
        lines.append(Text(f"  {stage.name}: {tried} [{where}]"))
    lines += [Text(f"  left untried: {line}", style="bold yellow") for line in plan.untried]
    lines += [Text(f"  {note}", style="dim") for note in plan.notes]
    parts: list[Any] = [*lines, decision_view(plan.decision)]
    if plan.decision.outcome in ("recommended", "tie") and plan.decision.target:
        changed = ", ".join(f"{a['name']}={a['value']}" for a in plan.ledger) or "nothing"
        parts.append(Text(f"{plan.decision.target} changes: {changed}"))
    if not any(stage.run_id for stage in plan.stages):
        parts.append(Text("no stage finished: nothing of this plan is stored", style="dim"))
    else:
        shown = f"`bakeoff report --tag {plan.tag} --html plan.html`" if plan.tag else "`bakeoff show RUN_ID`"
        parts.append(Text(f"every finished stage's evidence is stored: {shown}", style="dim"))
    return Group(*parts)


def remedies_view(found: dict[str, list[Remedy]], verbose: bool = True) -> Group:
    """What each target would take, most effect first; a measured remedy says what it did.
    Unless ``verbose``, only each target's first item (the one with most effect)."""
    lines = [Text("what it would take (from this run's evidence)", style="bold")]
    for target, items in found.items():
        shown = items if verbose else items[:1]
        more = f" (+{len(items) - 1} more: --verbose)" if len(items) > len(shown) else ""
        lines.append(Text(f"  {target}:{more}"))
        for item in shown:
            measured = f" [measured: {item.measured}]" if item.measured else " [not measured]"
            lines.append(Text(f"    - {item.kind}: {item.finding} -> {item.change}{measured}"))
    return Group(*lines)


def _header(run: RunResult) -> Text:
    workload = run.workload
    parameters = workload.get("details", {}).get("parameters")
    header = Text.assemble(
        ("run ", "bold"),
        (run.run_id, "bold cyan"),
        f"  {run.created_at[:19].replace('T', ' ')} UTC\n",
        ("workload ", "bold"),
        workload["spec"],
        f"  fingerprint {workload['fingerprint']}  dtype {workload.get('dtype')}",
        f"  params {parameters:,}\n" if isinstance(parameters, int) else "\n",
        ("environment ", "bold"),
        f"torch {run.environment.data.get('torch')}  {run.environment.data.get('cpu')}  "
        f"fingerprint {run.environment.fingerprint}",
    )
    measured = settings_line(run)
    if measured:
        header.append_text(Text.assemble("\n", ("measured ", "bold"), measured))
    return header


def _cost_cell(standing: Standing | None) -> str:
    """A target's cost with its interval, marked when it is a rehearsal; "-" with the reason
    when it has none."""
    cost = standing.cost if standing is not None else None
    if cost is None:
        return f"- ({standing.cost_note})" if standing is not None and standing.cost_note else "-"
    unit = cost.price.currency
    text = f"{unit}{significant(cost.value)}"
    if cost.has_interval and cost.low != cost.high:
        text += f" ({significant(cost.low)}-{significant(cost.high)})"  # type: ignore[arg-type]
    return text + (" (rehearsal)" if cost.rehearsal else "")


def _row(
    result: TargetResult, standing: Standing | None, verbose: bool, priced: bool, required: bool
) -> dict[str, Any]:
    """One target's row: every column with ``verbose``, else the summary's."""
    latency = result.latency
    placement = result.placement
    answers = answers_for(result)
    p50 = duration(latency.p50_ms if latency and latency.count else None)
    correct = Text(answers.correct.word, style=_VERDICT_STYLE.get(answers.correct.word, ""))
    where = Text(answers.placement.word, style=_PLACEMENT_STYLE.get(placement.verdict, "") if placement else "")
    row: dict[str, Any] = {"target": escape(_label(result))}
    if verbose:
        row["status"] = Text(result.status, style=_STATUS_STYLE.get(result.status, ""))
    row["correct"] = correct
    if verbose:
        row["max abs err"] = _err(result.correctness.max_abs_err if result.correctness else None)
    row["placement"] = where
    if verbose:
        row["on device"] = _share(placement if result.status == "ok" else None, cpu=result.target.device == "cpu")
    if required:
        row["requirements"] = Text(answers.requirements.word, style=_ANSWER_STYLE.get(answers.requirements.state, ""))
    row["p50"] = p50
    if verbose:
        row["p90"] = duration(latency.p(90) if latency and latency.count else None)
    row["speed vs cpu"] = _speed(result)
    if priced:
        row[_COST] = _cost_cell(standing)
    if verbose:
        row["first call"] = duration(result.first_call_ms)
        row["graphs"] = _graphs(result)
        row["peak RSS"] = _bytes(result.peak_host_rss_bytes)
    else:
        row["first result"] = duration(result.time_to_first_result_ms)
    return row


_ANSWER_STYLE = {"yes": "green", "no": "bold red", "partly": "bold yellow", "unknown": "yellow", "none": "dim"}


def _summary_facts(run: RunResult) -> list[Text]:
    """The facts the summary keeps beside the table and the decision (which already say why each
    target is ruled out): what the speed figures cannot say, and what the libraries said."""
    lines: list[Text] = []
    for result in run.results:
        said = _failure(result)
        for check in registered_checks():
            value = result.checks.get(check.name)
            if value is not None:
                said += guarded(check, "headline", value, result, fallback=[])
        said += result.notes
        if result.unknown:  # evidence this bakeoff cannot read: the summary must not look complete
            said.append("written by a newer bakeoff or an absent plugin: " + ", ".join(sorted(result.unknown)))
        if said:
            lines.append(Text.assemble((f"{_label(result)}: ", "bold"), "; ".join(said)))
    facts: list[str] = []
    caveats = sorted({speed_caveat(r) for r in run.results if speed_caveat(r)})
    facts += caveats
    ran = [r for r in run.results if r.latency is not None and r.latency.count]
    noisy = [_label(r) for r in ran if any("noisy" in n for n in r.noise)]
    if noisy:
        facts.append(
            f"noisy timings on {len(noisy)} of {len(ran)} targets (their intervals include it; --verbose says how)"
        )
    counts = {_label(r): sum(line["count"] for line in r.log) for r in run.results if r.log}
    if counts:
        most = max(counts, key=lambda k: counts[k])
        what = "lines of script output" if run.workload.get("kind") == "script" else "library messages"
        facts.append(
            f"{sum(counts.values())} {what} from {len(counts)} target(s), most from {most} "
            f"({counts[most]}); `bakeoff show {run.run_id} --log`"
        )
    return [*lines, *(Text(fact) for fact in facts)]


def run_view(
    run: RunResult,
    where: str | None = None,
    width: int | None = None,
    prices: Sequence[Price] | None = None,
    verbose: bool = False,
) -> Group:
    """One run: its identity, the comparison table, the decision and what each target would take,
    and how to find it again. A summary unless ``verbose``: the summary's table leaves out the
    columns of detail, and each target's notes, the scenario and requirement tables are for
    ``verbose``.

    With ``width`` (the terminal's), columns that do not fit are left out, least useful first,
    and a line says so: every figure stays in ``--format json``.
    """
    decision = decide_run(run, prices)
    standings = {s.target: s for s in decision.standings}
    priced = any(s.cost is not None or s.cost_note for s in standings.values())
    required = any(r.requirements for r in run.results)
    rows = [_row(r, standings.get(label_of(r)), verbose, priced, required) for r in run.results]
    columns = _fitting_columns(rows, width)
    table = Table(show_lines=False, header_style="bold")
    for name in columns:
        if name == "target":
            table.add_column(name, overflow="fold", min_width=16)
        else:
            table.add_column(name, justify="left" if name in _LEFT else "right", no_wrap=True)
    for row in rows:
        table.add_row(*(row[name] for name in columns))
    parts: list[Any] = [_header(run)]
    profile = run.settings.get("profile")
    if profile:
        parts.append(
            Text(
                f"profile {profile['source']}: {len(profile['requests'])} requests, "
                f"{len({tuple(r) for r in profile['requests']})} shapes (latency: steady state, "
                "per request; first call: the first request)"
            )
        )
    parts.append(table)
    if verbose:
        for result in run.results:
            said = _notes(result, run.run_id)
            if said:
                parts.append(Text.assemble((f"{_label(result)}: ", "bold"), said))
    else:
        parts += _summary_facts(run)
    if any(s.cost is not None and s.cost.rehearsal for s in standings.values()):
        parts.append(Text(REHEARSAL))
    if width is not None and rows and len(columns) < len(rows[0]):
        hidden = ", ".join(name for name in rows[0] if name not in columns)
        parts.append(Text(f"narrow terminal: {hidden} not shown (widen it, or use --format json)", style="dim"))
    if verbose:
        if any(r.variant != "as-is" for r in run.results):
            parts.append(buckets_view(run))
        if any(s.name != "single-stream" for r in run.results for s in r.scenarios):
            parts.append(scenarios_view(run))
        if required:
            parts.append(requirements_view(run))
        for note in run.workload.get("notes", []) or []:
            parts.append(Text(f"note: {note}", style="dim"))
    legend = (
        "speed vs cpu = eager CPU p50 / target p50, measured in this run (>1 is faster; n.s. = its 95% interval, "
        "the spread between worker processes included, contains 1)."
        if verbose
        else "speed vs cpu = eager CPU p50 / target p50 (>1 faster; n.s.: its 95% interval contains 1); "
        "first result = preparing + first call"
    )
    parts.append(Text(legend, style="dim"))
    parts.append(decision_view(decision, verbose))
    found = what_it_takes(run)
    if found:
        parts.append(remedies_view(found, verbose))
    if not verbose:
        parts.append(
            Text(
                f"each target's notes, the scenarios, requirements and buckets in full: `bakeoff show {run.run_id} "
                "--verbose`",
                style="dim",
            )
        )
    if where:
        parts.append(Text.assemble("stored in ", (where, "bold"), f"; show again with `bakeoff show {run.run_id}`"))
    return Group(*parts)


def history_table(rows: Sequence[RunSummary]) -> Table:
    table = Table(header_style="bold")
    for column in (
        "run",
        "when (UTC)",
        "workload",
        "fingerprint",
        "environment",
        "targets",
        "ok",
        "pass",
        "fail",
        "error",
        "skipped",
    ):
        table.add_column(column, overflow="fold", no_wrap=column != "workload")
    for row in rows:
        table.add_row(
            row.run_id,
            row.created_at[:19].replace("T", " "),
            escape(row.workload_spec),
            row.fingerprint,
            row.environment_fingerprint,
            str(row.targets),
            str(row.ok),
            str(row.passed),
            Text(str(row.failed), style="red" if row.failed else ""),
            Text(str(row.errors), style="red" if row.errors else ""),
            str(row.skipped),
        )
    return table


def targets_view(info: dict[str, list[dict[str, Any]]]) -> Group:
    devices = Table(title="devices", header_style="bold", title_justify="left")
    for column in ("device", "available", "count", "detail"):
        devices.add_column(column)
    for d in info["devices"]:
        devices.add_row(
            d["name"],
            Text("yes", "green") if d["available"] else Text("no", "dim"),
            str(d["count"]),
            escape(d["detail"]),
        )
    backends = Table(title="torch.compile backends", header_style="bold", title_justify="left")
    for column in ("backend", "available", "detail"):
        backends.add_column(column)
    for b in info["backends"]:
        backends.add_row(b["name"], Text("yes", "green") if b["available"] else Text("no", "dim"), escape(b["detail"]))
    usable = [d["name"] for d in info["devices"] if d["available"]]
    example = f"e.g. bakeoff trial arch:llama --on {','.join(usable)},cpu+inductor"
    return Group(devices, backends, Text(f"target syntax: DEVICE[:INDEX][+BACKEND][?option=value&...]; {example}"))


def checks_view(info: list[dict[str, Any]]) -> Group:
    table = Table(title="checks (each runs on every target it applies to)", header_style="bold", title_justify="left")
    for column in ("check", "from", "runs", "options (default)", "requirement metrics"):
        table.add_column(column)
    for check in info:
        options = [
            f"{key}={o['default']}"
            + (f" (>= {o['minimum']})" if o["minimum"] is not None else "")
            + (f": {o['help']}" if o["help"] else "")
            for key, o in check["options"].items()
        ]
        table.add_row(
            escape(check["name"]),
            escape(check["source"]),
            escape(check.get("runs", "always")),
            escape("\n".join(options)) or "-",
            escape(", ".join(check["requirement_metrics"])) or "-",
        )
    return Group(table, Text("set options with --check NAME?key=value, e.g. --check determinism?repeats=5"))


def workloads_view(info: dict[str, Any]) -> Group:
    kinds = Table(title="workload kinds", header_style="bold", title_justify="left")
    kinds.add_column("kind")
    kinds.add_column("syntax")
    for kind, text in info["kinds"].items():
        kinds.add_row(kind, escape(text))
    causal = sorted(n for n, head in info["architectures"].items() if head == "causal_lm")
    base = sorted(n for n, head in info["architectures"].items() if head == "base")
    options = ", ".join(f"{k}={v}" for k, v in info["arch_options"].items())
    return Group(
        kinds,
        Text(f"arch: options (defaults): {options}, or any attribute of the model's config"),
        Text.assemble(("arch: causal language models ", "bold"), f"({len(causal)}): ", ", ".join(causal)),
        Text.assemble(("arch: other models (base model outputs) ", "bold"), f"({len(base)}): ", ", ".join(base)),
    )


def baseline_view(info: BaselineInfo, notes: Sequence[str]) -> Group:
    lines = [
        Text.assemble(("baseline ", "bold"), (info.id, "bold cyan"), f" for {info.workload_spec}"),
        Text(f"fingerprint {info.fingerprint}  seed {info.seed}  created {info.created_at[:19]} UTC"),
        Text(f"references: {', '.join(info.references)}"),
        Text(
            "eager runs agree exactly"
            if info.deterministic
            else f"eager runs differ by up to {info.repeat_max_abs_err:.3g} (nondeterministic)",
            style="green" if info.deterministic else "yellow",
        ),
        Text(f"tensors: {info.path}"),
    ]
    lines.extend(Text(f"note: {n}", style="dim") for n in notes)
    if not notes:
        lines.append(Text("reused the stored baseline (unchanged fingerprint); --refresh recomputes it", style="dim"))
    return Group(*lines)
