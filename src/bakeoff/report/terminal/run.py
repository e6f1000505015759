"""One run on the terminal: its header, the comparison table, the facts beside it, and the rest.

:func:`run_view` is what ``bakeoff trial`` and ``bakeoff show`` print: the run's identity, one
row per target (the summary's columns, or every column with ``verbose``; columns that do not fit
a narrow terminal are left out, least useful first), each target's notes or the summary's
facts, the detail tables (:mod:`.sections`), the decision and what each target would take
(:mod:`.decision`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Group
from rich.table import Table

from bakeoff.analysis.cost import Price
from bakeoff.checks.registry import guarded, registered_checks
from bakeoff.report.evidence import answers_for
from bakeoff.report.figures import human_bytes as _bytes
from bakeoff.report.figures import log_fact, settings_line, spans_fact, speed_caveat
from bakeoff.report.printable import Shown as Text  # every line shows the control characters of stored text
from bakeoff.report.printable import escape
from bakeoff.report.terminal.decision import decision_view, remedies_view
from bakeoff.report.terminal.dist import dist_view
from bakeoff.report.terminal.fit import fit_view
from bakeoff.report.terminal.sections import STATUS_STYLE, buckets_view, requirements_view, scenarios_view, target_label
from bakeoff.results.values import Placement, RunResult, TargetResult
from bakeoff.scenarios.dist import dist_of
from bakeoff.scenarios.fit import fit_of
from bakeoff.units import clip, duration, figure, significant
from bakeoff.verdicts.decision import REHEARSAL, Standing, decide_run, label_of
from bakeoff.verdicts.remedies import what_it_takes

__all__ = ["run_view"]

_VERDICT_STYLE = {
    "pass": "green",
    "fail": "bold red",
    "not comparable": "yellow",
    "error": "bold red",
    "not run": "dim",
}
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


def _graphs(result: TargetResult) -> str:
    compilation = result.compilation
    if compilation is None:
        return "-"
    text = str(compilation.graphs)
    if compilation.recompiles:
        text += f" ({compilation.recompiles} recompiles)"
    return text


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


_LEFT = ("status", "correct", "placement", "requirements")
#: columns of the run table, the first to leave a narrow terminal first
_DROP_ORDER = (
    "max abs err", "on device", "graphs", "p90", "first call", "first result", "peak RSS", "ready", "p99",
    "requirements",
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
    result: TargetResult, standing: Standing | None, verbose: bool, priced: bool, required: bool, service: bool = False
) -> dict[str, Any]:
    """One target's row: every column with ``verbose``, else the summary's. A ``service`` run's
    latencies are from each request's scheduled send, under load: its row has p99 and the
    service's start-up (``ready``) instead of a trial's speed ratio, first result and graphs."""
    latency = result.latency
    placement = result.placement
    answers = answers_for(result)
    p50 = duration(latency.p50_ms if latency and latency.count else None)
    correct = Text(answers.correct.word, style=_VERDICT_STYLE.get(answers.correct.word, ""))
    where = Text(answers.placement.word, style=_PLACEMENT_STYLE.get(placement.verdict, "") if placement else "")
    row: dict[str, Any] = {"target": escape(target_label(result))}
    if verbose:
        row["status"] = Text(result.status, style=STATUS_STYLE.get(result.status, ""))
    row["correct"] = correct
    if verbose:
        row["max abs err"] = _err(result.correctness.max_abs_err if result.correctness else None)
    row["placement"] = where
    if verbose:
        row["on device"] = _share(placement if result.status == "ok" else None, cpu=result.target.device == "cpu")
    if required:
        row["requirements"] = Text(answers.requirements.word, style=_ANSWER_STYLE.get(answers.requirements.state, ""))
    row["p50"] = p50
    if verbose or service:
        row["p90"] = duration(latency.p(90) if latency and latency.count else None)
    if service:
        row["p99"] = duration(latency.p(99) if latency and latency.count else None)
        if priced:
            row[_COST] = _cost_cell(standing)
        lifecycle = (result.scenarios[0].facts.get("lifecycle") or {}) if result.scenarios else {}
        ready = lifecycle.get("ready_s")
        row["ready"] = duration(ready * 1e3 if ready is not None else None)
        return row
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
            lines.append(Text.assemble((f"{target_label(result)}: ", "bold"), "; ".join(said)))
    facts: list[str] = _asked_not_run(run)
    caveats = sorted({speed_caveat(r) for r in run.results if speed_caveat(r)})
    facts += caveats
    ran = [r for r in run.results if r.latency is not None and r.latency.count]
    noisy = [target_label(r) for r in ran if any("noisy" in n for n in r.noise)]
    if noisy:
        facts.append(
            f"noisy timings on {len(noisy)} of {len(ran)} targets (their intervals include it; --verbose says how)"
        )
    counts = {target_label(r): sum(line["count"] for line in r.log) for r in run.results if r.log}
    if counts:
        most = max(counts, key=lambda k: counts[k])
        what = "lines of script output" if run.workload.get("kind") == "script" else "library messages"
        facts.append(
            f"{sum(counts.values())} {what} from {len(counts)} target(s), most from {most} "
            f"({counts[most]}); `bakeoff show {run.run_id} --log`"
        )
    return [*lines, *(Text(fact) for fact in facts)]


def _asked_not_run(run: RunResult) -> list[str]:
    """A line for each check the user asked for (``--check NAME``) that ran on no target, with
    each target's reason: a question asked must not go unanswered in silence."""
    asked = [str(text).partition("?")[0] for text in (run.settings or {}).get("checks") or ()]
    lines = []
    for name in dict.fromkeys(asked):
        if any(name in r.checks for r in run.results):
            continue
        why = [f"{target_label(r)}: {r.skipped_checks[name]}" for r in run.results if name in r.skipped_checks]
        lines.append(f"--check {name} ran on no target" + (f" ({'; '.join(why)})" if why else ""))
    return lines


