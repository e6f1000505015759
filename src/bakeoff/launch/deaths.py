"""How a process that ran bakeoff's work ended, when it ended without a result: the one place a
death is classified.

A process killed by ``SIGKILL`` is most likely the kernel's out-of-memory killer's work (nothing
else in bakeoff sends it to a running job unasked, and a user's ``kill -9`` reads the same), so
it is ``out_of_memory``; another signal is a ``crash``; an exit without a result is a ``crash``
as well. A job that runs past its time is a ``timeout``, whose message says what was waited for.
The messages have no subject: the caller names the process ("worker", "the cell runner").
A Ray task's failure (:func:`ray_task_error`) gets the categories a local process's death gets.
"""

from __future__ import annotations

import signal
from typing import Any

from bakeoff.results.values import ErrorInfo

__all__ = ["death", "died", "ray_task_error", "timed_out"]


def death(exitcode: int | None) -> tuple[str, str, str]:
    """``(type, category, message)`` of a process that ended with ``exitcode`` (negative: the
    signal that killed it) without sending a result."""
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        if -exitcode == signal.SIGKILL:
            return name, "out_of_memory", f"killed by {name} (most likely the out-of-memory killer)"
        return name, "crash", f"died from signal {name}"
    return "WorkerExit", "crash", f"exited with code {exitcode} without a result"


def died(exitcode: int | None, who: str, when: str = "", phase: str = "", log: str = "") -> ErrorInfo:
    """The error of ``who`` (a process, named as a sentence's subject) that ended with
    ``exitcode`` without a result, ``when`` saying what it was doing."""
    kind, category, message = death(exitcode)
    text = " ".join(part for part in (who, message, when) if part)
    return ErrorInfo(kind, text, category, phase, log)


def timed_out(message: str, phase: str = "", log: str = "") -> ErrorInfo:
    """The error of a job that ran past its time: ``message`` says what was not done in time."""
    return ErrorInfo("Timeout", message, "timeout", phase, log)


def _ray_deaths(rx: Any) -> tuple[type, ...]:
    """Ray's errors for a task whose worker, raylet or node went away (as this Ray has them)."""
    names = ("WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError")
    return tuple(getattr(rx, name) for name in names if hasattr(rx, name))


def ray_task_error(exc: BaseException, where: str) -> ErrorInfo:
    """A Ray task's failure (the task itself, not the work it returned) as a cell's error, with the
    category a local run gives; ``where`` names the node."""
    from ray import exceptions as rx

    first = (str(exc).strip().splitlines() or [""])[0][:300]
    on = f" on {where}" if where else ""
    if isinstance(exc, rx.OutOfMemoryError):
        category, message = "out_of_memory", f"Ray killed the worker running this cell{on} for memory"
    elif isinstance(exc, _ray_deaths(rx)):
        category, message = "crash", f"the Ray worker running this cell{on} died: {first}"
    elif isinstance(exc, rx.RayTaskError):  # the task raised outside the trial (e.g. an import)
        cause = getattr(exc, "cause", None) or exc
        name = type(cause).__name__
        text = (str(cause).strip().splitlines() or [""])[-1][:300]
        return ErrorInfo(name, f"the cell's task{on} raised {name}: {text}", "exception")
    else:
        category, message = "crash", f"the cell's task{on} failed: {first}"
    return ErrorInfo(type(exc).__name__, message, category)
