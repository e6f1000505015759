"""Run a target's session in its own worker process, so a crash, hang or OOM becomes a result.

The session is a job with steps on a :class:`~bakeoff.launch.process.Worker` (a process of its
own, spawned or forked from a server that has run nothing: compile backends and device plugins
that change process-global state cannot leak between targets, and peak memory is measured per
target). The worker keeps its target prepared and runs the
session's steps on command (``start``, ``round``, ``scenarios``, ``finish``), so the parent can
time several targets in turns. If the worker dies or a step outlives the timeout, the parent
records why (signal, exit code, timeout) with the tail of the Python-level traceback that
``faulthandler`` wrote (for a hang, the stack the worker was stuck in, dumped on request before
it is killed) and the phase of the session it was in, and the target's remaining steps do nothing.
What the worker's libraries wrote to its stdout and stderr goes to files the parent names (see
:mod:`bakeoff.runner.capture`): a worker that died leaves there what it said last, which the
parent counts into the error result's ``log``. How a worker is started, watched, timed out
and classified when it dies is :mod:`bakeoff.launch`'s.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bakeoff.launch.pool import WorkerPool
from bakeoff.launch.process import Worker, leave
from bakeoff.results.librarylog import LibraryLog
from bakeoff.results.values import ErrorInfo, TargetResult
from bakeoff.runner.capture import read_output
from bakeoff.runner.job import TargetJob, adjustments_for, error_checks
from bakeoff.scenarios.base import ScenarioResult

__all__ = ["TARGET_WORKER", "IsolatedSession", "SessionPool", "serve_sessions"]


#: The ``multiprocessing`` name of a process that serves target sessions (a workload can ask).
TARGET_WORKER = "bakeoff-target-worker"


def _reporting_session_class(phase_file: str) -> Any:
    from bakeoff.runner.session import TargetSession

    class ReportingSession(TargetSession):
        def __setattr__(self, name: str, value: Any) -> None:
            super().__setattr__(name, value)
            if name == "phase":
                Path(phase_file).write_text(str(value), encoding="utf-8")

    return ReportingSession


def _fresh_state(capture_dir: str) -> None:
    """Between two sessions of a warm worker: forget the last one's compiled graphs and what its
    libraries wrote, and restart the peak memory count, so that nothing of one target's session
    shows in the next one's figures. (No explicit garbage collection: with torch and
    transformers loaded a full collection takes 0.2-0.4 s, most of a tiny cell's cost; the
    last session's model is freed by reference counting.)"""
    if "torch._dynamo" in sys.modules:
        sys.modules["torch._dynamo"].reset()
    for leftover in Path(capture_dir).glob("*"):
        if leftover.is_file():
            leftover.unlink()
    from bakeoff.measure.memory import reset_peak_rss

    reset_peak_rss()


def serve_sessions(conn: Any, phase_file: str, capture_dir: str) -> None:
    """A target worker's command loop: ``("session", job)`` starts a session, then its steps
    follow; after ``finish`` the worker waits for the next session, or ``close``."""
    session_class = _reporting_session_class(phase_file)
    session: Any = None
    sessions = 0
    while True:
        command = conn.recv()
        if command == "close":
            conn.close()
            leave()
        if isinstance(command, tuple) and command[0] == "session":
            if sessions:
                _fresh_state(capture_dir)
            sessions += 1
            session = session_class(command[1], capture_dir=capture_dir)
            conn.send(None)
        elif isinstance(command, tuple) and command[0] == "scenarios":  # ("scenarios", round)
            ran = session.run_scenarios(command[1])
            conn.send(None if ran is None else [r.to_dict() for r in ran])
        elif isinstance(command, tuple):  # ("use", scenarios): run these instead of the job's own
            session.use_scenarios(command[1])
            conn.send(None)
        elif command == "start":
            conn.send(session.start())
        elif command == "round":
            conn.send(session.round())
        else:
            conn.send(session.finish().to_dict())
            session = None


