"""The ``local`` executor of a sweep: each pending cell in a warm cell runner, stored here.

The cell runner is a worker process (:class:`~bakeoff.launch.process.Worker`, named
``bakeoff-cell-runner``, forked from this process's warm server where the platform allows:
:mod:`bakeoff.launch.warm`) that has imported torch (and transformers, for a population of Hugging
Face workloads) once and serves cell after cell with the same body a Ray task runs
(:func:`~bakeoff.sweep.cell.run_cell`): it builds the workload, computes the baseline and runs
the trial, its targets in warm workers of its own pool (forked from its own server, where it
can). This process only sends the cells and stores what comes back (the baseline, then the cell
with its run, in one transaction). It hands the runner the next cell before it stores the last
one, so the runner never waits for the knowledge base; a cell handed over but not stored when
the sweep is stopped runs again on resume.

So a workload whose build crashes the interpreter, never returns, or is killed for memory costs
its own cell and nothing else: the runner is ended (its target workers die with it: they are
armed to), the cell is stored with the failure and its category (``crash``, ``timeout``,
``out_of_memory``) and the tail of what ``faulthandler`` wrote (for a hang, the stack it was
stuck in), and a fresh runner takes the next cell.

Timeouts: building the workload and its baseline is one step, with the sweep's ``timeout_s``
counted from when the cell reaches the runner. Once the first target session starts, the
targets' workers enforce their own step timeouts, and the whole cell has the backstop of
:func:`~bakeoff.sweep.cell.cell_timeout`.

Everything the runner and its target workers keep in temporary files lies under the runner's
own directory, which this process removes however the runner ends (Ctrl-C here kills it at
once); if this process is killed itself, the next bakeoff process removes it
(:mod:`bakeoff.launch.tempdirs`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from bakeoff.launch.job import Outcome
from bakeoff.launch.process import Worker, leave
from bakeoff.launch.warm import shared_server
from bakeoff.results.values import RunResult
from bakeoff.settings import TrialSettings
from bakeoff.store.db import Store
from bakeoff.store.sweeps import SweepRecord
from bakeoff.sweep.cell import cell_arguments, cell_timeout, run_cell, store_baseline
from bakeoff.target.spec import Target

__all__ = ["RUNNER_NAME", "local_cells"]

#: The ``multiprocessing`` name of the process that serves a local sweep's cells.
RUNNER_NAME = "bakeoff-cell-runner"
#: How much of the runner's crash log (faulthandler's stacks) a failed cell keeps.
_STACK_CHARS = 3000

Cell = tuple[int, str, float, RunResult | None, dict[str, Any] | None]


def _serve_cells(conn: Any, phase_file: str, capture_dir: str) -> None:
    """The cell runner's command loop: a cell's arguments in, ``("targets", None)`` when its
    first target session starts, then ``("done", cell)``; ``close`` ends the runner."""
    import gc
    import tempfile
    from pathlib import Path

    tempfile.tempdir = str(Path(phase_file).parent)  # target workers' files go with the runner
    frozen = False
    while True:
        command = conn.recv()
        if command == "close":
            conn.close()
            leave()  # its pools close on the way out (atexit)
        cell = run_cell(*command, on_targets=lambda: conn.send(("targets", None)))
        next(cell)  # where it runs: this process
        conn.send(("done", next(cell)))
        if not frozen:  # the first cell's imports (the library's model code) are for life too
            gc.freeze()
            frozen = True


def _error(runner: Worker, failed: Outcome, message: str = "") -> dict[str, Any]:
    """The cell's error from the runner's (:meth:`~bakeoff.launch.process.Worker.request`):
    ``message`` replaces its message, and the end of the runner's crash log is kept."""
    error = failed.error
    out = {"type": error.type, "category": error.category, "message": message or error.message}
    text = runner.crash_tail(_STACK_CHARS)
    if text.strip():
        out["stack"] = text
    return out


