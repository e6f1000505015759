"""One cell of a sweep as it runs away from the driver: the body both executors give a process
of their own (a Ray task, or the local executor's cell runner), and how the driver stores what
comes back.

A cell is one workload with all its targets. Its body (:func:`run_cell`) builds the workload,
reuses the baseline the driver keeps for it (:func:`kept_baseline`, sent with the cell) where a
trial would reuse it, else computes one, and runs the trial
(:func:`~bakeoff.runner.trial.run_trial`), keeping baselines in memory and their tensors in a
temporary directory (:class:`~bakeoff.runner.keeping.MemoryKeeping`), with the targets in warm workers of a
:class:`~bakeoff.runner.isolation.SessionPool` kept at module level (the process serves cell
after cell, so the pool stays warm). It returns plain data: the run's document, a new baseline's
record, its environment and its tensor file's bytes (None when the driver's was reused), or the
build error. The driver is the only
writer to the knowledge base (:func:`store_baseline`, then the cell with its run).

The workload's own code (building it, the baseline's eager runs) therefore never runs in the
driver: a build that crashes, hangs or exhausts memory ends the process that serves the cell,
and the driver records that cell's failure and goes on.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from bakeoff.launch.tempdirs import owned_tempdir
from bakeoff.results.values import BaselineInfo
from bakeoff.runner.isolation import SessionPool
from bakeoff.runner.job import TargetJob
from bakeoff.runner.keeping import MemoryKeeping
from bakeoff.settings import TrialSettings
from bakeoff.store.db import Store
from bakeoff.store.sweeps import SweepRecord

__all__ = [
    "CELL_TIMEOUT_FACTOR",
    "CellPool",
    "cell_arguments",
    "cell_timeout",
    "kept_baseline",
    "run_cell",
    "store_baseline",
]

#: How many per-step timeouts a cell may take per target session, plus one for building the
#: workload and its baseline: the backstop above what the targets' workers enforce themselves.
CELL_TIMEOUT_FACTOR = 2.0


def cell_timeout(timeout_s: float, sessions: int) -> float:
    """How long a running cell may take in all before the process serving it is ended."""
    return CELL_TIMEOUT_FACTOR * timeout_s * (sessions + 1)


class CellPool(SessionPool):
    """A pool that says when a cell's first target session takes a worker (``announce``, called
    once, then cleared): the moment the cell's own work (build, baseline) is over, and the
    targets' workers, with their own step timeouts, take over."""

    announce: Callable[[], None] | None = None

    def acquire_for(self, job: TargetJob) -> Any:
        if self.announce is not None:
            announce, self.announce = self.announce, None
            announce()
        return super().acquire_for(job)


_POOLS: dict[tuple[str, ...], CellPool] = {}


def _warm_pool(preload: tuple[str, ...], workers: int) -> CellPool:
    """This process's pool of target workers, kept between the cells it runs."""
    pool = _POOLS.get(preload)
    if pool is None:
        if not _POOLS:  # a process that ends in an orderly way removes its target workers' files
            import atexit

            atexit.register(_close_pools)
        from bakeoff.launch.warm import shared_server
        from bakeoff.runner.workers import SESSION_MODULES

        pool = _POOLS[preload] = CellPool(preload=preload, server=shared_server((*preload, *SESSION_MODULES)))
        pool.prestart(workers)
    return pool


def _close_pools() -> None:
    for pool in _POOLS.values():
        pool.close()
    _POOLS.clear()


