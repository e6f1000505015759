"""Coverage of a population of workloads on a target: the grade ladder, the figures, the reasons.

Each *cell* (one workload on one target) gets the highest grade of :data:`GRADES` it reached,
every lower grade included; the grade after it is where it stopped, with the reason read from
the evidence the trial stored (the error, the placement audit, the correctness check, the
compile watch). A coverage figure is the share of the population at a grade or higher, always
given with the population it counts (its name, unit, size, transformers version, date).
Failures are clustered by a normalised reason: the unsupported op, else the exception type
and its message with numbers, names and paths blanked, else the verdict and its first reason,
so that "aten::foo not implemented: 12 architectures" is one line.

What a grade cannot see: ``on_device`` is the placement audit's verdict (a target with no
audit, such as one whose placement check was skipped, stops at ``runs``); ``correct`` is the
correctness check against the stored baseline on the workload's one input; ``compiles_clean``
is judged on that input only (no input profile in a sweep unless asked) and passes eager targets
through; ``generates_same`` is the greedy check's tokens from the workload's one prompt (a
sweep asks for it on every cell; without it a cell stops at ``compiles_clean``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bakeoff.checks.greedy import SAME as SAME_TOKENS
from bakeoff.results.values import TargetResult
from bakeoff.units import clip

__all__ = [
    "GRADES",
    "GRADE_MEANING",
    "Cell",
    "Coverage",
    "cluster_reasons",
    "coverage_figures",
    "grade_cell",
    "reason_key",
]

#: The grade ladder, lowest first.
GRADES = ("builds", "runs", "on_device", "correct", "compiles_clean", "generates_same")
GRADE_MEANING = {
    "builds": "the workload was built and the target prepared it (placed, cast, compiled lazily)",
    "runs": "the target ran the workload's forward pass without an error",
    "on_device": "the placement audit found the work on the target (a CPU target passes as not_applicable)",
    "correct": "outputs within tolerance of the preserved eager baseline (the correctness check's pass)",
    "compiles_clean": "no graph breaks, recompiles or recompile-limit hits where compiled (eager targets pass)",
    "generates_same": "greedy tokens identical to the reference's, or parted only at a near tie (the greedy "
    "check; workloads that are not language models pass)",
}
#: Phases of a target session before its first forward pass ended.
_BEFORE_RUN = ("build", "prepare")
_FIRST_CALL = ("first call", "compile and first call")


@dataclass(frozen=True)
class Cell:
    """One workload on one target: the grade reached and why it went no higher.

    ``grade`` is ``None`` when even ``builds`` was not reached, ``"skipped"`` for a target that
    cannot run here. ``reason`` explains the stop (empty at the top grade); ``key`` is its
    cluster (see :func:`reason_key`); ``category`` the error category where one was raised.
    """

    workload: str
    target: str
    grade: str | None
    reason: str = ""
    key: str = ""
    category: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def reached(self, grade: str) -> bool:
        if self.grade in (None, "skipped"):
            return False
        return GRADES.index(self.grade) >= GRADES.index(grade)

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "target": self.target,
            "grade": self.grade,
            "reason": self.reason,
            "reason_key": self.key,
            "category": self.category,
        }


_OP = re.compile(r"aten::[A-Za-z0-9_.]+")
_BLANKS = (
    (re.compile(r"\b(?:arch|hf|py):\S*?(?=:?(?:\s|$))"), "<workload>"),  # the workload's own name
    (re.compile(r"(/[\w.\-]+){2,}"), "<path>"),
    (re.compile(r"0x[0-9a-fA-F]+"), "<hex>"),
    (re.compile(r"'[^']*'|\"[^\"]*\""), "'…'"),
    (re.compile(r"\b\d+(\.\d+)?(e[-+]?\d+)?\b"), "N"),
    (re.compile(r"\s+"), " "),
)


def reason_key(error_type: str, message: str) -> str:
    """The cluster of one failure: ``aten::op not implemented`` when a named ATen op could not
    run, else the type with its first message line normalised (numbers, quoted names, paths)."""
    first = (message.strip().splitlines() or [""])[0]
    ops = _OP.findall(message)
    if ops and re.search(r"not implemented|could not run|no kernel|unsupported|not supported", message, re.I):
        return f"{ops[0]} not implemented ({error_type})"
    for pattern, blank in _BLANKS:
        first = pattern.sub(blank, first)
    return f"{error_type}: {clip(first.strip(), 160)}" if first.strip() else error_type


def _pattern(text: str) -> str:
    """A message's cluster pattern without an exception type."""
    return reason_key("", text).lstrip(": ")


