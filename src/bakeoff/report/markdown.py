"""The Markdown evidence report, for pull requests and issue trackers.

Every value from a user or a model is escaped: ``<`` and ``&`` become entities (hosts render
inline HTML, and no tag can start without ``<``), ``|`` is escaped inside tables and line breaks become spaces.
"""

from __future__ import annotations

from typing import Any

from bakeoff.analysis.requirements import SINGLE_OBSERVATION
from bakeoff.report.evidence import Answer, Evidence, answers_for, check_lines, scenario_rows
from bakeoff.report.figures import requirement_figures, speed_caveat
from bakeoff.results.values import TargetResult
from bakeoff.units import duration
from bakeoff.verdicts.decision import Decision

__all__ = ["md", "render_markdown"]


def _mark(answer: Answer) -> str:
    """An answer's word (the one every format uses), in bold where the answer is no."""
    return f"**{md(answer.word)}**" if answer.state == "no" else md(answer.word)


def md(value: Any) -> str:
    """A value as safe Markdown text (inline, table-cell safe)."""
    text = str(value).replace("&", "&amp;").replace("<", "&lt;")  # no tag can start; ">" alone is harmless
    for raw, escaped in (("\\", "\\\\"), ("|", "\\|"), ("`", "\\`"), ("*", "\\*"), ("_", "\\_"), ("[", "\\[")):
        text = text.replace(raw, escaped)
    return " ".join(text.split())


def _label(result: TargetResult) -> str:
    return result.target.spec + (f" [{result.variant}]" if result.variant != "as-is" else "")


def _speed(result: TargetResult) -> str:
    if result.speedup is None:
        return "-"
    ci = result.speedup_ci or {}
    if result.is_reference or not ci:
        return f"{result.speedup:.2f}x"
    caveat = f" ({speed_caveat(result)})" if speed_caveat(result) else ""
    return (
        f"{result.speedup:.2f}x ({ci['low']:.2f}-{ci['high']:.2f})"
        + ("" if ci.get("significant") else " n.s.")
        + caveat
    )


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return [*lines, ""]


_SAID = {
    "recommended": "recommended",
    "tie": "no clear winner; best estimate",
    "inconclusive": "inconclusive; best candidate",
    "none": "no target qualifies; closest",
}


def decision_markdown(decision: Decision) -> list[str]:
    """The decision block: outcome, why (each line with its figure), what could not run, the rule."""
    out = [f"**Decision** (by {decision.basis}): {_SAID[decision.outcome]}: **{md(decision.target or '-')}**", ""]
    out += [f"- {md(line)}" for line in decision.lines]
    if decision.unmeasured:
        out.append(f"- not measured here: {md('; '.join(decision.unmeasured))}")
    return [*out, "", f"_Rule: {md(decision.rule)}_", ""]