def run_cell(
    spec: str,
    target_specs: Sequence[str],
    options: Mapping[str, Any],
    requirements: Sequence[str],
    driver: Mapping[str, Any],
    preload: tuple[str, ...] = ("torch",),
    kept: Mapping[str, Any] | None = None,
    on_targets: Callable[[], None] | None = None,
) -> Iterator[dict[str, Any]]:
    """The body of a cell: first what it runs on (the driver's clock starts then), then the
    cell as plain data. ``on_targets`` is called when the first target session starts. ``kept``
    is the baseline the driver keeps for the workload (:func:`kept_baseline`), reused where it
    is fresh; the cell's ``baseline`` is then None (nothing new to store). Nothing here writes
    outside its scratch directory."""
    import socket

    from bakeoff.runner.trial import run_trial
    from bakeoff.sweep.run import cell_error
    from bakeoff.target.detect import extra_devices
    from bakeoff.target.spec import parse_target

    yield {"node": socket.gethostname(), "pid": os.getpid()}
    for name, value in driver["env"].items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    if Path(driver["cwd"]).is_dir():  # relative py: paths mean what they meant to the driver
        os.chdir(driver["cwd"])
    targets = [parse_target(s, extra_devices=extra_devices()) for s in target_specs]
    settings = TrialSettings.from_options(**options)
    pool = _warm_pool(tuple(preload), len({*target_specs, "cpu"})) if settings.isolate else None
    if pool is not None:
        pool.announce = on_targets
    scratch = owned_tempdir("cell")  # a later process removes it if this one is killed
    out: dict[str, Any] = {"run": None, "error": None}
    try:
        # the requirements kept for this workload in the driver's store; the baseline computed
        # here goes back to the driver with the cell
        given = None if kept is None else (BaselineInfo.from_dict(kept["baseline"]), kept["tensors"])
        keeping = MemoryKeeping(scratch, {spec: list(requirements)} if requirements else None, given)
        try:
            run = run_trial(keeping, spec, targets, settings, pool=pool)
        except Exception as exc:
            out["error"] = cell_error(exc)
        else:
            out["run"] = run.to_dict()
            out["baseline"] = None  # the driver's own, reused
            for info, env in keeping.baselines:
                if info.id == run.baseline_id:  # a new one: it goes back to be stored
                    out["baseline"] = info.to_dict()
                    out["baseline_environment"] = env.to_dict()
                    out["tensors"] = keeping.baseline_file(info).read_bytes()
    finally:
        if pool is not None:
            pool.announce = None
        shutil.rmtree(scratch, ignore_errors=True)
    yield out


def cell_arguments(
    store: Store, record: SweepRecord, spec: str, driver: Mapping[str, Any], preload: tuple[str, ...]
) -> tuple[Any, ...]:
    """The positional arguments of :func:`run_cell` for the workload ``spec`` of the sweep
    ``record``, whichever executor runs it: what the driver's store keeps for the workload (its
    requirements, its baseline) travels with the cell."""
    return (
        spec,
        record.targets,
        record.settings,
        store.requirements(spec),
        driver,
        preload,
        kept_baseline(store, spec),
    )


def kept_baseline(store: Store, spec: str) -> dict[str, Any] | None:
    """The baseline ``store`` keeps for the workload ``spec``, as a cell takes it (its record and
    its tensor file's bytes), or None where there is none or its file cannot be used. The cell
    decides whether it is fresh for the workload it builds, as a trial does."""
    info = store.latest_baseline(spec)
    if info is None or store.baseline_problem(info) is not None:
        return None
    return {"baseline": info.to_dict(), "tensors": store.baseline_file(info).read_bytes()}


def store_baseline(store: Store, out: Mapping[str, Any]) -> dict[str, Any] | None:
    """Write a cell's new baseline tensors where this store keeps baselines, then its record
    (nothing when the cell reused the driver's); the cell's error instead if the bytes that came
    back are not the ones the cell hashed."""
    from bakeoff.env import Environment
    from bakeoff.hashing import file_sha256

    if out.get("baseline") is None:
        return None
    info = BaselineInfo.from_dict(out["baseline"])
    path = store.baseline_file(info)  # refuses an id or fingerprint that would leave the store
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".part")
    partial.write_bytes(out["tensors"])
    if info.sha256 and file_sha256(partial) != info.sha256:
        partial.unlink()
        return {
            "type": "BaselineTransferError",
            "category": "exception",
            "message": "baseline bytes changed in transit",
        }
    partial.replace(path)
    store.save_baseline(replace(info, path=str(path)), Environment.from_dict(out["baseline_environment"]))
    return None