class SessionPool(WorkerPool):
    """Warm workers that serve target sessions, one kind per target and environment switches."""

    def __init__(self, preload: tuple[str, ...] = ("torch",), reuse: bool = True, server: Any = None) -> None:
        super().__init__(preload, reuse, serve=serve_sessions, name=TARGET_WORKER, server=server)

    @staticmethod
    def key_of(job: TargetJob) -> Any:
        """Sessions with the same key share workers: the same target, the same switches."""
        return (job.target.spec, job.env)

    def acquire_for(self, job: TargetJob) -> Worker:
        """A worker for ``job``'s session: one with a clean interpreter when the job sets
        environment switches (read when torch or a backend is imported)."""
        return self.acquire(self.key_of(job), clean=bool(job.env))


class IsolatedSession:
    """The parent's handle on a worker running one :class:`~bakeoff.runner.session.TargetSession`.

    Same steps as the session; never raises for what happens inside the worker. Each step may
    take up to ``timeout_s``. Without a ``pool`` the session has a worker of its own, ended when
    the session finishes; with one, the worker comes from the pool and goes back to it.
    """

    def __init__(self, job: TargetJob, timeout_s: float, pool: SessionPool | None = None) -> None:
        self.job, self.timeout_s, self.pool = job, timeout_s, pool
        self.timing_done = False
        self.result: TargetResult | None = None
        self.started = time.monotonic()
        self.worker = pool.acquire_for(job) if pool is not None else Worker(serve=serve_sessions, name=TARGET_WORKER)
        self.worker.phase_file.unlink(missing_ok=True)  # a death before the session names a phase is not the last one's
        # a worker's start (spawn, imports) is not a step: it has its own, longer allowance
        started = self.worker.started(timeout_s)
        if started.ok:
            self._call(("session", job))
        else:
            self._fail(started.error, "start-up")

    def _call(self, command: str | tuple[str, Any]) -> Any:
        if self.result is not None:
            return None
        name = command if isinstance(command, str) else command[0]
        reply = self.worker.request(command, self.timeout_s, what=name)
        if reply.ok:
            return reply.value
        self._fail(reply.error, name)
        return None

    def _done(self) -> None:
        if self.pool is not None:
            self.pool.release(self.worker)
        else:
            self.worker.close()

    def _fail(self, error: ErrorInfo, command: str) -> None:
        """The target's error result from the worker's (:meth:`Worker.request`), placed in the
        session's phase the worker last reported."""
        worker = self.worker
        phase_file = worker.phase_file
        inner = phase_file.read_text(encoding="utf-8").strip() if phase_file.exists() else ""
        phase = inner or f"worker ({command})"
        message = error.message
        if error.category == "timeout":
            message += (f" (stuck in {inner})" if inner else "") + "; worker killed"
        error = replace(error, message=message, phase=phase)
        log = LibraryLog()  # what the worker's libraries said in its last step (earlier steps' died with it)
        read_output(worker.capture_dir, log, phase)
        self.result = TargetResult(
            target=self.job.target,
            status="error",
            is_reference=self.job.is_reference,
            checks=error_checks("the worker ended without a result", self.job),
            error=error,
            duration_s=time.monotonic() - self.started,
            adjustments=adjustments_for(self.job.target, self.job.buckets, self.job.env),
            variant=self.job.variant,
            log=log.entries(),
        )
        self.timing_done = True
        self._done()

    def start(self) -> bool:
        self.timing_done = bool(self._call("start")) or self.result is not None
        return self.timing_done

    def round(self) -> bool:
        self.timing_done = bool(self._call("round")) or self.result is not None
        return self.timing_done

    def use_scenarios(self, scenarios: tuple[Any, ...]) -> None:
        """Run ``scenarios`` instead of the job's own (a trial sets the reference's server load)."""
        self.job = replace(self.job, scenarios=scenarios)
        self._call(("use", scenarios))

    def run_scenarios(self, index: int = 0) -> list[ScenarioResult] | None:
        """Round ``index`` of the scenarios in the worker: its results, None once it failed."""
        ran = self._call(("scenarios", index))
        return None if ran is None else [ScenarioResult.from_dict(r) for r in ran]

    def finish(self) -> TargetResult:
        data = self._call("finish")
        if self.result is None:
            self.result = TargetResult.from_dict(data)
            self._done()
        return self.result
