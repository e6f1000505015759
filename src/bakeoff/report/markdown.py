"""The Markdown evidence report, for pull requests and issue trackers.

Every value from a user or a model is escaped: ``<`` and ``&`` become entities (hosts render
inline HTML, and no tag can start without ``<``), ``|`` is escaped inside tables and line breaks become spaces.

It is meant to be pasted as a comment, so it fits GitHub's limit on one (:data:`GITHUB_LIMIT`
characters) whatever the runs hold. A report that fits is left as it is. One that does not is
cut in this order, each step only as far as it must go: the longest detail lines (a target's
details, a note, what a target would take) are shortened, none below :data:`MIN_LINE`
characters; then whole target details are dropped, the largest first; then the older runs,
oldest first; then the newest run's remedies and notes (and what was dropped is put back, the
last dropped first, wherever it still fits); as a last resort the text is cut at a line. The
report's head, the regressions, the plans' decisions and the newest run's summary
table and decision are kept whole until that last resort. A closing line says what was left
out and where to see it all (the HTML report, ``bakeoff show RUN --verbose``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from bakeoff.analysis.requirements import SINGLE_OBSERVATION, requirement_state
from bakeoff.report.evidence import Answer, Evidence, answers_for, check_lines, scenario_rows
from bakeoff.report.figures import confidence_of, requirement_figures, speed_caveat
from bakeoff.results.values import TargetResult
from bakeoff.scenarios.dist import DistResult, dist_of
from bakeoff.scenarios.fit import FitResult, fit_of, map_rows
from bakeoff.units import clip, duration, human_bytes
from bakeoff.verdicts.decision import Decision

__all__ = ["GITHUB_LIMIT", "MIN_LINE", "github_length", "md", "render_markdown"]

#: GitHub's limit on the body of a comment (and of an issue or a pull request), in characters.
GITHUB_LIMIT = 65_536
#: Detail lines are not shortened below this many characters: past that, details are dropped whole.
MIN_LINE = 200
#: Room kept for the closing line that says what was left out (it is bounded well below this).
_CLOSING_ROOM = 2_000
_SHORTENED = " … (shortened)"


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
    "nothing": "nothing to decide",
}


def decision_markdown(decision: Decision) -> list[str]:
    """The decision block: outcome, why (each line with its figure), what could not run, the rule."""
    if decision.said == "nothing":
        out = [f"**Decision**: {_SAID['nothing']}", ""]
    else:
        out = [f"**Decision** (by {decision.basis}): {_SAID[decision.outcome]}: **{md(decision.target or '-')}**", ""]
    if decision.cost_basis:
        out.append(f"- cost basis: {md(decision.cost_basis)}")
    out += [f"- {md(line)}" for line in decision.lines]
    if decision.unmeasured:
        out.append(f"- not measured here: {md('; '.join(decision.unmeasured))}")
    return [*out, "", f"_Rule: {md(decision.rule)}_", ""]


def github_length(text: str) -> int:
    """How long GitHub may count ``text``: its UTF-16 code units (a browser's count, two for a
    character outside the Basic Multilingual Plane) with every line break counted twice (a
    browser's form sends it as CRLF). Never less than Python's ``len``."""
    return len(text.encode("utf-16-le")) // 2 + text.count("\n")


@dataclass
class _Part:
    """A run of the report's lines and what may happen to it when the report is too long.

    ``kind``: ``keep`` (the head, the regressions, the plans; a run's heading, summary table and
    decision), ``details`` (one target's), ``remedies`` or ``notes`` (a run's); ``run`` the run
    id it belongs to (empty: the report's own); ``label`` the target, for details; ``shorten``:
    its long lines may be shortened.
    """

    lines: list[str]
    kind: str = "keep"
    run: str = ""
    label: str = ""
    shorten: bool = False
    dropped: bool = False


def render_markdown(evidence: Evidence, limit: int = GITHUB_LIMIT) -> str:
    """Tables per run and target, requirements, placement, failures and regressions, within
    ``limit`` characters as :func:`github_length` counts them (see the module docstring)."""
    parts = _parts(evidence)
    text = _join(_lines(parts, None))
    if github_length(text) <= limit:
        return text
    return _fit(parts, evidence, limit)


def _parts(evidence: Evidence) -> list[_Part]:
    head = [
        "# bakeoff evidence report",
        "",
        f"Selection: {md(evidence.selection)}; {len(evidence.runs)} run(s) in {len(evidence.environments)} "
        f"environment(s); generated {evidence.generated_at[:19].replace('T', ' ')} UTC.",
        "",
    ]
    if evidence.regressions:
        head += ["## Since the previous environment", ""]
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
        head += _table(["workload", "target", "outcome", "what changed", "environment change", "runs"], rows)
    for tag, (run_ids, decision) in evidence.plans.items():
        head += [
            f"## Plan {md(tag)}",
            "",
            f"Stage runs: {', '.join(md(r) for r in run_ids)}; the decision over all of them:",
            "",
        ]
        head += decision_markdown(decision)
    parts = [_Part(head)]
    for run in reversed(evidence.runs):
        parts += _run_parts(evidence, run)
    return parts


def _run_parts(evidence: Evidence, run: Any) -> list[_Part]:
    env, rid = run.environment, run.run_id
    out = [
        f"## {md(run.workload['spec'])}: run {md(rid)}",
        "",
        f"{md(run.created_at[:19].replace('T', ' '))} UTC; workload fingerprint {md(run.fingerprint)}; "
        f"environment {env.fingerprint} (torch {md(env.data.get('torch', '?'))}, {md(env.data.get('cpu', '?'))}).",
        "",
    ]
    tags = evidence.tags.get(rid, ())
    if tags:
        out += ["Tags: " + ", ".join(md(t) for t in tags), ""]
    parts = [_Part(out, run=rid)]
    notes = [line for note in evidence.notes.get(rid, ()) for line in (f"> {md(note['text'])}", "")]
    if notes:
        parts.append(_Part(notes, "notes", rid, shorten=True))
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
    header = ["target", "status", "correct", "placement", "requirements", "p50", "speed vs eager CPU (95% CI)"]
    out = _table([*header, "first call"], rows)
    decision = evidence.decisions.get(rid)
    if decision is not None:
        out += decision_markdown(decision)
    parts.append(_Part(out, run=rid))
    found = evidence.remedies.get(rid, {})
    if found:
        out = ["**What it would take** (from this run's evidence)", ""]
        for target, items in found.items():
            out.append(f"- {md(target)}:")
            out += [
                f"  - {md(i.kind)}: {md(i.finding)} -> {md(i.change)} "
                + (f"(measured: {md(i.measured)})" if i.measured else "(not measured)")
                for i in items
            ]
        out.append("")
        parts.append(_Part(out, "remedies", rid, shorten=True))
    for r in run.results:
        lines = [f"**{md(_label(r))}**", "", *_detail_lines(r), ""]
        label = _label(r) + (f" in run {rid}" if len(evidence.runs) > 1 else "")
        parts.append(_Part(lines, "details", rid, label, shorten=True))
    return parts


def _detail_lines(r: TargetResult) -> list[str]:
    """One target's details: its answers, host ops, checks, requirements, scenarios, ledger, failure."""
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
        verdict = requirement_state(q)  # "met" only when conclusive, as the decision reads it
        reason = q.get("reason") or ""
        if interval == SINGLE_OBSERVATION:  # said once, beside the value
            reason = reason.removeprefix(f"{SINGLE_OBSERVATION}: ").removeprefix("no interval")
        within = (
            ""
            if interval == "-"
            else f", {interval}"
            if interval == SINGLE_OBSERVATION
            else f", {confidence_of(q) * 100:g}% interval {md(interval)}"
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
    fitted = fit_of(r.scenario("fit"))
    if fitted is not None and fitted.points:
        lines += ["", *_fit_table(fitted)]
    spread = dist_of(r.scenario("dist"))
    if spread is not None:
        lines += ["", *_dist_tables(spread)]
    if r.adjustments:
        lines.append("- adjustments: " + ", ".join(f"{md(x['name'])}={md(x['value'])}" for x in r.adjustments))
    if r.error is not None:
        lines.append(
            f"- **failure** ({md(r.error.category)}{', ' + md(r.error.phase) if r.error.phase else ''}): "
            f"{md(r.error.type)}: {md(clip((r.error.message.splitlines() or [''])[0], 300))}"
        )
    return lines


def _dist_tables(found: DistResult) -> list[str]:
    """Each world size of a distributed check: every collective's verdict with its error against
    its allowance, its latency percentiles, tail and bus bandwidth."""
    lines: list[str] = []

    def figure(value: float | None, form: str) -> str:
        return "-" if value is None else format(value, form)

    for world in found.worlds:
        if not world.cells:
            continue
        rows = [
            [md(c.op), md(c.dtype or "-"), md(human_bytes(c.size)) if c.size else "-", f"**{md(c.verdict)}**",
             "-" if c.max_error is None else f"{c.max_error:.3g} / {c.tolerance:g}", figure(c.p50_us, ".0f"),
             figure(c.p99_us, ".0f"), figure(c.tail, ".1f"), figure(c.busbw_gbs, ".3g")]
            for c in world.cells
        ]  # fmt: skip
        lines += [f"Collectives at {world.world} ranks ({md(world.backend)}): error in ulp against the allowance", ""]
        lines += _table(["collective", "dtype", "size", "verdict", "error", "p50 us", "p99 us", "p99/p50", "bus GB/s"],
                        rows)  # fmt: skip
    return lines


def _fit_table(fitted: FitResult) -> list[str]:
    """The fit map: one row per sequence length, one column per batch, each cell the peak
    (measured where a probe ran, marked \\*) and whether it fits."""
    batches, grid = map_rows(fitted)
    rows = [
        ["own" if seq is None else str(seq)]
        + [
            ""
            if point is None
            else md(point.word()) + ("\\*" if point.measured is not None else "") + ("" if point.fits else " **no**")
            for point in points
        ]
        for seq, points in grid
    ]
    capacity = md(human_bytes(fitted.capacity))
    caption = f"Peak per point, capacity {capacity} (\\*: measured on the target; **no**: does not fit)"
    return [caption, "", *_table(["seq \\ batch", *(str(b) for b in batches)], rows)]


# -- fitting GitHub's limit ----------------------------------------------------------------------


def _shorten(line: str, cap: int) -> str:
    """``line`` in at most ``cap`` characters, cut at a word where one is near, marked as
    shortened; never ending inside an escape, an entity or a bold span."""
    if len(line) <= cap:
        return line
    keep = line[: max(cap - len(_SHORTENED) - 2, 0)]
    space = keep.rfind(" ")
    if space > len(keep) // 2:
        keep = keep[:space]
    keep = re.sub(r"&[a-z]*$", "", keep)  # half an entity
    if (len(keep) - len(keep.rstrip("\\"))) % 2:  # a backslash that would escape what follows
        keep = keep[:-1]
    keep = keep.rstrip()
    if keep.count("**") % 2:  # md() escapes every "*": each "**" is the report's own bold
        keep += "**"
    return keep + _SHORTENED


def _lines(parts: list[_Part], cap: int | None) -> list[str]:
    return [
        _shorten(line, cap) if cap is not None and part.shorten else line
        for part in parts
        if not part.dropped
        for line in part.lines
    ]


def _join(lines: list[str]) -> str:
    return "\n".join(lines).rstrip() + "\n"


def _size(parts: list[_Part], cap: int | None) -> int:
    return sum(_part_size(part, cap) for part in parts if not part.dropped)


def _part_size(part: _Part, cap: int | None) -> int:
    """The part's length with a line break after each line, its lines shortened to ``cap``."""
    return sum(github_length(_shorten(line, cap) if cap and part.shorten else line) + 2 for line in part.lines)


def _best_cap(parts: list[_Part], budget: int) -> tuple[int | None, bool]:
    """The largest line cap (None: none) at which the parts fit ``budget``, and whether any does:
    only the longest lines are shortened."""
    if _size(parts, None) <= budget:
        return None, True
    longest = max((len(line) for p in parts if p.shorten and not p.dropped for line in p.lines), default=0)
    if longest <= MIN_LINE or _size(parts, MIN_LINE) > budget:
        return MIN_LINE, False
    low, high = MIN_LINE, longest  # fits at low, not at high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if _size(parts, middle) <= budget else (low, middle)
    return low, True


def _fit(parts: list[_Part], evidence: Evidence, limit: int) -> str:
    """The report within ``limit``: the steps of the module docstring, each only as far as needed.

    Parts are dropped (each at its shortest) until the rest fits; then those dropped are put
    back, the last dropped first, wherever they still fit: dropping goes by kind, so a large
    part's going can leave room for smaller ones dropped before it.
    """
    budget = limit - _CLOSING_ROOM
    cap, fits = _best_cap(parts, budget)
    floor = [_part_size(part, MIN_LINE) for part in parts]  # each part as short as it gets
    total = sum(floor)
    whole = [sum(map(len, part.lines)) for part in parts]  # the longest details go first
    by_run: dict[str, list[int]] = {}
    for index, part in enumerate(parts):
        by_run.setdefault(part.run, []).append(index)
    older = [run.run_id for run in evidence.runs[:-1]]  # oldest first; the newest stays
    units = [
        *([i] for i in sorted((i for i, p in enumerate(parts) if p.kind == "details"), key=lambda i: -whole[i])),
        *(by_run.get(rid, []) for rid in older),
        *([i] for i, p in enumerate(parts) if p.kind == "remedies"),
        *([i] for i, p in enumerate(parts) if p.kind == "notes"),
    ]
    dropped: list[list[int]] = []
    for unit in units:
        if fits or total <= budget:
            break
        unit = [i for i in unit if not parts[i].dropped]
        for i in unit:
            parts[i].dropped = True
        total -= sum(floor[i] for i in unit)
        dropped.append(unit)
    if not fits and total <= budget:
        for unit in reversed(dropped):
            size = sum(floor[i] for i in unit)
            head = by_run[parts[unit[0]].run][0] if unit else 0  # a run's heading: its details go with it
            if unit and total + size <= budget and (parts[unit[0]].kind == "keep" or not parts[head].dropped):
                for i in unit:
                    parts[i].dropped = False
                total += size
        cap, fits = _best_cap(parts, budget)
    lines, cut_at = _lines(parts, cap), None
    if not fits:  # the summary alone is too long: cut at a line
        size = 0
        for index, line in enumerate(lines):
            size += github_length(line) + 2
            if size > budget:
                lines, cut_at = lines[:index], index
                break
    closing = _closing(parts, evidence, cap, cut_at, limit)
    text = _join([*lines, *closing])
    while github_length(text) > limit and lines:  # not reached: the closing lines are bounded
        lines = lines[:-1]
        text = _join([*lines, *closing])
    return text


def _named(names: list[str], most: int = 8) -> str:
    """The first ``most`` names (each cut to 80 characters) and how many more: bounded."""
    shown = ", ".join(md(n if len(n) <= 80 else n[:79] + "…") for n in names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def _closing(parts: list[_Part], evidence: Evidence, cap: int | None, cut_at: int | None, limit: int) -> list[str]:
    """What was left out, and where to see all of it."""
    left = []
    if cap is not None:
        shortened = sum(len(line) > cap for p in parts if p.shorten and not p.dropped for line in p.lines)
        if shortened:
            left.append(f"{shortened} long line(s) shortened to {cap} characters, each marked “(shortened)”")
    runs = [r.run_id for r in evidence.runs]
    shown = {p.run for p in parts if not p.dropped}
    gone = [rid for rid in runs if rid not in shown]
    kept = [p for p in parts if p.run in shown]
    details = [p.label for p in kept if p.kind == "details" and p.dropped]
    if details:
        left.append(f"the details of {len(details)} target(s): {_named(details)}")
    if gone:
        left.append(f"{len(gone)} older run(s): {_named(list(reversed(gone)))}")
    for kind, said in (("remedies", "“What it would take”"), ("notes", "the notes")):
        dropped = [p.run for p in kept if p.kind == kind and p.dropped]
        if dropped:
            left.append(f"{said} of run {_named(dropped)}")
    if cut_at is not None:
        left.append(f"everything after line {cut_at} (the summary alone is longer than the limit)")
    show = f"`bakeoff show {runs[-1]} --verbose`" if len(runs) == 1 else "`bakeoff show RUN --verbose` for one run"
    fit = f"GitHub's {limit:,}-character limit for a comment" if limit == GITHUB_LIMIT else f"{limit:,} characters"
    return [
        "",
        "---",
        "",
        f"_Left out to fit {fit}: {'; '.join(left) or 'nothing'}. See all of it in the HTML report "
        f"(`bakeoff report --html FILE` with the same selection) or with {show}._",
    ]
