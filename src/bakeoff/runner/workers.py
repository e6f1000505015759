"""A trial's worker processes, started early: their imports overlap the parent's own work.

An isolated trial gives each target session a worker of its own (a
:class:`~bakeoff.runner.isolation.SessionPool` without reuse). Where the platform forks, the
workers are forked from this process's warm server for the workload's kind
(:func:`bakeoff.launch.warm.shared_server`, importing :func:`server_preload`), which
:func:`start_workers` starts before the workload is built; elsewhere it spawns the first wave
then, as many as the machine can import in parallel, each preloading what the workload needs
(:func:`preload_for`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from bakeoff.runner.job import TargetJob, with_reference
from bakeoff.settings import TrialSettings
from bakeoff.target.spec import Target
from bakeoff.workload.base import WorkloadSpec, preload_for

__all__ = [
    "SESSION_MODULES",
    "first_wave",
    "preload_for",
    "preloaded_sessions",
    "server_preload",
    "session_factory",
    "start_workers",
]


#: What a trial's fork server imports beside the workload's libraries: a session's own modules.
SESSION_MODULES = ("bakeoff.runner.isolation", "bakeoff.runner.session")


def server_preload(spec: WorkloadSpec) -> tuple[str, ...]:
    """What the fork server of ``spec``'s workers imports: what each worker preloads (the
    architecture's modeling module too: imported once, not once per target) and a session's
    modules."""
    return (*preload_for(spec), *SESSION_MODULES)


def _parallel_imports() -> int:
    """How many workers may import at once beside this process: one core is this process's."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores - 1)


def first_wave(sessions: int, settings: TrialSettings) -> int:
    """How many of a trial's ``sessions`` (replicates counted) get a worker started early.

    Timed in turns, every session starts before the first round, so all may; one after
    another, only the reference's first (a worker started early for a later session would
    import while others are timed). Never more than the cores allow beside this process: more
    would only slow its own imports and stretch each worker's first step, which its timeout
    bounds. The others start when their turn comes, as before."""
    return min(sessions if settings.interleaved else 1, sessions, _parallel_imports())


def preloaded_sessions(targets: Sequence[Target], settings: TrialSettings) -> int:
    """The sessions of a trial on ``targets`` that get a preloaded worker (before any target is
    found unavailable): all but those of targets with environment switches, which must see the
    switches when they import."""
    ordered, reference = with_reference(targets)
    padded = settings.pad_to_buckets is not None and settings.profile is not None
    count = sum((1 + (padded and target != reference)) for target in ordered if target == reference or not settings.env)
    return count * settings.replicates


def start_workers(
    spec: WorkloadSpec, settings: TrialSettings | None = None, targets: Sequence[Target] | None = None
) -> Any:
    """Start a single trial's workers now (where they are forked, the server they are forked
    from, unless this process has it already), so that their imports overlap this process's own
    work (parsing the targets, building the workload, the baseline); None without isolation.

    Without ``targets`` only the reference's worker starts (every trial has one): the caller
    may know no more yet. Give the pool to :func:`run_trial` as ``workers``: it starts the rest,
    stops those not needed (a target skipped as unavailable) and ends them all when the trial
    ends, however it ends. Each worker serves one session, as a worker started on demand would.
    """
    settings = settings or TrialSettings()
    if not settings.isolate:
        return None
    from bakeoff.launch.warm import shared_server
    from bakeoff.runner.isolation import SessionPool

    pool = SessionPool(preload_for(spec), reuse=False, server=shared_server(server_preload(spec)))
    try:
        wanted = 1 if targets is None else first_wave(preloaded_sessions(targets, settings), settings)
        pool.prestart(wanted)
    except BaseException:
        pool.close()
        raise
    return pool


def session_factory(settings: TrialSettings, pool: Any = None) -> Callable[[TargetJob], Any]:
    if settings.isolate:
        from bakeoff.runner.isolation import IsolatedSession

        return lambda job: IsolatedSession(job, settings.timeout_s, pool)
    from bakeoff.runner.session import TargetSession

    return TargetSession