def _send(runner: Worker, command: tuple, timeout_s: float) -> dict | None:
    """Hand one cell to ``runner`` once it is ready: None, or the cell's error when the runner
    did not start (it must be ended then)."""
    started = runner.started(timeout_s, who="the cell runner")
    if not started.ok:
        late = started.error.category == "timeout"
        return _error(runner, started, "the cell runner did not start in time" if late else "")
    sent = runner.send(command, "the cell runner", "the cell")
    return None if sent.ok else _error(runner, sent)


def _receive(runner: Worker, started: float, timeout_s: float, limit: float) -> tuple[dict | None, dict | None]:
    """Wait for the cell sent to ``runner`` at ``started``: ``(cell, None)``, or ``(None,
    error)`` when the runner died or ran past its time (the runner must be ended then)."""
    step_end, backstop, targets = started + timeout_s, started + limit, False
    while True:
        deadline = backstop if targets else min(step_end, backstop)
        stage = "running the targets" if targets else "building the workload or its baseline"
        got = runner.receive(deadline - time.monotonic(), "the cell runner", "the cell", f"while {stage}")
        if not got.ok and got.error.category == "timeout":
            if targets:
                message = f"the cell ran past {limit:g} s (the cell timeout); its runner was stopped"
            else:
                message = f"building the workload and its baseline took over {timeout_s:g} s; runner stopped"
            return None, _error(runner, got, message)
        if not got.ok:
            return None, _error(runner, got)
        kind, value = got.value
        if kind == "targets":
            targets = True
            continue
        return value, None


def local_cells(
    store: Store,
    record: SweepRecord,
    pending: Sequence[tuple[int, str]],
    targets: Sequence[Target],
    settings: TrialSettings,
    status: Callable[[str], None] | None = None,
) -> Iterator[Cell]:
    """Run ``pending`` cells in a cell runner; yield each as ``(position, spec, seconds, run,
    error)`` as it ends, its baseline already stored (the caller stores the cell with its run)."""
    from bakeoff.sweep.run import preload_for

    preload = preload_for(record.specs)
    sessions = len({t.spec for t in targets} | {"cpu"}) * settings.replicates
    limit = cell_timeout(settings.timeout_s, sessions)
    driver = {"cwd": os.getcwd(), "env": {}}  # the runner inherited this process's environment
    runner: Worker | None = None
    queue = iter(pending)

    def launch() -> tuple[int, str, float, float, dict | None] | None:
        """Hand the next pending cell to the runner (a fresh one if there is none): ``(position,
        spec, when this began, when the runner had it, error or None)``, or None when no cell is
        left. A fresh runner's start-up counts in the cell's time, not in its timeout."""
        nonlocal runner
        position, spec = next(queue, (None, ""))
        if position is None:
            return None
        if runner is None:
            server = shared_server((*preload, __name__))
            runner = Worker(preload, serve=_serve_cells, name=RUNNER_NAME, daemon=False, server=server)
        if status is not None:
            status(spec)
        began = time.monotonic()
        command = cell_arguments(store, record, spec, driver, preload)
        error = _send(runner, command, settings.timeout_s)
        return position, spec, began, time.monotonic(), error

    try:
        flight = launch()
        while flight is not None:
            position, spec, began, started, error = flight
            out = None
            if error is None:
                out, error = _receive(runner, started, settings.timeout_s, limit)
            seconds = time.monotonic() - began
            if error is not None:  # the runner is finished: a fresh one takes the next cell
                runner.close(kill=True)
                runner = None
                flight = None
            else:  # the runner goes on with the next cell while this one is stored
                flight = launch()
            run = None
            if out is not None and out["error"] is not None:
                error = out["error"]
            elif out is not None:
                error = store_baseline(store, out)
                run = RunResult.from_dict(out["run"]) if error is None else None
            yield position, spec, seconds, run, error
            if flight is None:
                flight = launch()
    except BaseException:
        if runner is not None:  # interrupted: end it now (its target workers die with it)
            runner.close(kill=True)
            runner = None
        raise
    finally:
        if runner is not None:
            runner.close()
