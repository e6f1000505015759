"""Run a target's session in its own worker process, so a crash, hang or OOM becomes a result.

Each worker is a *spawned* interpreter: compile backends and device plugins that change
process-global state (dynamo settings, PrivateUse1 registration) cannot leak between targets,
and peak memory is measured per target. The worker keeps its target prepared and runs the
session's steps on command (``start``, ``round``, ``scenarios``, ``finish``), so the parent can
time several targets in turns. If the worker dies or a step outlives the timeout, the parent
records why (signal, exit code, timeout) with the tail of the Python-level traceback that
``faulthandler`` wrote (for a hang, the stack the worker was stuck in, dumped on request before
it is killed) and the phase of the session it was in, and the target's remaining steps do nothing.
What the worker's libraries wrote to its stdout and stderr goes to files the parent names (see
:mod:`bakeoff.runner.capture`): a worker that died leaves there what it said last, which the
parent counts into the error result's ``log``.

Workers never outlive the parent: on Linux the kernel kills them when it dies (the parent-death
signal), elsewhere a watcher thread notices the parent is gone. They ignore Ctrl-C, which the
terminal sends to the whole process group: the parent alone decides to stop them, quietly.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from bakeoff.results.librarylog import LibraryLog
from bakeoff.results.values import ErrorInfo, TargetResult
from bakeoff.runner.capture import read_output
from bakeoff.runner.job import TargetJob, adjustments_for, error_checks
from bakeoff.runner.tempdirs import owned_tempdir
from bakeoff.scenarios.base import ScenarioResult

__all__ = ["IsolatedSession", "Worker", "WorkerPool", "die_with_parent"]


_STACK_SIGNAL = getattr(signal, "SIGUSR1", None)  # asks a hung worker for its Python stack
#: How long a worker may take to start and import what it preloads (torch, transformers) on a
#: busy machine; a step's timeout counts from then.
STARTUP_TIMEOUT_S = 300.0


def die_with_parent(parent_pid: int) -> None:
    """Make sure this worker cannot outlive ``parent_pid`` (a ``kill -9`` of bakeoff included)."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="bakeoff-parent-watch", daemon=True).start()


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


def _worker(
    conn: Any,
    crash_log: str,
    parent_pid: int,
    phase_file: str,
    capture_dir: str,
    preload: tuple[str, ...],
    serve: Any = None,
) -> None:
    """A worker's life: arm the parent-death signal, ignore Ctrl-C, let ``faulthandler`` write
    to the crash log, import what it preloads, say ``ready``, then serve commands with ``serve``
    (``serve(conn, phase_file, capture_dir)``; by default :func:`_serve_sessions`)."""
    import faulthandler
    import importlib

    die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # as its own children would have it (see _interrupts_held)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    with open(crash_log, "w", encoding="utf-8") as log:
        faulthandler.enable(log)
        if _STACK_SIGNAL is not None:
            faulthandler.register(_STACK_SIGNAL, file=log, all_threads=True)
        for name in preload:  # a warm worker pays its imports before its first session
            try:
                importlib.import_module(name)
            except Exception:
                pass  # a hint only: the session that needs it reports the missing or broken library
        if preload:
            import gc

            gc.freeze()  # the imported modules are for life: later collections need not walk them
        conn.send("ready")  # start-up is over: from now on each step has the step timeout
        try:
            (serve or _serve_sessions)(conn, phase_file, capture_dir)
        except (EOFError, BrokenPipeError, ConnectionResetError):
            os._exit(1)  # the parent is gone (killed: its death signal may not have landed yet): quietly


def _serve_sessions(conn: Any, phase_file: str, capture_dir: str) -> None:
    """A target worker's command loop: ``("session", job)`` starts a session, then its steps
    follow; after ``finish`` the worker waits for the next session, or ``close``."""
    session_class = _reporting_session_class(phase_file)
    session: Any = None
    sessions = 0
    while True:
        command = conn.recv()
        if command == "close":
            conn.close()
            _leave()
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


