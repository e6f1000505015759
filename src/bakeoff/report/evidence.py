"""What an evidence report says, prepared once for every format (HTML, Markdown, JSON).

The three questions a reader asks of each target, answered in plain words from the stored values:
does it run correctly, where did the work run, does it meet the requirements. Rendering lives in
:mod:`bakeoff.report.html` and :mod:`bakeoff.report.markdown`; this module only prepares values.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from bakeoff.analysis.cost import Price
from bakeoff.analysis.requirements import STATES, requirement_state
from bakeoff.checks.placement import engine_notes
from bakeoff.checks.registry import guarded, registered_checks
from bakeoff.env import Environment
from bakeoff.report.figures import correct_word, placement_share, placement_word
from bakeoff.results.codec import run_to_json
from bakeoff.results.strictjson import for_display
from bakeoff.results.values import RunResult, TargetResult
from bakeoff.units import clip, duration
from bakeoff.verdicts.decision import Decision, decide_run
from bakeoff.verdicts.plan import plan_decision, plans_among
from bakeoff.verdicts.regressions import Comparison, Thresholds, find_regressions
from bakeoff.verdicts.remedies import Remedy, what_it_takes

__all__ = [
    "REPORT_SCHEMA",
    "REPORT_SCHEMA_VERSION",
    "Answer",
    "Answers",
    "Evidence",
    "answers_for",
    "build_evidence",
    "readable",
    "render_json",
    "scenario_rows",
]

REPORT_SCHEMA = "bakeoff.report"
REPORT_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Answer:
    """``state``: yes, no, partly, unknown or none (nothing to answer), for colour; ``word``: the
    answer as every format shows it (the terminal's table, HTML, Markdown, JSON); ``text`` says why."""

    state: str
    text: str
    word: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"state": self.state, "word": self.word, "text": self.text}


@dataclass(frozen=True)
class Answers:
    correct: Answer
    placement: Answer
    requirements: Answer

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k).to_dict() for k in ("correct", "placement", "requirements")}


def _first_line(text: str, limit: int = 300) -> str:
    return clip((text.splitlines() or [""])[0], limit)


def _correct(result: TargetResult) -> Answer:
    return replace(_correct_answer(result), word=correct_word(result))


def _correct_answer(result: TargetResult) -> Answer:
    if result.status == "skipped":
        return Answer("unknown", f"not run here: {result.reason}")
    if result.status == "error" and result.error is not None:
        where = f" during {result.error.phase}" if result.error.phase else ""
        return Answer(
            "no",
            f"it failed ({result.error.category}{where}): {result.error.type}: {_first_line(result.error.message)}",
        )
    c = result.correctness
    if c is None:
        return Answer("unknown", "no correctness check was made")
    if c.verdict == "pass":
        if c.sensitivity is not None:  # judged against the float64 golden
            detail = f" as closely as eager matches float64 (it flags a relative bias above {c.sensitivity:.2g})"
        else:
            detail = f" within tolerance {c.tolerance:g}" if c.tolerance is not None else ""
        err = f" (largest difference {c.max_abs_err:.2e})" if c.max_abs_err is not None else ""
        return Answer("yes", f"outputs match the reference {c.reference or 'baseline'}{detail}{err}")
    if c.verdict == "fail":
        return Answer("no", c.reason or f"outputs differ from the reference {c.reference}")
    return Answer("unknown", c.reason or c.verdict)


def _placement(result: TargetResult) -> Answer:
    return replace(_placement_answer(result), word=placement_word(result))


def _placement_answer(result: TargetResult) -> Answer:
    p = result.placement
    if result.status != "ok" or p is None:
        return Answer("unknown", "not audited" if result.status == "ok" else "not run")
    share = placement_share(result)
    notes = engine_notes(p, result)
    if p.verdict == "not_applicable":
        said = ["a CPU target: the work cannot have run anywhere else", *([share] if share else []), *notes]
        return Answer("yes", "; ".join(said))
    if p.verdict == "unknown":  # nothing to place was seen (a script or service that ran no PyTorch op)
        return Answer("unknown", p.explanation or "not measured")
    if p.verdict == "on_device":
        return Answer("yes", "; ".join(["all on the device" + (f" ({share})" if share else ""), *notes]))
    state = "partly" if p.verdict == "fallbacks" else "no"
    return Answer(state, "; ".join(x for x in (p.explanation, share, *notes) if x))


