"""What a plan tried and what it recommends (the plan itself runs in :mod:`bakeoff.runner.plan`)."""

from __future__ import annotations

from dataclasses import dataclass

from bakeoff.codec import Value
from bakeoff.verdicts.decision import Decision

__all__ = ["Plan", "Stage"]


@dataclass(frozen=True)
class Stage(Value):
    """One stage: what it tried (target specs, and the bucket plan), the run that holds its
    evidence (empty when it was skipped, ``skipped`` says why) and its wall time."""

    name: str
    targets: tuple[str, ...]
    buckets: str | None = None
    run_id: str = ""
    seconds: float = 0.0
    skipped: str = ""


@dataclass(frozen=True)
class Plan(Value):
    """What a plan tried and what it recommends: ``ledger`` lists the recommended variant's
    adjustments (what it changed), ``budget_s`` the budget and ``seconds`` the time taken;
    ``tag`` is the tag every stage's run carries (``bakeoff report --tag TAG`` shows them
    together)."""

    workload: str
    stages: tuple[Stage, ...]
    decision: Decision
    ledger: tuple[dict, ...] = ()
    budget_s: float = 0.0
    seconds: float = 0.0
    tag: str = ""