def _leave() -> None:
    """End a worker that was asked to: what it registered to run on the way out runs (a compile
    backend's own worker pool is shut down, temporary files go), but not the interpreter's
    teardown of every module, which takes seconds once torch and transformers are imported."""
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(0)


@contextmanager
def _interrupts_held() -> Iterator[None]:
    """Spawn a worker with Ctrl-C ignored from its first instruction, without losing one meant
    for this process. An ignored signal stays ignored across ``exec`` (and Python then installs
    no KeyboardInterrupt handler), so a Ctrl-C while the worker imports its first modules,
    before it ignores SIGINT itself, prints no traceback from it. Meanwhile this thread blocks
    SIGINT: one that arrives stays pending (a blocked signal is never discarded as ignored) and
    reaches this process's own handler once the spawn is done."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _death(exitcode: int | None) -> tuple[str, str, str]:
    """(type, category, message) for a worker that ended without sending a result."""
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        if -exitcode == signal.SIGKILL:
            return name, "out_of_memory", f"worker killed by {name} (most likely the out-of-memory killer)"
        return name, "crash", f"worker died from signal {name}"
    return "WorkerExit", "crash", f"worker exited with code {exitcode} without a result"


class Worker:
    """A spawned worker process and the files it leaves for the parent (crash log, phase, output).

    A worker serves one session after another (see :func:`_serve_sessions`); :class:`WorkerPool`
    keeps idle ones warm between trials. ``preload`` names modules it imports before its first
    session, while the parent does other work. ``serve`` replaces the session loop with another
    command loop (a top-level function: it is pickled by name); ``name`` is the process's
    ``multiprocessing`` name, which tells the worker (and a workload's code) what it serves.
    A worker that starts workers of its own must not be a ``daemon`` (multiprocessing refuses);
    its owner then ends it explicitly, as every owner does anyway.
    """

    def __init__(
        self, preload: tuple[str, ...] = (), serve: Any = None, name: str = "bakeoff-target-worker", daemon: bool = True
    ) -> None:
        self._tmp = owned_tempdir("worker")  # a later process removes it if this one is killed
        self.crash_log = self._tmp / "crash.log"
        self.phase_file = self._tmp / "phase"
        self.capture_dir = self._tmp / "capture"
        self.key: Any = None
        self.sessions = 0
        self.broken = False
        self.ready = False
        self.retired = False
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe(duplex=True)
        self.process = ctx.Process(
            target=_worker,
            args=(child, str(self.crash_log), os.getpid(), str(self.phase_file), str(self.capture_dir), preload, serve),
            name=name,
            daemon=daemon,
        )
        with _interrupts_held():
            self.process.start()
        child.close()

    @property
    def alive(self) -> bool:
        return not self.broken and self.process.is_alive()

    def wait_ready(self, timeout_s: float) -> bool:
        """Wait until the worker has started and imported what it preloads (its ``ready``);
        False if it died or did not get there within ``timeout_s``."""
        if self.ready:
            return True
        try:
            if self.conn.poll(timeout_s):
                self.ready = self.conn.recv() == "ready"
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            self.ready = False
        return self.ready

    def begin(self, job: TargetJob) -> None:
        """Start a new session for ``job``: the phase file is cleared, so that a death before
        the session names a phase is not blamed on the last one."""
        self.phase_file.unlink(missing_ok=True)
        self.sessions += 1

    def dump_stack(self) -> None:
        """Ask a hung worker to write its Python stack to the crash log (faulthandler answers
        even when the worker is stuck inside C code), and give it a moment to do so."""
        if _STACK_SIGNAL is None or not self.process.is_alive() or self.process.pid is None:
            return
        before = self.crash_log.stat().st_size if self.crash_log.exists() else 0
        try:
            os.kill(self.process.pid, _STACK_SIGNAL)
        except OSError:
            return
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            if self.crash_log.exists() and self.crash_log.stat().st_size > before:
                time.sleep(0.1)  # let it finish writing every thread
                return
            time.sleep(0.02)

    def retire(self) -> None:
        """Ask the worker to leave, without waiting for it: :meth:`close` waits later."""
        if not self.broken and self.process.is_alive():
            try:
                self.conn.send("close")
            except (BrokenPipeError, ConnectionResetError, OSError):
                pass
        self.broken = True
        self.retired = True

    def close(self, kill: bool = False) -> None:
        """End the worker (asking it to leave, unless ``kill``) and remove its files."""
        asked = self.retired
        self.broken = True
        if not kill and self.process.is_alive():
            if not asked:
                try:
                    self.conn.send("close")
                except (BrokenPipeError, ConnectionResetError, OSError):
                    pass
            self.process.join(30)
        if self.process.is_alive():
            self.process.kill()
        self.process.join(10)
        self.conn.close()
        shutil.rmtree(self._tmp, ignore_errors=True)


class WorkerPool:
    """Warm workers kept between trials, one kind per target (and environment switches).

    A sweep runs many workloads on the same targets: each target's sessions go to a worker
    that has already imported torch (and whatever ``preload`` names) and served that target
    before, instead of a fresh interpreter per session. A worker that crashed, hung or ran out
    of memory is never reused: the session that saw it fail records the failure, and the next
    session of that target gets a new worker. :meth:`prestart` spawns workers ahead of need,
    so their imports overlap with the parent's own work (building the workload, the baseline).

    With ``reuse=False`` a worker serves one session only and is ended when it finishes: a
    single trial's own pool (see :func:`~bakeoff.runner.trial.start_workers`), whose every
    session (each replicate's too) must have a process of its own, only started early.
    """

    def __init__(self, preload: tuple[str, ...] = ("torch",), reuse: bool = True) -> None:
        self.preload = preload
        self.reuse = reuse
        self._idle: dict[Any, list[Worker]] = {}
        self._spare: list[Worker] = []
        self._retired: list[Worker] = []
        self.started = 0

    @staticmethod
    def key(job: TargetJob) -> Any:
        """Sessions with the same key share workers: the same target, the same switches."""
        return (job.target.spec, job.env)

    def _spawn(self, preload: bool = True) -> Worker:
        self.started += 1
        return Worker(self.preload if preload else ())

    def prestart(self, count: int) -> None:
        """Spawn up to ``count`` workers not yet given to any target."""
        while len(self._spare) < count:
            self._spare.append(self._spawn())

    def trim(self, count: int) -> None:
        """Stop the spare workers beyond ``count`` (started for sessions that will not run, a
        target skipped as unavailable): they have served nothing, so they are killed, not
        waited for while they import."""
        while len(self._spare) > count:
            self._spare.pop().close(kill=True)

    def acquire(self, job: TargetJob) -> Worker:
        """A live worker that served this target before, else a spare one, else a new one."""
        idle = self._idle.get(self.key(job), [])
        while idle:
            worker = idle.pop()
            if worker.alive:
                return worker
            worker.close(kill=True)
        # a target with environment switches gets a worker that has imported nothing yet: a
        # switch read when torch (or a backend) is imported must see the target's value
        while self._spare and not job.env:
            worker = self._spare.pop(0)
            if worker.alive:
                worker.key = self.key(job)
                return worker
            worker.close(kill=True)
        worker = self._spawn(preload=not job.env)
        worker.key = self.key(job)
        return worker

    def release(self, worker: Worker) -> None:
        """Take back a worker whose session finished; a broken one (or any, without ``reuse``)
        is ended instead."""
        if not self.reuse:  # it leaves while the trial goes on; close() waits for it
            if worker.alive:
                worker.retire()
                self._retired.append(worker)
            else:
                worker.close(kill=True)
        elif worker.alive:
            self._idle.setdefault(worker.key, []).append(worker)
        else:
            worker.close(kill=True)

    def workers(self) -> list[Worker]:
        return [*self._spare, *(w for idle in self._idle.values() for w in idle)]

    def close(self) -> None:
        """End every worker kept: idle ones are asked to leave (retired ones were), and waited
        for; spares (which have served nothing, and may still be importing) are killed."""
        for worker in self._spare:
            worker.close(kill=True)
        for worker in [*self._retired, *(w for idle in self._idle.values() for w in idle)]:
            worker.close()
        self._idle.clear()
        self._spare.clear()
        self._retired.clear()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class IsolatedSession:
    """The parent's handle on a worker running one :class:`~bakeoff.runner.session.TargetSession`.

    Same steps as the session; never raises for what happens inside the worker. Each step may
    take up to ``timeout_s``. Without a ``pool`` the session has a worker of its own, ended when
    the session finishes; with one, the worker comes from the pool and goes back to it.
    """

    def __init__(self, job: TargetJob, timeout_s: float, pool: WorkerPool | None = None) -> None:
        self.job, self.timeout_s, self.pool = job, timeout_s, pool
        self.timing_done = False
        self.result: TargetResult | None = None
        self.started = time.monotonic()
        self.worker = pool.acquire(job) if pool is not None else Worker()
        self.worker.begin(job)
        # a worker's start (spawn, imports) is not a step: it has its own, longer allowance
        if self.worker.wait_ready(max(timeout_s, STARTUP_TIMEOUT_S)):
            self._call(("session", job))
        else:
            self._fail("start-up", timed_out=self.worker.process.is_alive())

    def _call(self, command: str | tuple[str, Any]) -> Any:
        if self.result is not None:
            return None
        name = command if isinstance(command, str) else command[0]
        conn = self.worker.conn
        try:
            conn.send(command)
            # poll() returns early on a reply *or* on the pipe closing because the worker died;
            # only a poll that runs out of time is a timeout (a dying worker may still be alive).
            if conn.poll(self.timeout_s):
                return conn.recv()
            self._fail(name, timed_out=True)
        except (EOFError, BrokenPipeError, ConnectionResetError):
            self._fail(name, timed_out=False)
        return None

    def _done(self) -> None:
        if self.pool is not None:
            self.pool.release(self.worker)
        else:
            self.worker.close()

    def _fail(self, command: str, timed_out: bool) -> None:
        worker = self.worker
        worker.broken = True
        if timed_out:
            worker.dump_stack()
            worker.process.kill()
        worker.process.join(10)
        if worker.process.is_alive():  # closed its end of the pipe but will not exit
            worker.process.kill()
            worker.process.join(10)
        crash_log, phase_file = worker.crash_log, worker.phase_file
        tail = crash_log.read_text(encoding="utf-8", errors="replace")[-4000:] if crash_log.exists() else ""
        inner = phase_file.read_text(encoding="utf-8").strip() if phase_file.exists() else ""
        phase = inner or f"worker ({command})"
        if timed_out:
            waited = max(self.timeout_s, STARTUP_TIMEOUT_S) if command == "start-up" else self.timeout_s
            message = f"no reply to '{command}' within {waited:g} s"
            message += f" (stuck in {inner})" if inner else ""
            error = ErrorInfo("Timeout", message + "; worker killed", "timeout", phase, tail)
        else:
            kind, category, message = _death(worker.process.exitcode)
            error = ErrorInfo(kind, f"{message} during '{command}'", category, phase, tail)
        log = LibraryLog()  # what the worker's libraries said in its last step (earlier steps' died with it)
        read_output(worker.capture_dir, log, phase)
        self.result = TargetResult(
            target=self.job.target,
            status="error",
            is_reference=self.job.is_reference,
            checks=error_checks("the worker ended without a result"),
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