def _requirements(result: TargetResult) -> Answer:
    items = getattr(result, "requirements", None) or ()
    if not items:
        return Answer("none", "no requirements declared", "none set")
    states = [requirement_state(r) for r in items]  # the decision's words: "met" only when conclusive
    met, moot = states.count("met"), states.count("not applicable")
    word = f"{met} of {len(items) - moot} met"
    text = word + (f" ({moot} not applicable)" if moot else "")
    if moot == len(items):
        return Answer("none", text, "not applicable")
    if "not met" in states:
        failed = [r.get("text", "?") for r, state in zip(items, states, strict=True) if state == "not met"]
        return Answer("no", text + "; not met: " + "; ".join(failed), word)
    open_ = [state for state in STATES if state in states and state not in ("met", "not applicable")]
    if open_:  # the short word too: "0 of 1 met" alone reads as a miss
        said = ", ".join(f"{states.count(s)} {s}" for s in open_)
        return Answer("unknown", f"{text}; {said}", f"{word}, {said}")
    return Answer("yes", text, word)


def check_lines(result: TargetResult, detailed: bool = False) -> list[tuple[str, list[str]]]:
    """``(title, lines)`` of every registered check that no question answers and that has
    something to say about ``result`` (its facts, or with ``detailed`` its HTML detail), in the
    registry's order; then what a newer bakeoff wrote that this one cannot read."""

    found = []
    for check in registered_checks():
        value = result.checks.get(check.name)
        if value is None or check.answers:
            continue
        lines = guarded(check, "details" if detailed else "facts", value, result, fallback=[])
        if lines:
            found.append((check.title, lines))
    if result.unknown:
        found.append(("written by a newer bakeoff or an absent plugin", [", ".join(sorted(result.unknown))]))
    return found


def answers_for(result: TargetResult) -> Answers:
    """The three questions for one target, in plain words."""
    return Answers(_correct(result), _placement(result), _requirements(result))


def scenario_rows(result: TargetResult) -> list[dict[str, str]]:
    """One row per scenario a target ran: its status (and why, if it did not run), its headline
    figures with 95% intervals, and its run length and peak memory."""
    from bakeoff.report.figures import human_bytes, scenario_figures

    rows = []
    for scenario in getattr(result, "scenarios", None) or ():
        ok = scenario.status == "ok"
        rows.append(
            {
                "name": scenario.name,
                "status": scenario.status,
                "reason": scenario.reason,
                "series": "; ".join(scenario_figures(result, scenario)) if ok else "",
                "facts": (
                    f"ran {duration(scenario.run_seconds * 1e3)}, peak RSS {human_bytes(scenario.peak_host_rss_bytes)}"
                )
                if ok
                else "",
            }
        )
    return rows


def _note_dict(note: Any) -> dict[str, Any]:
    if isinstance(note, str):
        return {"text": note, "created_at": "", "author": None}
    return {"text": note.text, "created_at": note.created_at, "author": getattr(note, "author", None)}


