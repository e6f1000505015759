"""``bakeoff localize RUN_ID[:TARGET]``: localise a stored run's failed targets after the fact.

Each target is localised in a fresh worker process (spawned, like a trial's targets): a crash,
a hang past ``timeout_s`` or an out-of-memory kill there becomes a ``not_comparable`` value
with the reason, and the command goes on with the next target. The value is stored with the
run, under the target's result, as ``--localize`` would have stored it.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from typing import Any

from bakeoff.errors import SpecError
from bakeoff.results.values import RunResult, TargetResult

__all__ = ["localize_stored", "needs_localizing"]


def needs_localizing(result: TargetResult) -> bool:
    """Whether a target's stored result failed in a way localisation looks for."""
    correctness = result.checks.get("correctness")
    training = result.checks.get("training")
    return getattr(correctness, "verdict", None) == "fail" or (
        getattr(training, "verdict", None) == "fail" and getattr(training, "fault", "") == "forward"
    )


def _work(job: Any, dtype: str, results: dict[str, Any], conn: Any, parent_pid: int) -> None:
    from bakeoff.checks.base import CheckContext
    from bakeoff.checks.localization import LocalizationCheck
    from bakeoff.runner.isolation import die_with_parent
    from bakeoff.target.plugins import load_plugins

    die_with_parent(parent_pid)
    try:
        load_plugins()
        context = CheckContext(job, job.target, None, {}, lambda _tag: {}, dtype, dtype, job.fingerprint)
        context.results.update(results)
        value = LocalizationCheck().run(context)
        conn.send(("ok", None if value is None else value.to_dict()))
    except BaseException as exc:  # the parent records it
        conn.send(("error", f"{type(exc).__name__}: {str(exc)[:300]}"))


def _in_worker(job: Any, dtype: str, results: dict[str, Any], timeout_s: float) -> dict[str, Any] | str:
    """The value's document, or why there is none."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_work, args=(job, dtype, results, child, os.getpid()), daemon=True)
    process.start()
    child.close()
    try:
        if not parent.poll(timeout_s):
            return f"the localisation did not finish within {timeout_s:g} s"
        kind, payload = parent.recv()
        return payload if kind == "ok" else f"the localisation raised {payload}"
    except EOFError:
        process.join(5)
        return f"the localisation worker died (exit code {process.exitcode})"
    finally:
        if process.is_alive():
            process.kill()
        process.join(5)


def localize_stored(
    store: Any, run_id: str, target: str | None = None, timeout_s: float = 900.0, progress: Callable | None = None
) -> tuple[RunResult, list[tuple[str, Any]]]:
    """Localise the failed targets of a stored run (or the one named) and store each value.

    Returns:
        The run as stored before, and ``(target spec, Localization)`` per target localised.

    Raises:
        SpecError: the target is not in the run, is its reference, or did not fail.
    """
    from bakeoff.checks.localization import Localization
    from bakeoff.runner.job import TargetJob

    run = store.get_run(run_id)
    candidates = [r for r in run.results if r.variant == "as-is" and not r.is_reference and r.status == "ok"]
    if target is not None:
        named = [r for r in candidates if r.target.spec == target]
        if not named:
            listed = ", ".join(r.target.spec for r in candidates) or "none"
            raise SpecError(f"run {run.run_id} has no measured target {target!r}", hint=f"its targets: {listed}")
        if not needs_localizing(named[0]):
            raise SpecError(
                f"target {target} of run {run.run_id} did not fail: nothing to localise",
                hint="localisation looks for where a failed correctness (or training) check goes wrong",
            )
        chosen = named
    else:
        chosen = [r for r in candidates if needs_localizing(r)]
        if not chosen:
            raise SpecError(
                f"no target of run {run.run_id} failed its correctness or training check: nothing to localise",
                hint="localisation looks for where a failed check goes wrong",
            )
    found = []
    for result in chosen:
        if progress:
            progress(f"localising {result.target.spec}")
        job = TargetJob(run.workload["spec"], result.target, run.fingerprint, None)
        dtype = result.target.dtype or run.workload.get("dtype") or "float32"
        checks = {k: v for k, v in result.checks.items() if k in ("correctness", "training")}
        outcome = _in_worker(job, dtype, checks, timeout_s)
        if isinstance(outcome, dict):
            value = Localization.from_dict(outcome)
            value = Localization(**{**value.__dict__, "reason": f"{value.reason} (localised after the run, here)"})
        else:
            value = Localization("not_comparable", reason=outcome)
        store.set_check_value(run.run_id, result.target.spec, "localization", value.to_dict())
        found.append((result.target.spec, value))
    return run, found
