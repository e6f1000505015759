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
import signal
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bakeoff.results.librarylog import LibraryLog
from bakeoff.results.values import ErrorInfo, TargetResult
from bakeoff.runner.capture import read_output
from bakeoff.runner.job import TargetJob, adjustments_for, error_checks

__all__ = ["IsolatedSession", "die_with_parent"]


_STACK_SIGNAL = getattr(signal, "SIGUSR1", None)  # asks a hung worker for its Python stack


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


def _worker(job: TargetJob, conn: Any, crash_log: str, parent_pid: int, phase_file: str, capture_dir: str) -> None:
    import faulthandler

    die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with open(crash_log, "w", encoding="utf-8") as log:
        faulthandler.enable(log)
        if _STACK_SIGNAL is not None:
            faulthandler.register(_STACK_SIGNAL, file=log, all_threads=True)
        from bakeoff.runner.session import TargetSession

        class ReportingSession(TargetSession):
            """Writes each phase it enters to ``phase_file``, for the parent to name if it dies there."""

            def __setattr__(self, name: str, value: Any) -> None:
                super().__setattr__(name, value)
                if name == "phase":
                    Path(phase_file).write_text(str(value), encoding="utf-8")

        session = ReportingSession(job, capture_dir=capture_dir)
        while True:
            command = conn.recv()
            if isinstance(command, tuple):  # ("use", scenarios): run these instead of the job's own
                session.job = replace(session.job, scenarios=command[1])
                conn.send(None)
            elif command == "start":
                conn.send(session.start())
            elif command == "round":
                conn.send(session.round())
            elif command == "scenarios":
                session.run_scenarios()
                conn.send(None)
            else:
                conn.send(session.finish().to_dict())
                conn.close()
                return


def _death(exitcode: int | None) -> tuple[str, str, str]:
    """(type, category, message) for a worker that ended without sending a result."""
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        if -exitcode == signal.SIGKILL:
            return name, "out_of_memory", f"worker killed by {name} (most likely the out-of-memory killer)"
        return name, "crash", f"worker died from signal {name}"
    return "WorkerExit", "crash", f"worker exited with code {exitcode} without a result"


class IsolatedSession:
    """The parent's handle on a worker running one :class:`~bakeoff.runner.session.TargetSession`.

    Same steps as the session; never raises for what happens inside the worker. Each step may
    take up to ``timeout_s``.
    """

    def __init__(self, job: TargetJob, timeout_s: float) -> None:
        self.job, self.timeout_s = job, timeout_s
        self.timing_done = False
        self.result: TargetResult | None = None
        self.started = time.monotonic()
        self._tmp = tempfile.TemporaryDirectory(prefix="bakeoff-worker-")
        self.crash_log = Path(self._tmp.name) / "crash.log"
        self.phase_file = Path(self._tmp.name) / "phase"
        self.capture_dir = Path(self._tmp.name) / "capture"
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe(duplex=True)
        self.process = ctx.Process(
            target=_worker,
            args=(job, child, str(self.crash_log), os.getpid(), str(self.phase_file), str(self.capture_dir)),
            daemon=True,
        )
        self.process.start()
        child.close()

    def _call(self, command: str | tuple[str, Any]) -> Any:
        if self.result is not None:
            return None
        name = command if isinstance(command, str) else command[0]
        try:
            self.conn.send(command)
            # poll() returns early on a reply *or* on the pipe closing because the worker died;
            # only a poll that runs out of time is a timeout (a dying worker may still be alive).
            if self.conn.poll(self.timeout_s):
                return self.conn.recv()
            self._fail(name, timed_out=True)
        except (EOFError, BrokenPipeError, ConnectionResetError):
            self._fail(name, timed_out=False)
        return None

    def _stop(self) -> None:
        self.process.join(30)  # a worker that sent its result exits on its own, cleaning up
        if self.process.is_alive():
            self.process.kill()
            self.process.join(10)
        self.conn.close()

    def _dump_stack(self) -> None:
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

    def _fail(self, command: str, timed_out: bool) -> None:
        if timed_out:
            self._dump_stack()
            self.process.kill()
        self.process.join(10)
        if self.process.is_alive():  # closed its end of the pipe but will not exit
            self.process.kill()
            self.process.join(10)
        tail = self.crash_log.read_text(encoding="utf-8", errors="replace")[-4000:] if self.crash_log.exists() else ""
        inner = self.phase_file.read_text(encoding="utf-8").strip() if self.phase_file.exists() else ""
        phase = inner or f"worker ({command})"
        if timed_out:
            message = f"no reply to '{command}' within {self.timeout_s:g} s"
            message += f" (stuck in {inner})" if inner else ""
            error = ErrorInfo("Timeout", message + "; worker killed", "timeout", phase, tail)
        else:
            kind, category, message = _death(self.process.exitcode)
            error = ErrorInfo(kind, f"{message} during '{command}'", category, phase, tail)
        log = LibraryLog()  # what the worker's libraries said in its last step (earlier steps' died with it)
        read_output(self.capture_dir, log, phase)
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
        self._stop()
        self._tmp.cleanup()

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

    def run_scenarios(self) -> None:
        self._call("scenarios")

    def finish(self) -> TargetResult:
        data = self._call("finish")
        if self.result is None:
            self.result = TargetResult.from_dict(data)
            self._stop()
            self._tmp.cleanup()
        return self.result