def _stop(workload: str, target: str, grade: str | None, reason: str, key: str, category: str = "") -> Cell:
    return Cell(workload, target, grade, reason, key or reason, category)


def grade_cell(
    workload: str, result: TargetResult | None, build_error: dict[str, Any] | None = None, target: str = ""
) -> Cell:
    """The grade one target reached on one workload (``result`` None: the workload did not build,
    ``build_error`` says why, with its ``category`` when the process building it died, hung or
    ran out of memory, and the cell of every ``target`` of the sweep says so alike)."""
    if result is None:
        error = build_error or {}
        kind, message = error.get("type", "error"), error.get("message", "the workload did not build")
        key = "workload: " + reason_key(kind, message)
        return _stop(workload, target, None, f"{kind}: {message}", key, error.get("category", ""))
    target = result.target.spec
    if result.status == "skipped":
        return Cell(workload, target, "skipped", result.reason or "cannot run here", "skipped")
    if result.status == "error" and result.error is not None:
        err = result.error
        if err.phase in _BEFORE_RUN or err.phase.startswith("worker"):
            reached = None  # the target never had the workload prepared
        elif err.phase in _FIRST_CALL:
            reached = "builds"
        else:
            reached = "runs"  # the forward pass ran; something after it failed (timing, a check)
        return _stop(
            workload,
            target,
            reached,
            f"{err.type} in {err.phase}: {err.message}",
            reason_key(err.type, err.message),
            err.category,
        )
    placement = result.placement
    if placement is None:
        return _stop(workload, target, "runs", "no placement audit", "placement not audited")
    if placement.verdict not in ("on_device", "not_applicable"):
        ops = {**placement.fallback_ops, **placement.host_ops}
        top = max(ops, key=lambda k: ops[k]) if ops else ""
        key = f"placement {placement.verdict}" + (f": {top}" if top else "")
        return _stop(workload, target, "runs", f"placement {placement.verdict}: {placement.explanation}", key)
    correctness = result.correctness
    if correctness is None or correctness.verdict != "pass":
        verdict = correctness.verdict if correctness is not None else "not checked"
        why = correctness.reason if correctness is not None else ""
        head = (why.split(";")[0].split(":")[0]).strip() if why else ""
        return _stop(
            workload,
            target,
            "on_device",
            f"correctness {verdict}" + (f": {why}" if why else ""),
            f"correctness {verdict}" + (f": {_pattern(head)}" if head else ""),
        )
    compilation = result.compilation
    if result.target.is_compiled and compilation is not None:
        if compilation.graph_breaks or compilation.recompiles or compilation.recompile_limit_hits:
            breaks = [b.get("reason", "") for b in compilation.graph_break_reasons]
            if compilation.graph_breaks:
                first = breaks[0] if breaks else "graph break"
                return _stop(
                    workload,
                    target,
                    "correct",
                    f"{compilation.graph_breaks} graph break(s): {first}",
                    "graph break: " + _pattern(first),
                )
            why = (compilation.recompile_reasons or ("recompiled",))[0]
            return _stop(
                workload,
                target,
                "correct",
                f"{compilation.recompiles} recompile(s): {why}",
                "recompile: " + _pattern(why),
            )
    elif result.target.is_compiled:
        return _stop(workload, target, "correct", "compiled but not watched", "compilation not watched")
    greedy = result.checks.get("greedy")
    if greedy is None:
        return _stop(workload, target, "compiles_clean", "greedy decoding not compared", "greedy decoding not compared")
    if greedy.verdict not in SAME_TOKENS:
        key = "greedy tokens differ" if greedy.verdict == "differs" else f"greedy decoding {greedy.verdict}"
        if greedy.verdict == "error":
            key += ": " + _pattern(greedy.reason)
        return _stop(workload, target, "compiles_clean", f"greedy decoding {greedy.verdict}: {greedy.reason}", key)
    return Cell(workload, target, GRADES[-1])


