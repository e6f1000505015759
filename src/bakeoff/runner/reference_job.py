"""The eager CPU runs of a trial's reference, in a process of their own: a workload whose forward
pass crashes the interpreter (a segfault in an extension) or hangs (in float64 alone, say) ends
that process, not bakeoff, and the trial stops with one line saying so.

:class:`EagerJob` is the first eager call (does the model run at all, before a knowledge base is
made); :class:`ReferencesJob` computes and writes a baseline's references
(:func:`~bakeoff.runner.keeping.references_here`). :func:`references_on` runs the second on
a launcher as :data:`~bakeoff.runner.keeping.ComputeReferences`, and :func:`eager_run` the first;
both run in the caller's process where there is no launcher (no fork server to take them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bakeoff.checks.baseline import run_eagerly
from bakeoff.errors import WorkloadError
from bakeoff.launch.job import Outcome
from bakeoff.results.librarylog import LibraryLog
from bakeoff.runner.keeping import ComputeReferences, references_here, unwritable
from bakeoff.workload.base import BuiltWorkload, WorkloadSpec

__all__ = [
    "REFERENCE_TIMEOUT_S",
    "EagerJob",
    "ReferencesJob",
    "eager_run",
    "reference_launcher",
    "references_on",
]

#: How long the reference's eager runs may take where no --timeout is given (``bakeoff baseline``).
REFERENCE_TIMEOUT_S = 900.0


def _built(spec: str, fingerprint: str) -> BuiltWorkload:
    from bakeoff.workload.registry import build_workload

    workload = build_workload(spec)
    if workload.fingerprint != fingerprint:
        raise WorkloadError(
            f"{spec} built again for its eager runs has fingerprint {workload.fingerprint}, not {fingerprint}: its "
            "weights or inputs are not reproducible",
            hint="seed every random draw of the factory from torch's generator (bakeoff seeds it)",
        )
    return workload


def _told(phase: str, work: Callable[[], Any]) -> tuple[Any, list[dict[str, Any]]]:
    """``work()``'s value, and what libraries said meanwhile (warnings, logging, raw output),
    counted under ``phase`` as the trial's own process counts it (:class:`Capture`)."""
    import shutil

    from bakeoff.launch.tempdirs import owned_tempdir
    from bakeoff.runner.capture import Capture

    log, here = LibraryLog(), owned_tempdir("capture")
    try:
        with Capture(log, lambda: phase, here).active():
            value = work()
        return value, list(log.entries())
    finally:
        shutil.rmtree(here, ignore_errors=True)


@dataclass(frozen=True)
class EagerJob:
    """One eager CPU call of the workload ``spec`` (:func:`~bakeoff.checks.baseline.run_eagerly`)."""

    spec: str
    fingerprint: str
    phase: str = "eager run"

    def run(self) -> list[dict[str, Any]]:
        return _told(self.phase, lambda: run_eagerly(_built(self.spec, self.fingerprint)))[1]


@dataclass(frozen=True)
class ReferencesJob:
    """A baseline's references of the workload ``spec``, written to ``path``: ``{"references",
    "notes", "repeat"}``, or ``{"unwritable": why}`` where the file could not be written."""

    spec: str
    fingerprint: str
    dtypes: tuple[str, ...]
    shapes: tuple[tuple[int, int], ...]
    amp_dtypes: tuple[str, ...]
    path: str
    phase: str = "baseline"

    def run(self) -> dict[str, Any]:
        def compute() -> dict[str, Any]:
            workload = _built(self.spec, self.fingerprint)
            try:
                names, notes, repeat = references_here(
                    workload, list(self.dtypes), list(self.shapes), list(self.amp_dtypes), Path(self.path)
                )
            except OSError as exc:
                return {"unwritable": exc.strerror or str(exc)}
            return {"references": names, "notes": notes, "repeat": repeat}

        value, said = _told(self.phase, compute)
        return {**value, "log": said}


def _refused(spec: str, outcome: Outcome, what: str) -> WorkloadError:
    """The one line for a reference run that did not finish: its exception as it said it, or
    its process's death or timeout."""
    error = outcome.error
    assert error is not None
    if error.category == "exception" and error.type == "WorkloadError":
        return WorkloadError(error.message, hint="make the model run eagerly on the CPU first")
    return WorkloadError(
        f"{spec} did not finish {what} on the CPU: {outcome.reason()}",
        hint="make the model run eagerly on the CPU first (python -c 'model(**inputs)'), in float64 too",
    )


def references_on(launcher: Any | None, timeout_s: float, log: LibraryLog | None = None) -> ComputeReferences:
    """:data:`~bakeoff.runner.keeping.ComputeReferences` as a :class:`ReferencesJob` on
    ``launcher``, what libraries said there added to ``log``; in this process
    (:func:`~bakeoff.runner.keeping.references_here`) where ``launcher`` is None."""
    if launcher is None:
        return references_here

    def compute(
        workload: BuiltWorkload, dtypes: list[str], shapes: list[tuple[int, int]], amp: list[str], path: Path
    ) -> tuple[tuple[str, ...], list[str], float]:
        job = ReferencesJob(
            workload.spec.spec, workload.fingerprint, tuple(dtypes), tuple(shapes), tuple(amp), str(path)
        )
        outcome = launcher.run(job, timeout_s)
        if not outcome.ok:
            raise _refused(workload.spec.spec, outcome, "its baseline's eager runs (float64 and each dtype)")
        if "unwritable" in outcome.value:
            raise unwritable(path, outcome.value["unwritable"])
        value = outcome.value
        if log is not None:
            log.extend(value["log"])
        return tuple(value["references"]), list(value["notes"]), float(value["repeat"])

    return compute


def eager_run(launcher: Any | None, workload: BuiltWorkload, timeout_s: float, log: LibraryLog | None = None) -> None:
    """One eager CPU call of ``workload`` as an :class:`EagerJob` on ``launcher``, what
    libraries said there added to ``log``; in this process where ``launcher`` is None (the
    caller's own capture, if any, hears it then).

    Raises:
        WorkloadError: the call raised, crashed its process or did not end in ``timeout_s``.
    """
    if launcher is None:
        run_eagerly(workload)
        return
    outcome = launcher.run(EagerJob(workload.spec.spec, workload.fingerprint), timeout_s)
    if not outcome.ok:
        raise _refused(workload.spec.spec, outcome, "its first eager run")
    if log is not None:
        log.extend(outcome.value)


def reference_launcher(spec: WorkloadSpec) -> Any | None:
    """Where the reference's eager calls run: a process forked for them from the warm server a
    trial's workers come from; None where processes cannot be forked (there they run in this
    process: an interpreter spawned for them would import PyTorch again, seconds each)."""
    from bakeoff.launch.launchers import FreshProcess
    from bakeoff.launch.warm import shared_server
    from bakeoff.runner.workers import server_preload
    from bakeoff.workload.base import preload_for

    server = shared_server(server_preload(spec))
    return None if server is None else FreshProcess(preload_for(spec), "reference run", server=server)