def run_view(
    run: RunResult,
    where: str | None = None,
    width: int | None = None,
    prices: Sequence[Price] | None = None,
    verbose: bool = False,
    db_flag: str = "",
) -> Group:
    """One run: its identity, the comparison table, the decision and what each target would take,
    and how to find it again (``db_flag``: the ``--db`` its hints need, from
    :func:`~bakeoff.store.connection.db_flag`). A summary unless ``verbose``: the summary's table leaves out the
    columns of detail, and each target's notes, the scenario and requirement tables are for
    ``verbose``.

    With ``width`` (the terminal's), columns that do not fit are left out, least useful first,
    and a line says so: every figure stays in ``--format json``.
    """
    if run.workload.get("kind") in ("fit", "dist"):
        return _answer_run(run, where, db_flag)
    decision = decide_run(run, prices)
    standings = {s.target: s for s in decision.standings}
    priced = any(s.cost is not None or s.cost_note for s in standings.values())
    required = any(r.requirements for r in run.results)
    service = run.workload.get("kind") == "service"
    rows = [_row(r, standings.get(label_of(r)), verbose, priced, required, service) for r in run.results]
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
                parts.append(Text.assemble((f"{target_label(result)}: ", "bold"), said))
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
        "p50, p90, p99: latency under the traffic, from each request's scheduled send; ready: the service's "
        "start, from its process's start to its first healthy answer"
        if service
        else "speed vs cpu = eager CPU p50 / target p50, measured in this run (>1 is faster; n.s. = its 95% interval, "
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
                f"--verbose{db_flag}`",
                style="dim",
            )
        )
    if where:
        parts.append(stored_line(where, run.run_id, db_flag))
    return Group(*parts)


def stored_line(where: str, run_id: str, db_flag: str = "") -> Text:
    """Where a run was stored, and the command that shows it again."""
    return Text.assemble("stored in ", (where, "bold"), f"; show again with `bakeoff show {run_id}{db_flag}`")


def _answer_run(run: RunResult, where: str | None, db_flag: str = "") -> Group:
    """A stored ``bakeoff fit`` map or ``bakeoff dist`` answer: its header, then the answer as the
    command printed it (neither times the workload against a baseline: the trial's table and
    decision would say nothing)."""
    parts: list[Any] = [_header(run)]
    for result in run.results:
        if run.workload.get("kind") == "dist":
            found_dist = dist_of(result.scenario("dist"))
            unreadable = Text(f"{target_label(result)}: the distributed answer is unreadable")
            parts.append(dist_view(found_dist) if found_dist is not None else unreadable)
            continue
        found = fit_of(result.scenario("fit"))
        unreadable = Text(f"{target_label(result)}: the fit map is unreadable")
        parts.append(fit_view(found) if found is not None else unreadable)
    if where:
        parts.append(stored_line(where, run.run_id, db_flag))
    return Group(*parts)