@dataclass(frozen=True)
class Evidence:
    """Everything a report shows: the runs (oldest first), what people noted and tagged, the
    regressions among them, each run's decision and what each target would take (by run id), and
    for each plan among the runs (by its tag) its stage runs and the decision over all of them."""

    generated_at: str
    selection: str
    database: str
    runs: tuple[RunResult, ...]
    notes: Mapping[str, tuple[dict[str, Any], ...]] = field(default_factory=dict)
    tags: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    regressions: tuple[Comparison, ...] = ()
    thresholds: Thresholds = field(default_factory=Thresholds)
    decisions: Mapping[str, Decision] = field(default_factory=dict)
    remedies: Mapping[str, Mapping[str, list[Remedy]]] = field(default_factory=dict)
    plans: Mapping[str, tuple[tuple[str, ...], Decision]] = field(default_factory=dict)

    @property
    def environments(self) -> dict[str, Environment]:
        """Each distinct environment, by fingerprint, in order of first use."""
        found: dict[str, Environment] = {}
        for run in self.runs:
            found.setdefault(run.environment.fingerprint, run.environment)
        return found

    def comparison_for(self, run_id: str, result: TargetResult) -> Comparison | None:
        """The regression check whose later side is this result, if any."""
        return next(
            (
                c
                for c in self.regressions
                if c.after_run == run_id and c.target == result.target.spec and c.variant == result.variant
            ),
            None,
        )

    def series(self) -> dict[tuple[str, str, str], list[tuple[RunResult, TargetResult]]]:
        """Each workload + target + variant over time: its runs, oldest first."""
        found: dict[tuple[str, str, str], list[tuple[RunResult, TargetResult]]] = {}
        for run in self.runs:
            for result in run.results:
                found.setdefault((run.workload["spec"], result.target.spec, result.variant), []).append((run, result))
        return found

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": REPORT_SCHEMA,
            "schema_version": REPORT_SCHEMA_VERSION,
            "generated_at": self.generated_at,
            "selection": self.selection,
            "database": self.database,
            "thresholds": self.thresholds.to_dict(),
            "runs": [
                {
                    **run_to_json(run),
                    "notes": list(self.notes.get(run.run_id, ())),
                    "tags": list(self.tags.get(run.run_id, ())),
                    "answers": {f"{r.target.spec}|{r.variant}": answers_for(r).to_dict() for r in run.results},
                    **({"decision": self.decisions[run.run_id].to_dict()} if run.run_id in self.decisions else {}),
                    "what_it_takes": {
                        t: [i.to_dict() for i in items] for t, items in self.remedies.get(run.run_id, {}).items()
                    },
                }
                for run in self.runs
            ],
            "regressions": [c.to_dict() for c in self.regressions],
            "plans": [
                {"tag": tag, "runs": list(run_ids), "decision": decision.to_dict()}
                for tag, (run_ids, decision) in self.plans.items()
            ],
        }


def readable(run: RunResult) -> RunResult:
    """``run`` as every renderer reads it: a latency stored without a single sample (its samples
    lost, or a document written so) is no latency, since no figure can be derived from it. Any
    other run is returned as it is."""
    if all(r.latency is None or r.latency.count for r in run.results):
        return run
    return replace(
        run,
        results=tuple(
            replace(r, latency=None) if r.latency is not None and not r.latency.count else r for r in run.results
        ),
    )


def build_evidence(
    runs: Sequence[RunResult],
    *,
    notes: Mapping[str, Sequence[Any]] | None = None,
    tags: Mapping[str, Sequence[str]] | None = None,
    selection: str = "",
    database: str = "",
    thresholds: Thresholds | None = None,
    generated_at: str | None = None,
    prices: Sequence[Price] | None = None,
) -> Evidence:
    """Order the runs, attach notes and tags, find the regressions among them and decide each
    run (priced by ``prices``; None: by the prices each run was given). Each run is read as
    :func:`readable` gives it."""
    ordered = tuple(sorted((readable(r) for r in runs), key=lambda r: (r.created_at, r.run_id)))
    t = thresholds or Thresholds()
    return Evidence(
        generated_at=generated_at or datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        selection=selection,
        database=database,
        runs=ordered,
        notes={k: tuple(_note_dict(n) for n in v) for k, v in (notes or {}).items()},
        tags={k: tuple(v) for k, v in (tags or {}).items()},
        regressions=tuple(find_regressions(ordered, t)),
        thresholds=t,
        # a fit map or a distributed check measures no speed against a baseline: its answer is its
        # own, with its requirements; no decision is made and no speed remedy offered
        decisions={run.run_id: decide_run(run, prices) for run in ordered if not _answers_alone(run)},
        remedies={run.run_id: what_it_takes(run) for run in ordered if not _answers_alone(run)},
        plans={
            tag: (tuple(r.run_id for r in stages), plan_decision(stages))
            for tag, stages in plans_among(ordered, tags or {}).items()
        },
    )


def render_json(evidence: Evidence) -> str:
    """The machine-readable report: schema ``bakeoff.report``, the run documents, derived answers
    and regressions."""

    return json.dumps(for_display(evidence.to_dict()), indent=1, default=str, allow_nan=False) + "\n"


def _answers_alone(run: RunResult) -> bool:
    """A run whose answer is its own (``bakeoff fit``, ``bakeoff dist``), not a comparison of speed."""
    return run.workload.get("kind") in ("fit", "dist")