def render_markdown(evidence: Evidence) -> str:
    """Tables per run and target, requirements, placement, failures and regressions."""
    out = [
        "# bakeoff evidence report",
        "",
        f"Selection: {md(evidence.selection)}; {len(evidence.runs)} run(s) in {len(evidence.environments)} "
        f"environment(s); generated {evidence.generated_at[:19].replace('T', ' ')} UTC.",
        "",
    ]
    if evidence.regressions:
        out += ["## Since the previous environment", ""]
        rows = []
        for c in evidence.regressions:
            changed = [
                f"{md(m.metric)}: {md(m.outcome)}" + (f" ({md(m.detail)})" if m.detail else "")
                for m in c.metrics
                if m.outcome in ("regressed", "improved", "failed")
            ]
            what = md(c.reason) if c.outcome == "not_comparable" else "; ".join(changed) or "-"
            target = c.target + (f" [{c.variant}]" if c.variant != "as-is" else "")
            outcome = f"**{c.outcome}**" if c.outcome in ("regressed", "failed") else c.outcome
            rows.append(
                [
                    md(c.workload),
                    md(target),
                    outcome.replace("_", " "),
                    what,
                    md(c.environment.summary()),
                    f"{md(c.before_run)} -> {md(c.after_run)}",
                ]
            )
        out += _table(["workload", "target", "outcome", "what changed", "environment change", "runs"], rows)
    for tag, (run_ids, decision) in evidence.plans.items():
        out += [
            f"## Plan {md(tag)}",
            "",
            f"Stage runs: {', '.join(md(r) for r in run_ids)}; the decision over all of them:",
            "",
        ]
        out += decision_markdown(decision)
    for run in reversed(evidence.runs):
        env = run.environment
        out += [
            f"## {md(run.workload['spec'])}: run {md(run.run_id)}",
            "",
            f"{md(run.created_at[:19].replace('T', ' '))} UTC; workload fingerprint {md(run.fingerprint)}; "
            f"environment {env.fingerprint} (torch {md(env.data.get('torch', '?'))}, {md(env.data.get('cpu', '?'))}).",
            "",
        ]
        tags = evidence.tags.get(run.run_id, ())
        if tags:
            out += ["Tags: " + ", ".join(md(t) for t in tags), ""]
        for note in evidence.notes.get(run.run_id, ()):
            out += [f"> {md(note['text'])}", ""]
        rows = []
        for r in run.results:
            a = answers_for(r)
            latency = r.latency.p50_ms if r.latency and r.latency.count else None
            rows.append(
                [
                    md(_label(r)),
                    md(r.status),
                    _mark(a.correct),
                    _mark(a.placement),
                    _mark(a.requirements),
                    duration(latency),
                    _speed(r),
                    duration(r.first_call_ms),
                ]
            )
        out += _table(
            [
                "target",
                "status",
                "correct",
                "placement",
                "requirements",
                "p50",
                "speed vs eager CPU (95% CI)",
                "first call",
            ],
            rows,
        )
        decision = evidence.decisions.get(run.run_id)
        if decision is not None:
            out += decision_markdown(decision)
        found = evidence.remedies.get(run.run_id, {})
        if found:
            out += ["**What it would take** (from this run's evidence)", ""]
            for target, items in found.items():
                out.append(f"- {md(target)}:")
                out += [
                    f"  - {md(i.kind)}: {md(i.finding)} -> {md(i.change)} "
                    + (f"(measured: {md(i.measured)})" if i.measured else "(not measured)")
                    for i in items
                ]
            out.append("")
        details = []
        for r in run.results:
            a = answers_for(r)
            lines = [
                f"- correct: {_mark(a.correct)}: {md(a.correct.text)}",
                f"- placement: {_mark(a.placement)}: {md(a.placement.text)}",
            ]
            if r.placement is not None and r.placement.host_ops:
                ops = ", ".join(f"{md(k)} x{md(v)}" for k, v in r.placement.host_ops.items())
                lines.append(f"- host ops: {ops}")
            lines += [f"- {md(title)}: {md('; '.join(facts))}" for title, facts in check_lines(r)]
            for q in getattr(r, "requirements", None) or ():
                measured, interval = requirement_figures(q)
                verdict = str(q.get("verdict", "?")).replace("_", " ")
                reason = q.get("reason") or ""
                if interval == SINGLE_OBSERVATION:  # said once, beside the value
                    reason = reason.removeprefix(f"{SINGLE_OBSERVATION}: ").removeprefix("no interval")
                within = (
                    ""
                    if interval == "-"
                    else f", {interval}"
                    if interval == SINGLE_OBSERVATION
                    else f", 95% interval {md(interval)}"
                )
                lines.append(
                    f"- requirement {md(q.get('text', '?'))}: **{md(verdict)}** (measured {md(measured)}"
                    f"{within}{', confident' if q.get('confident') else ', not confident'}"
                    f"{'; ' + md(reason) if reason else ''})"
                )
            for row in scenario_rows(r):
                measured = "; ".join(x for x in (row["series"], row["facts"]) if x) or "-"
                status = row["status"] + (f": {row['reason']}" if row["reason"] else "")
                lines.append(f"- scenario {md(row['name'])} ({md(status)}): {md(measured)}")
            if r.adjustments:
                lines.append("- adjustments: " + ", ".join(f"{md(x['name'])}={md(x['value'])}" for x in r.adjustments))
            if r.error is not None:
                lines.append(
                    f"- **failure** ({md(r.error.category)}{', ' + md(r.error.phase) if r.error.phase else ''}): "
                    f"{md(r.error.type)}: {md((r.error.message.splitlines() or [''])[0][:300])}"
                )
            details += [f"**{md(_label(r))}**", "", *lines, ""]
        out += details
    return "\n".join(out).rstrip() + "\n"
