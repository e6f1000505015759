"""Running a sweep: every pending workload of a stored sweep, one cell at a time, each stored
as it finishes.

The local executor (:mod:`bakeoff.sweep.local_executor`) runs each workload as a trial in a
warm *cell runner* process, where the workload is built and its baseline computed, with every
target in a warm worker of the runner's :class:`~bakeoff.runner.isolation.SessionPool`: a worker
per target imports torch and transformers once and serves that target for the whole sweep, and
one that crashed, hung (``timeout_s``) or was killed for memory is replaced, the failure becoming
that cell's result with its category. A workload that does not build is a cell with the reason
and no run; one whose build crashes, hangs or runs out of memory ends the runner, is that
cell's failure, and a fresh runner goes on.

A sweep is created (:func:`create_sweep`) before anything runs, with its population, targets
and trial keywords, so :func:`run_sweep` can resume it after an interruption with the same
settings: only workloads without a stored cell run, and a cell goes in with its run in one
transaction, only if no other process stored that workload first.

The ``ray`` executor (:mod:`bakeoff.sweep.ray_executor`) runs the same cells
(:func:`~bakeoff.sweep.cell.run_cell`) as Ray tasks instead. Either hands each finished cell back
here to be stored the same way: how a sweep runs is a property of the invocation, not of the
sweep, so one started locally may be resumed on Ray.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bakeoff.env import capture_environment
from bakeoff.errors import BakeoffError, SpecError
from bakeoff.results.values import RunResult
from bakeoff.settings import TrialSettings
from bakeoff.settings.sweep import STORED_KEYWORDS
from bakeoff.store.db import Store
from bakeoff.store.sweeps import SweepRecord
from bakeoff.sweep.population import Population
from bakeoff.target.spec import Target, parse_target
from bakeoff.verdicts.coverage import GRADES, grade_cell

__all__ = ["EXECUTORS", "CellDone", "cell_error", "create_sweep", "run_sweep", "sweep_options"]

#: Where the cells run: worker processes of this machine, or tasks of a Ray cluster.
EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class CellDone:
    """What the progress display hears before the first cell (``spec`` empty) and after each."""

    sweep_id: str
    spec: str
    done: int
    total: int
    failures: int
    stored: bool
    grades: dict[str, str | None]
    seconds: float


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")


def sweep_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """A sweep's trial keywords, checked, with the greedy check every cell needs added.

    Raises:
        SpecError: a keyword a sweep does not take, or a bad value (a check, an option, a switch).
    """
    unknown = sorted(set(options) - set(STORED_KEYWORDS))
    if unknown:
        raise SpecError(f"a sweep does not take {unknown[0]!r}", hint="use " + ", ".join(STORED_KEYWORDS))
    checks = [str(c) for c in options.get("checks") or ()]
    if not any(c.split("?")[0] == "greedy" for c in checks):
        checks.insert(0, "greedy")  # the top of the grade ladder needs it on every cell
    options = {**options, "checks": checks}
    TrialSettings.from_options(**options)  # every value checked before the sweep exists
    return options


def create_sweep(
    store: Store, population: Population, targets: Sequence[Target], options: Mapping[str, Any]
) -> SweepRecord:
    """Check the settings and store a new sweep (nothing runs yet).

    Raises:
        SpecError: a keyword a sweep does not take, or a bad value (nothing is stored then).
    """
    options = sweep_options(options)
    sweep_id = uuid.uuid4().hex[:12]
    stored = {k: list(v) if isinstance(v, tuple | list) else v for k, v in options.items()}
    store.create_sweep(sweep_id, _now(), population.to_dict(), [t.spec for t in targets], stored, capture_environment())
    return store.get_sweep(sweep_id)


def _settings(record: SweepRecord) -> TrialSettings:
    return TrialSettings.from_options(**record.settings)


def _targets(record: SweepRecord) -> list[Target]:
    from bakeoff.target.detect import extra_devices

    return [parse_target(spec, extra_devices=extra_devices()) for spec in record.targets]


def _failed(run: RunResult | None, error: dict | None, spec: str) -> tuple[int, dict[str, str | None]]:
    if run is None:
        return 1, {}
    grades = {r.target.spec: grade_cell(spec, r).grade for r in run.results if r.variant == "as-is"}
    return int(any(g not in (GRADES[-1], "skipped") for g in grades.values())), grades


def cell_error(exc: Exception) -> dict[str, Any]:
    """A workload that did not build (or whose baseline failed) as the cell's stored error."""
    if isinstance(exc, BakeoffError):
        return {"type": type(exc).__name__, "message": exc.message, "hint": exc.hint}
    # a builder's own bug is this cell's failure, not the sweep's
    return {"type": type(exc).__name__, "message": (str(exc).splitlines() or [""])[0][:500]}