def coverage_figures(cells: Iterable[Cell], population: int) -> dict[str, dict[str, Any]]:
    """Per target and grade: cells at that grade or higher, and their share of ``population``."""
    by_target: dict[str, list[Cell]] = {}
    for cell in cells:
        by_target.setdefault(cell.target, []).append(cell)
    figures: dict[str, dict[str, Any]] = {}
    for target, group in by_target.items():
        skipped = sum(1 for c in group if c.grade == "skipped")
        figures[target] = {
            "cells": len(group),
            "skipped": skipped,
            "grades": {
                grade: {
                    "count": (n := sum(1 for c in group if c.reached(grade))),
                    "share": n / population if population else None,
                }
                for grade in GRADES
            },
        }
    return figures


def cluster_reasons(cells: Sequence[Cell]) -> list[dict[str, Any]]:
    """Failures grouped by reason, most frequent first: the count of workloads, the targets and
    the grade each stopped after."""
    groups: dict[str, dict[str, Any]] = {}
    for cell in cells:
        if cell.grade == GRADES[-1] or cell.grade == "skipped":
            continue
        group = groups.setdefault(
            cell.key, {"reason": cell.key, "example": cell.reason, "workloads": [], "targets": [], "stopped_at": []}
        )
        if cell.workload not in group["workloads"]:
            group["workloads"].append(cell.workload)
        if cell.target and cell.target not in group["targets"]:
            group["targets"].append(cell.target)
        stopped = cell.grade or "none"
        if stopped not in group["stopped_at"]:
            group["stopped_at"].append(stopped)
    return sorted(
        ({**g, "count": len(g["workloads"])} for g in groups.values()), key=lambda g: (-g["count"], g["reason"])
    )


@dataclass(frozen=True)
class Coverage:
    """A sweep's matrix and what it adds up to (see the module docstring).

    ``population`` is the stored description (name, unit, source, size, transformers version,
    date); ``pending`` the workloads not stored yet (an interrupted sweep); ``cells`` every
    stored workload on every target, in population order.
    """

    sweep_id: str
    created_at: str
    population: dict[str, Any]
    targets: tuple[str, ...]
    cells: tuple[Cell, ...]
    pending: tuple[str, ...] = ()
    packages: dict[str, str] = field(default_factory=dict)  # versions where the sweep ran

    @property
    def size(self) -> int:
        return int(self.population.get("size") or len(self.population.get("specs", ())))

    @property
    def figures(self) -> dict[str, dict[str, Any]]:
        return coverage_figures(self.cells, self.size)

    @property
    def reasons(self) -> list[dict[str, Any]]:
        return cluster_reasons(self.cells)

    def grid(self) -> dict[str, dict[str, Cell]]:
        """workload -> target -> cell."""
        rows: dict[str, dict[str, Cell]] = {}
        for cell in self.cells:
            rows.setdefault(cell.workload, {})[cell.target] = cell
        return rows

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": "bakeoff.coverage",
            "sweep_id": self.sweep_id,
            "created_at": self.created_at,
            "population": {k: v for k, v in self.population.items() if k != "specs"},
            "targets": list(self.targets),
            "packages": dict(self.packages),
            "grades": {g: GRADE_MEANING[g] for g in GRADES},
            "figures": self.figures,
            "pending": list(self.pending),
            "cells": [c.to_dict() for c in self.cells],
            "reasons": self.reasons,
        }
