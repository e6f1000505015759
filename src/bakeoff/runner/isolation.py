"""Run a target job in a fresh worker process, so a crash, hang or OOM becomes a result.

Each worker is a *spawned* interpreter: compile backends and device plugins that change
process-global state (dynamo settings, PrivateUse1 registration) cannot leak between targets,
and peak memory is measured per target. The worker sends back ``TargetResult.to_dict()``;
if it dies instead, the parent records why (signal, exit code, timeout) with the tail of the
Python-level traceback that ``faulthandler`` wrote.
"""

from __future__ import annotations

import multiprocessing
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from bakeoff.results.values import Correctness, ErrorInfo, TargetResult
from bakeoff.runner.job import TargetJob

__all__ = ["run_isolated"]


def _worker(job: TargetJob, conn: Any, crash_log: str) -> None:
    import faulthandler

    with open(crash_log, "w", encoding="utf-8") as log:
        faulthandler.enable(log)
        from bakeoff.runner.job import run_target

        result = run_target(job)
        conn.send(result.to_dict())
        conn.close()


def _death(exitcode: int | None) -> tuple[str, str, str]:
    """(type, category, message) for a worker that ended without sending a result."""
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        if -exitcode == signal.SIGKILL:
            return name, "out_of_memory", f"worker killed by {name} (most likely the out-of-memory killer)"
        return name, "crash", f"worker died from signal {name}"
    return "WorkerExit", "crash", f"worker exited with code {exitcode} without a result"


def run_isolated(job: TargetJob, timeout_s: float) -> TargetResult:
    """Run ``job`` in a spawned process; never raises for what happens inside it."""
    ctx = multiprocessing.get_context("spawn")
    receiver, sender = ctx.Pipe(duplex=False)
    with tempfile.TemporaryDirectory(prefix="bakeoff-worker-") as tmp:
        crash_log = str(Path(tmp) / "crash.log")
        process = ctx.Process(target=_worker, args=(job, sender, crash_log), daemon=True)
        started = time.monotonic()
        process.start()
        sender.close()
        data = None
        # poll() returns early on a result *or* on the pipe closing because the worker died;
        # only a poll that runs out of time is a timeout (a dying worker may still be alive).
        timed_out = not receiver.poll(timeout_s)
        if not timed_out:
            try:
                data = receiver.recv()
            except EOFError:
                data = None
        else:
            process.kill()
        process.join(10)
        if process.is_alive():  # closed its end of the pipe but will not exit
            process.kill()
            process.join(10)
        elapsed = time.monotonic() - started
        if data is not None:
            return TargetResult.from_dict(data)
        tail = Path(crash_log).read_text(encoding="utf-8", errors="replace")[-4000:] if Path(crash_log).exists() else ""
    if timed_out:
        error = ErrorInfo("Timeout", f"no result within {timeout_s:g} s; worker killed", "timeout", "worker", tail)
    else:
        kind, category, message = _death(process.exitcode)
        error = ErrorInfo(kind, message, category, "worker", tail)
    from bakeoff.runner.job import adjustments_for

    return TargetResult(
        target=job.target,
        status="error",
        is_reference=job.is_reference,
        correctness=Correctness("error", "no output to check: the worker ended without a result"),
        error=error,
        duration_s=elapsed,
        adjustments=adjustments_for(job.target, job.buckets, job.env),
        variant=job.variant,
    )