def preload_for(specs: Sequence[str]) -> tuple[str, ...]:
    """What a warm worker imports before its first session, for a sweep of these workloads:
    what any of them needs (:func:`bakeoff.runner.workers.preload_for`) except one architecture's
    own modeling module, which a worker imports when it first serves that architecture."""
    from bakeoff.runner.workers import preload_for as for_one
    from bakeoff.workload.base import parse_workload

    modules: dict[str, None] = {}
    for spec in specs:
        modules.update(dict.fromkeys(for_one(parse_workload(spec), model_module=False)))
    return tuple(modules) or ("torch",)


def run_sweep(
    store: Store,
    sweep_id: str,
    *,
    progress: Callable[[CellDone], None] | None = None,
    status: Callable[[str], None] | None = None,
    limit: int | None = None,
    executor: str = "local",
    ray_address: str | None = None,
) -> SweepRecord:
    """Run the sweep's pending workloads (at most ``limit`` of them); return the stored sweep.

    ``executor`` is ``local`` (worker processes here) or ``ray`` (a Ray task per cell, on the
    cluster at ``ray_address``, or on a local one started for this sweep when it is None).

    Raises:
        SpecError: an unknown executor; with ``ray``, ray not installed or a resource that the
            targets need and no node of the cluster offers (nothing runs then).
    """
    if executor not in EXECUTORS:
        raise SpecError(f"unknown executor {executor!r}", hint="use " + " or ".join(EXECUTORS))
    if ray_address is not None and executor != "ray":
        raise SpecError("a Ray address needs the ray executor", hint="add --executor ray")
    record = store.get_sweep(sweep_id)
    targets, settings = _targets(record), _settings(record)
    stored = {cell.workload_spec for cell in store.sweep_cells(sweep_id)}
    pending = [(i, spec) for i, spec in enumerate(record.specs) if spec not in stored]
    if limit is not None:
        pending = pending[:limit]
    total, done, failures = len(record.specs), len(stored), 0
    if progress is not None:  # where the sweep stands before its first cell (a resume: part done)
        progress(CellDone(sweep_id, "", done, total, 0, False, {}, 0.0))

    def finish(position: int, spec: str, seconds: float, run: RunResult | None, error: dict | None) -> None:
        nonlocal done, failures
        went_in = store.save_cell(sweep_id, spec, position, seconds, _now(), run=run, error=error)
        done += int(went_in)
        failed, grades = _failed(run, error, spec)
        failures += failed
        if progress is not None:
            progress(CellDone(sweep_id, spec, done, total, failures, went_in, grades, seconds))

    from contextlib import closing

    if executor == "ray":
        from bakeoff.sweep.ray_executor import ray_cells

        cells = ray_cells(store, record, pending, targets, settings, ray_address, status)
    else:
        from bakeoff.sweep.local_executor import local_cells

        cells = local_cells(store, record, pending, targets, settings, status)
    with closing(cells):
        for cell in cells:
            finish(*cell)
    return store.get_sweep(sweep_id)
