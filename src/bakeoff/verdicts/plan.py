"""What a plan tried and what it recommends (the plan itself runs in :mod:`bakeoff.runner.plan`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bakeoff.codec import Value
from bakeoff.results.values import RunResult
from bakeoff.verdicts.decision import Decision, decide_runs

__all__ = ["PLAN_TAG", "Plan", "Stage", "plan_decision", "plans_among"]

#: A plan tags each stage's run ``plan-`` + the first stage's run id.
PLAN_TAG = "plan-"


@dataclass(frozen=True)
class Stage(Value):
    """One stage: what it tried (target specs, and the bucket plan), the run that holds its
    evidence and its wall time. ``estimate_s`` is what the plan expected it to take before it
    started (from what earlier stages measured; for the first, what its timing alone needs) and
    ``left_s`` what was left of the budget then. A stage that did not fit is ``skipped`` (no
    run); one the budget ran out in is ``stopped`` (no run either: its trial never returned).
    Both say why."""

    name: str
    targets: tuple[str, ...]
    buckets: str | None = None
    run_id: str = ""
    seconds: float = 0.0
    skipped: str = ""
    estimate_s: float | None = None
    left_s: float | None = None
    stopped: str = ""

    @property
    def untried(self) -> str:
        """Why this stage's targets were left untried ("" when it ran)."""
        return self.skipped or self.stopped


@dataclass(frozen=True)
class Plan(Value):
    """What a plan tried and what it recommends: ``ledger`` lists the recommended variant's
    adjustments (what it changed), ``budget_s`` the budget and ``seconds`` the time taken, which
    exceeds the budget by at most ``tolerance_s`` (the time to end a stage stopped at the
    budget's end, and to decide); ``untried`` says what the budget left untried, and why;
    ``notes`` what the budget's enforcement could not do here. ``tag`` is the tag every stage's
    run carries (``bakeoff report --tag TAG`` shows them together)."""

    workload: str
    stages: tuple[Stage, ...]
    decision: Decision
    ledger: tuple[dict, ...] = ()
    budget_s: float = 0.0
    seconds: float = 0.0
    tag: str = ""
    untried: tuple[str, ...] = ()
    tolerance_s: float = 0.0
    notes: tuple[str, ...] = ()


def plan_decision(runs: Sequence[RunResult]) -> Decision:
    """The decision over a plan's stage runs (in the order they ran), as the plan took it: with
    the prices the first stage was given, and the eager reference a candidate only where the
    user listed it among the targets (a run stores ``reference_added`` when the trial added it)."""
    listed = not (runs and runs[0].settings.get("reference_added", False))
    return decide_runs(runs, reference_candidate=listed)


def plans_among(runs: Sequence[RunResult], tags: Mapping[str, Sequence[str]]) -> dict[str, list[RunResult]]:
    """The plans whose stage runs are among ``runs`` (``tags`` by run id): each plan's tag and
    its runs, oldest first."""
    found: dict[str, list[RunResult]] = {}
    for run in sorted(runs, key=lambda r: (r.created_at, r.run_id)):
        for tag in tags.get(run.run_id, ()):
            if tag.startswith(PLAN_TAG):
                found.setdefault(tag, []).append(run)
    return found
