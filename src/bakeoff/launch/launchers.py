"""Where a job runs, chosen by the caller: the job never knows.

- :class:`Inline`: in this process (a test, ``--in-process``); a job that raises is an outcome,
  a job that crashes the interpreter takes this process with it, and no timeout is enforced.
- :class:`FreshProcess`: a spawned interpreter for this job alone, ended after it.
- :class:`Pooled`: a warm worker of a :class:`~bakeoff.launch.pool.WorkerPool`, reused for
  the next job of the same key unless this one killed it.

Command lines (``python -m``, scripts) run through :func:`bakeoff.launch.command.run_command`;
a cluster's tasks (Ray) through the sweep's Ray executor. Every launcher returns an
:class:`~bakeoff.launch.job.Outcome`: a value, or the job's exception, crash, out-of-memory kill
or timeout, classified in :mod:`bakeoff.launch.deaths`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from bakeoff.launch.job import Job, Outcome, raised, run_inline
from bakeoff.launch.pool import WorkerPool
from bakeoff.launch.process import Worker

__all__ = ["FreshProcess", "Inline", "Launcher", "Pooled"]


class Launcher(Protocol):
    def run(self, job: Job, timeout_s: float) -> Outcome: ...


class Inline:
    """Run the job in this process (no timeout can be enforced here: ``timeout_s`` is ignored)."""

    def run(self, job: Job, timeout_s: float) -> Outcome:
        return run_inline(job)


def _on(worker: Worker, job: Job, timeout_s: float, who: str) -> Outcome:
    started = worker.started(timeout_s, who)
    if not started.ok:
        return started
    try:
        reply = worker.request(job, timeout_s, who, job.phase)
    except Exception as exc:  # a job that does not pickle: its own failure, the worker stays unused
        worker.broken = True
        return Outcome(error=raised(exc, job.phase))
    return reply.value if reply.ok else reply  # the worker's reply is the job's own outcome


@dataclass(frozen=True)
class FreshProcess:
    """A spawned interpreter per job, importing ``preload`` first (or one forked from ``server``, a
    fork server that imported them); its start-up has its own, longer allowance
    (:data:`~bakeoff.launch.process.STARTUP_TIMEOUT_S`)."""

    preload: tuple[str, ...] = ()
    who: str = "worker"
    server: Any = None  # a fork server that imported ``preload``: the interpreter is forked from it

    def run(self, job: Job, timeout_s: float) -> Outcome:
        worker = Worker(self.preload, server=self.server)
        try:
            outcome = _on(worker, job, timeout_s, self.who)
        except BaseException:  # Ctrl-C here: the job is not waited for
            worker.close(kill=True)
            raise
        worker.close(kill=worker.broken)
        return outcome


@dataclass
class Pooled:
    """A warm worker of ``pool`` for ``key``: reused while it stays healthy."""

    pool: WorkerPool
    key: Any = None
    who: str = "worker"

    def run(self, job: Job, timeout_s: float) -> Outcome:
        worker = self.pool.acquire(self.key)
        try:
            return _on(worker, job, timeout_s, self.who)
        except BaseException:  # Ctrl-C here: a worker left mid-job is never reused
            worker.broken = True
            raise
        finally:
            self.pool.release(worker)
