"""What runs elsewhere, and what comes back: a :class:`Job` and its :class:`Outcome`.

A job is a picklable value (a frozen dataclass defined at module level, so that a spawned
interpreter can import its class) whose ``run()`` returns a plain value: a number, a string, a
dict of those, a value's ``to_dict()``. It never knows where it runs: the caller picks the
launcher (:mod:`bakeoff.launch.launchers`) and gets an :class:`Outcome` back, whichever launcher
ran it and however the job ended. A job that raises, dies, is killed or runs past its time is an
outcome with an :class:`~bakeoff.results.values.ErrorInfo` (category ``exception``, ``crash``,
``out_of_memory`` or ``timeout``), never an exception in the caller.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from bakeoff.results.values import ErrorInfo

__all__ = ["Job", "Outcome", "raised", "run_inline"]

#: How much of a job's traceback an outcome keeps.
TRACEBACK_CHARS = 4000


@runtime_checkable
class Job(Protocol):
    """Work to run somewhere: ``phase`` names it in an error (what was under way)."""

    phase: str

    def run(self) -> Any: ...


@dataclass(frozen=True)
class Outcome:
    """A job's end: its ``value``, or the ``error`` that ended it (never both)."""

    value: Any = None
    error: ErrorInfo | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def reason(self) -> str:
        """One line on the error ("" for a job that finished): its type and message for an
        exception, the message alone for a death or a timeout (which name their process)."""
        if self.error is None:
            return ""
        if self.error.category == "exception":
            return f"{self.error.type}: {self.error.message}"
        return self.error.message


def run_inline(job: Job) -> Outcome:
    """Run ``job`` in this process: its value, or what it raised (a ``SystemExit`` too: a job's
    ``sys.exit`` is the job's failure, not the caller's exit). A Ctrl-C is the caller's: it goes
    through."""
    try:
        return Outcome(value=job.run())
    except (Exception, SystemExit) as exc:
        return Outcome(error=raised(exc, getattr(job, "phase", "")))


def raised(exc: BaseException, phase: str) -> ErrorInfo:
    """``exc`` as a job's error, with its traceback."""
    text = "".join(traceback.format_exception(exc))[-TRACEBACK_CHARS:]
    return ErrorInfo(type(exc).__name__, str(exc)[:300], "exception", phase, text)
