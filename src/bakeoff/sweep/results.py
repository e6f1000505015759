"""A stored sweep read back as its coverage (:class:`~bakeoff.verdicts.coverage.Coverage`).

Grades are judged now, from each cell's stored run, never stored themselves: a later release
that grades better judges old sweeps the same way as new ones.
"""

from __future__ import annotations

from collections.abc import Callable

from bakeoff.results.values import RunResult
from bakeoff.store.db import Store
from bakeoff.verdicts.coverage import Cell, Coverage, grade_cell

__all__ = ["load_coverage"]


def load_coverage(store: Store, sweep_id: str, get_run: Callable[[str], RunResult] | None = None) -> Coverage:
    """The matrix of a stored sweep (``sweep_id`` may be a unique prefix); ``get_run`` reads a
    cell's run (by default from ``store``: a caller that reads the runs again passes a cache)."""
    get_run = get_run or store.get_run
    record = store.get_sweep(store.resolve_sweep_id(sweep_id))
    rows = store.sweep_cells(record.id)
    cells: list[Cell] = []
    for row in rows:
        if row.run_id is None:
            cells.extend(grade_cell(row.workload_spec, None, row.error, target) for target in record.targets)
            continue
        run = get_run(row.run_id)
        by_target = {r.target.spec: r for r in run.results if r.variant == "as-is"}
        for target in record.targets:  # the reference the trial added stays out unless listed
            result = by_target.get(target)
            missing = {"type": "missing", "message": f"the run has no result for {target}"}
            cells.append(grade_cell(row.workload_spec, result, missing, target))
    stored = {row.workload_spec for row in rows}
    return Coverage(
        sweep_id=record.id,
        created_at=record.created_at,
        population=record.population,
        targets=record.targets,
        cells=tuple(cells),
        pending=tuple(spec for spec in record.specs if spec not in stored),
        packages=dict(record.environment.data.get("packages") or {}),
    )
