"""Coverage sweeps: :func:`sweep` runs a population of workloads on the targets, one stored
cell at a time (:mod:`bakeoff.sweep.run`), or resumes an interrupted sweep; :func:`coverage`
and :func:`sweeps` read stored sweeps back, and :func:`sweep_regressions` compares a sweep with
an earlier one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from bakeoff.api.common import PathLike, _targets
from bakeoff.settings.sweep import SWEEP_OPTIONS, SWEEP_TIMING, sweep_keywords
from bakeoff.store.db import Store

if TYPE_CHECKING:
    from bakeoff.store.sweeps import SweepRecord
    from bakeoff.sweep.changes import SweepChanges
    from bakeoff.sweep.run import CellDone
    from bakeoff.verdicts.coverage import Coverage
    from bakeoff.verdicts.regressions import Thresholds

__all__ = ["SWEEP_TIMING", "coverage", "sweep", "sweep_regressions", "sweeps"]


def sweep(
    population: str | None = None,
    on: str | Iterable[str] | None = None,
    *,
    db: PathLike | None = None,
    resume: str | None = None,
    timing: str | None = None,
    timeout_s: float | None = None,
    checks: str | Iterable[str] = (),
    env: Iterable[str] = (),
    limit: int | None = None,
    progress: Callable[[CellDone], None] | None = None,
    status: Callable[[str], None] | None = None,
    executor: str = "local",
    ray_address: str | None = None,
) -> Coverage:
    """Run every workload of ``population`` on the targets ``on``, storing each cell as it
    finishes, and return the coverage; ``resume`` (a sweep id) finishes an interrupted sweep
    with its own population, targets and settings instead (giving any of them then is refused:
    a resume must not look as if it had changed them).

    Args:
        population: ``arch:all``, ``arch:causal_lm``, ``arch:base`` or a file of workload specs.
        on: target specs, as a list or one comma-separated string (default ``cpu``).
        timing: ``none``, ``quick`` (the default) or ``full`` (see :data:`SWEEP_TIMING`).
        timeout_s: the most a target's step may take (default 600 s); longer is that cell's
            timeout.
        checks: options for checks (``training?steps=5`` turns on an on-request check).
        env: ``KEY=VALUE`` switches set while each target runs.
        limit: run at most this many pending workloads now (the rest stay pending).
        progress: called before the first cell (with the sweep's id) and after each;
            ``status`` with each workload as it starts (and, on Ray, the cluster's state).
        executor: ``local`` (worker processes here) or ``ray`` (one Ray task per cell): how this
            invocation runs, not part of the sweep (one started locally may resume on Ray).
        ray_address: the Ray cluster to use (``auto``, ``ray://host:port``); None starts a
            local cluster for the sweep and stops it at the end.

    Raises:
        SpecError: an unknown population or target, a malformed file or setting, an unknown
            executor, ray missing or a resource the local Ray cluster would lack (nothing
            stored); a resource a given cluster lacks (the sweep is stored, nothing ran).
    """
    from bakeoff.errors import SpecError
    from bakeoff.sweep.results import load_coverage
    from bakeoff.sweep.run import EXECUTORS, create_sweep, run_sweep

    if executor not in EXECUTORS:
        raise SpecError(f"unknown executor {executor!r}", hint="use " + " or ".join(EXECUTORS))
    if ray_address is not None and executor != "ray":
        raise SpecError("a Ray address needs the ray executor", hint="add --executor ray")
    if resume is not None:
        given = {"population": population, "targets": on, "timing": timing, "timeout_s": timeout_s}
        given |= {"checks": checks or None, "env": env or None}
        words = {name: option.flag.lstrip("-") for name, option in SWEEP_OPTIONS.items()}
        changed = [words.get(name, name) for name, value in given.items() if value is not None]
        if changed:
            raise SpecError(
                f"a resumed sweep keeps its {', '.join(changed)}",
                hint="give --resume SWEEP_ID alone (with --db, --limit or --executor)",
            )
        store = Store.open(db, create=False)
        sweep_id = store.resolve_sweep_id(resume)
    else:
        from bakeoff.sweep.population import resolve_population

        if population is None:
            raise SpecError("no population to sweep", hint="give arch:all, arch:causal_lm, arch:base or a file")
        options = sweep_keywords(timing=timing, timeout_s=timeout_s, checks=checks, env=env)
        targets = _targets("cpu" if on is None else on)
        found = resolve_population(population)
        if executor == "ray":  # what can be refused before the sweep exists is refused now
            from bakeoff.sweep.ray_executor import preflight

            preflight(targets, ray_address)
        store = Store.open(db)
        sweep_id = create_sweep(store, found, targets, options).id
    run_sweep(
        store, sweep_id, progress=progress, status=status, limit=limit, executor=executor, ray_address=ray_address
    )
    return load_coverage(store, sweep_id)


def coverage(sweep_id: str, *, db: PathLike | None = None) -> Coverage:
    """A stored sweep's coverage (``sweep_id`` may be a unique prefix)."""
    from bakeoff.sweep.results import load_coverage

    return load_coverage(Store.open(db, create=False), sweep_id)


def sweeps(*, db: PathLike | None = None, limit: int = 20) -> list[SweepRecord]:
    """The newest stored sweeps, with how many of their workloads are stored."""
    return Store.open(db, create=False).list_sweeps(limit)


def sweep_regressions(
    sweep_id: str, *, against: str | None = None, db: PathLike | None = None, thresholds: Thresholds | None = None
) -> SweepChanges:
    """A sweep against an earlier one (``against``, else the one before it of the same
    population): which cells started or stopped working, and each cell's two runs compared
    metric by metric (see :mod:`bakeoff.sweep.changes`).

    Raises:
        StoreError: an unknown or ambiguous sweep id.
        SpecError: no earlier sweep to compare with, or no target in common.
    """
    from bakeoff.sweep.changes import sweep_changes

    return sweep_changes(Store.open(db, create=False), sweep_id, against, thresholds)
