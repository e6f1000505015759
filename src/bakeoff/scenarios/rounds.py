"""Scenarios in rounds: how many a trial runs, the load the first round sets for the rest,
and one result per scenario from its rounds.

A trial runs round ``k`` of every target's scenarios before round ``k + 1`` of any, rotating
the order (see :func:`bakeoff.runner.trial`), so a busy spell falls on every target alike.
The reference runs the first round first: the server load it sweeps there (its rates, its
bound, its highest rate within the bound) is the load every other target, and its own later
rounds, run at (:meth:`~bakeoff.scenarios.base.Scenario.aligned`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bakeoff.scenarios.base import ScenarioResult, ScenarioSpec
from bakeoff.scenarios.registry import scenario_named

__all__ = ["FirstRound", "align", "aligned_specs", "in_round", "merge_rounds", "scenario_rounds"]


def scenario_rounds(specs: Sequence[ScenarioSpec]) -> int:
    """How many rounds ``specs`` need: the most any of them asks for (training runs once,
    last, in the checks' step: it changes the model)."""
    return max(
        (int(spec.options.get("rounds") or 1) for spec in specs if not scenario_named(spec.name).runs_last), default=0
    )


def in_round(spec: ScenarioSpec, index: int) -> bool:
    """Whether ``spec`` runs in round ``index`` (counted from 0)."""
    return not scenario_named(spec.name).runs_last and index < int(spec.options.get("rounds") or 1)


class FirstRound:
    """The reference's first round, seen as the finished result :meth:`Scenario.aligned`
    reads (``status`` and ``scenario(name)``); ``None`` results: its session had failed."""

    def __init__(self, results: Sequence[ScenarioResult] | None) -> None:
        self.status = "ok" if results is not None else "error"
        self.scenarios = tuple(results or ())

    def scenario(self, name: str) -> ScenarioResult | None:
        return next((s for s in self.scenarios if s.name == name), None)


def aligned_specs(specs: Sequence[ScenarioSpec], reference: Any) -> tuple[ScenarioSpec, ...]:
    """The scenarios a target runs, each aligned to the reference's result (the server load it
    swept), so that no two targets, and no two rounds, run under different conditions."""
    return tuple(scenario_named(spec.name).aligned(spec, reference) for spec in specs)


def align(session: Any, reference: Any) -> None:
    """Give a started session (local, or in its worker) its scenarios aligned to ``reference``
    (:func:`aligned_specs`), telling it only when they change."""
    aligned = aligned_specs(session.job.scenarios, reference)
    if aligned != session.job.scenarios:
        session.use_scenarios(aligned)


def merge_rounds(results: Sequence[ScenarioResult]) -> list[ScenarioResult]:
    """One result per scenario, in the order each first ran, from the results of its rounds."""
    by_name: dict[str, list[ScenarioResult]] = {}
    for result in results:
        by_name.setdefault(result.name, []).append(result)
    return [scenario_named(name).merge(rounds) for name, rounds in by_name.items()]
