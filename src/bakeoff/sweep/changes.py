"""What changed between two sweeps of one population: the cells that started or stopped working,
and, for every cell both sweeps ran, each metric of the two runs compared.

This is how a transformers, torch or backend upgrade shows up across a whole fleet: the grade
of each cell is classified against the earlier sweep's (``regressed``, ``improved``, ``new``,
``missing``, or unchanged as ``pass`` / ``expected_failure``, see
:func:`~bakeoff.sweep.expect.classify`), and the two runs of a cell are compared metric by
metric like any two runs (:func:`~bakeoff.verdicts.regressions.compare_pair`: correctness,
placement, compilation, the checks, latency only where both sides have enough samples, which a
sweep timed with ``--timing none`` does not).

A cell whose workload no longer builds has no run to compare: it shows only as a grade that
regressed, which is why the grades come first. Without an explicit earlier sweep, the newest
sweep started before this one with the same population name and a target in common is used.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bakeoff.errors import SpecError
from bakeoff.results.values import RunResult
from bakeoff.store.db import Store
from bakeoff.store.sweeps import SweepRecord
from bakeoff.sweep.expect import Expectation, classify, grades_of
from bakeoff.sweep.results import load_coverage
from bakeoff.verdicts.coverage import Coverage

if TYPE_CHECKING:
    from bakeoff.verdicts.regressions import Comparison, Thresholds

__all__ = ["SweepChanges", "changed_packages", "previous_sweep", "since", "sweep_changes"]


def changed_packages(before: Coverage, after: Coverage) -> dict[str, tuple[str | None, str | None]]:
    """Library versions that differ between two sweeps: name -> (before, after)."""
    return {
        name: (before.packages.get(name), after.packages.get(name))
        for name in sorted(set(before.packages) | set(after.packages))
        if before.packages.get(name) != after.packages.get(name)
    }


def since(before: Coverage, after: Coverage) -> str:
    """``sweep ID (what changed: torch a -> b, ...)``, the label of a comparison of two sweeps."""
    changed = ", ".join(f"{k} {a or '-'} -> {b or '-'}" for k, (a, b) in changed_packages(before, after).items())
    return f"sweep {before.sweep_id} ({changed or 'same library versions'})"


@dataclass(frozen=True)
class SweepChanges:
    """A sweep against an earlier one: ``cells`` (every grade classified against the earlier
    grade) and ``metrics`` (each cell's run against the earlier run, target by target)."""

    sweep: Coverage
    against: Coverage
    cells: tuple[Expectation, ...]
    metrics: tuple[Comparison, ...]

    @property
    def changed_packages(self) -> dict[str, tuple[str | None, str | None]]:
        """Library versions that differ between the two sweeps: name -> (before, after)."""
        return changed_packages(self.against, self.sweep)

    @property
    def regressed(self) -> bool:
        """A cell's grade went down, or a metric of a cell both sweeps ran regressed or failed."""
        return any(c.status == "regressed" for c in self.cells) or any(
            m.outcome in ("regressed", "failed") for m in self.metrics
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": "bakeoff.sweep_changes",
            "sweep_id": self.sweep.sweep_id,
            "against": self.against.sweep_id,
            "population": self.sweep.population.get("name"),
            "changed_packages": {k: list(v) for k, v in self.changed_packages.items()},
            "regressed": self.regressed,
            "cells": [c.to_dict() for c in self.cells],
            "metrics": [m.to_dict() for m in self.metrics],
        }


def previous_sweep(store: Store, record: SweepRecord) -> SweepRecord | None:
    """The newest sweep started before ``record`` with its population name and a shared target
    (each earlier sweep is read only until one matches)."""
    name = record.population.get("name")
    for sweep_id in store.sweep_ids(before=record.created_at):
        earlier = store.get_sweep(sweep_id)
        if earlier.population.get("name") == name and set(earlier.targets) & set(record.targets):
            return earlier
    return None


def _metric_changes(
    store: Store, before: SweepRecord, after: SweepRecord, t: Thresholds | None, get_run: Callable[[str], RunResult]
) -> list[Comparison]:
    from bakeoff.verdicts.regressions import compare_pair

    runs_before = {c.workload_spec: c.run_id for c in store.sweep_cells(before.id) if c.run_id}
    targets = [t for t in after.targets if t in before.targets]
    found = []
    for cell in store.sweep_cells(after.id):
        earlier_id = runs_before.get(cell.workload_spec)
        if cell.run_id is None or earlier_id is None:
            continue
        earlier, later = get_run(earlier_id), get_run(cell.run_id)
        for target in targets:
            try:
                a, b = earlier.result(target), later.result(target)
            except KeyError:  # not in one of the runs: its grade says why
                continue
            if a.status == "skipped" or b.status == "skipped":
                continue
            found.append(compare_pair(earlier, a, later, b, t))
    return found


def sweep_changes(
    store: Store, sweep_id: str, against: str | None = None, thresholds: Thresholds | None = None
) -> SweepChanges:
    """``sweep_id`` against ``against`` (or the sweep before it of the same population).

    Raises:
        StoreError: an unknown or ambiguous sweep id.
        SpecError: no earlier sweep to compare with, or two sweeps with no target in common.
    """
    record = store.get_sweep(store.resolve_sweep_id(sweep_id))
    if against is None:
        earlier = previous_sweep(store, record)
        if earlier is None:
            name = record.population.get("name")
            raise SpecError(
                f"no sweep of {name} before {record.id} with a target in common to compare with",
                hint="name one with --against SWEEP_ID (bakeoff sweeps lists them)",
            )
    else:
        earlier = store.get_sweep(store.resolve_sweep_id(against))
        if not set(earlier.targets) & set(record.targets):
            raise SpecError(
                f"sweeps {earlier.id} and {record.id} have no target in common",
                hint="compare sweeps run on the same targets",
            )
    get_run = functools.cache(store.get_run)  # every run is read once, for its grade and its metrics
    now, before = load_coverage(store, record.id, get_run), load_coverage(store, earlier.id, get_run)
    shared = set(now.targets) & set(before.targets)
    grades = {target: table for target, table in grades_of(before).items() if target in shared}
    cells = [c for c in classify(now, grades) if c.target in shared]
    metrics = _metric_changes(store, earlier, record, thresholds, get_run)
    return SweepChanges(now, before, tuple(cells), tuple(metrics))
