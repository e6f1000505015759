"""Localisation in a worker of its own: during a trial (``--localize``), and after the fact
(``bakeoff localize RUN_ID[:TARGET]``).

Each target is localised as a job in a fresh worker process (:class:`~bakeoff.launch.launchers.FreshProcess`): a crash,
a hang past ``timeout_s`` or an out-of-memory kill there becomes a ``not_comparable`` value
with the reason, and the command goes on with the next target. Localisation is a diagnostic:
its failure is its own value, and the target keeps its measured verdict, latency and every
other check. During a trial it therefore runs after the target's session, never inside it
(:func:`localize_measured`), bounded by the trial's timeout.

Every localisation is a dated record of its own: one stored after the run goes in front of
those stored before, which stay with it (:func:`bakeoff.checks.localization.kept_with`).
"""

from __future__ import annotations

import datetime
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from bakeoff.errors import SpecError
from bakeoff.launch.launchers import FreshProcess
from bakeoff.launch.warm import shared_server
from bakeoff.results.values import RunResult, TargetResult
from bakeoff.runner.workers import server_preload
from bakeoff.workload.base import parse_workload

__all__ = ["check_timeout", "localize_measured", "localize_stored", "needs_localizing", "split_off"]

#: The check this module runs apart from the target's session.
NAME = "localization"


def check_timeout(timeout_s: Any) -> float:
    """``timeout_s`` as seconds, or SpecError: a timeout of 0, a negative one, NaN or infinity
    bounds nothing (a localisation would be stored as not finishing, or never end)."""
    try:
        seconds = float(timeout_s)
    except (TypeError, ValueError):
        seconds = math.nan
    if isinstance(timeout_s, bool) or not (math.isfinite(seconds) and seconds > 0):
        raise SpecError(
            f"timeout {timeout_s!r} is not a positive, finite number of seconds",
            hint="e.g. --timeout 900 (the default)",
        )
    return seconds


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")


def needs_localizing(result: TargetResult) -> bool:
    """Whether a target's stored result failed in a way localisation looks for."""
    correctness = result.checks.get("correctness")
    training = result.checks.get("training")
    return getattr(correctness, "verdict", None) == "fail" or (
        getattr(training, "verdict", None) == "fail" and getattr(training, "fault", "") == "forward"
    )


@dataclass(frozen=True)
class LocalizeJob:
    """One target's localisation, as its session would run the check (a launcher's job): the
    target's environment switches and thread count, what the libraries print on stderr (stdout
    is the command's own, JSON say)."""

    job: Any
    dtype: str
    results: dict[str, Any]
    options: dict[str, Any]
    phase: str = NAME

    def run(self) -> dict[str, Any] | None:
        import torch

        from bakeoff.checks.base import CheckContext
        from bakeoff.checks.localization import LocalizationCheck
        from bakeoff.target.plugins import load_plugins

        os.dup2(2, 1)
        job = self.job
        load_plugins()
        os.environ.update(dict(job.env))
        if job.target.effective_threads is not None:
            torch.set_num_threads(job.target.effective_threads)
        context = CheckContext(job, job.target, None, {}, lambda _tag: {}, self.dtype, self.dtype, job.fingerprint)
        context.results.update(self.results)
        context.options = self.options
        value = LocalizationCheck().run(context)
        return None if value is None else value.to_dict()


def _in_worker(
    job: Any, dtype: str, results: dict[str, Any], timeout_s: float, options: dict[str, Any] | None = None
) -> dict[str, Any] | str | None:
    """The value's document (None: nothing to localise), or why there is none."""
    from bakeoff.checks.localization import LocalizationCheck

    options = {**{k: o.default for k, o in LocalizationCheck.options.items()}, **(options or {})}
    # forked from this process's warm server (the trial's own, where this process ran it), unless
    # the target's environment switches must be set before anything imports
    launcher = FreshProcess(who="the localisation worker")
    if not job.env:
        preload = server_preload(parse_workload(job.workload_spec))
        launcher = FreshProcess(preload, who="the localisation worker", server=shared_server(preload))
    outcome = launcher.run(LocalizeJob(job, dtype, results, options), timeout_s)
    if outcome.ok:
        return outcome.value
    error = outcome.error
    if error.category == "timeout":
        return f"the localisation did not finish within {timeout_s:g} s"
    if error.category == "exception":
        return f"the localisation raised {error.type}: {error.message}"
    return error.message


def _localized(
    job: Any, dtype: str, result: TargetResult, timeout_s: float, options: dict | None = None, said: str = ""
) -> Any:
    """One target's localisation, run in a worker and dated (``said`` added to the reason of one
    that finished): its value, why there is none as a ``not_comparable`` value, or None when the
    check found nothing to localise."""
    from bakeoff.checks.localization import Localization

    checks = {k: v for k, v in result.checks.items() if k in ("correctness", "training")}
    outcome = _in_worker(job, dtype, checks, timeout_s, options)
    if outcome is None:
        return None
    if isinstance(outcome, dict):
        value = Localization.from_dict(outcome)
        empty = "" if value.verdict == "localized" else "no module call diverged"  # as the value says it
        value = replace(value, reason=(value.reason or empty) + said)
    else:
        value = Localization("not_comparable", reason=outcome)
    return replace(value, at=_now(), earlier=())


def split_off(checks: Sequence[Any]) -> tuple[tuple[Any, ...], Any]:
    """The check specs a target's session runs, and the localisation's spec (None if not asked):
    localisation runs after the session, in a worker of its own (:func:`localize_measured`)."""
    return tuple(c for c in checks if c.name != NAME), next((c for c in checks if c.name == NAME), None)


def localize_measured(
    results: Sequence[TargetResult],
    workload_spec: str,
    fingerprint: str,
    native_dtype: str,
    spec: Any,
    timeout_s: float,
    env: Sequence[tuple[str, str]] = (),
    progress: Callable[[str], None] | None = None,
) -> list[TargetResult]:
    """A trial's measured results, each failed one with its localisation (``spec``: the check's
    options) among its checks; a localisation that crashes, hangs past ``timeout_s`` or runs out
    of memory is that value's reason, and the result keeps everything it measured. ``env``: the
    environment switches the targets (not the reference) ran with. The reference says why it
    has none."""
    from bakeoff.checks.localization import LocalizationCheck
    from bakeoff.runner.job import TargetJob

    check, done = LocalizationCheck(), []
    for result in results:
        if result.status != "ok":
            done.append(result)
            continue
        why = check.not_applicable(result.target, result.is_reference)
        if why is not None:
            done.append(replace(result, skipped_checks={**result.skipped_checks, NAME: why}))
            continue
        if not needs_localizing(result):
            done.append(result)
            continue
        if progress:
            progress(f"localising {result.target.spec}")
        job = TargetJob(workload_spec, result.target, fingerprint, None, env=tuple(env))
        dtype = result.target.dtype or native_dtype
        value = _localized(job, dtype, result, timeout_s, dict(spec.options))
        done.append(result if value is None else replace(result, checks={**result.checks, NAME: value}))
    return done


def localize_stored(
    store: Any, run_id: str, target: str | None = None, timeout_s: float = 900.0, progress: Callable | None = None
) -> tuple[RunResult, list[tuple[str, Any]]]:
    """Localise the failed targets of a stored run (or the one named) and store each value, in
    front of the localisations stored before (kept as its ``earlier`` records).

    Returns:
        The run as stored before, and ``(target spec, Localization)`` per target localised.

    Raises:
        SpecError: the timeout is not a positive, finite number of seconds; the target is not
            in the run, is its reference, or did not fail; a target to localise cannot run here.
    """
    from bakeoff.checks.localization import Localization, kept_with
    from bakeoff.runner.job import TargetJob

    timeout_s = check_timeout(timeout_s)
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
    from bakeoff.target.detect import unavailable_reason
    from bakeoff.target.plugins import load_plugins

    load_plugins()  # as parsing the target would have: its device may be a plugin's
    missing = [(r.target.spec, unavailable_reason(r.target)) for r in chosen]
    missing = [(spec, reason) for spec, reason in missing if reason is not None]
    if missing:  # refused before anything runs or is stored: a record of the failure to run would hide the real one
        spec, reason = missing[0]
        raise SpecError(
            f"target {spec} of run {run.run_id} cannot run here: {reason}",
            hint="localise it where its device is"
            + ("" if target is not None or len(chosen) == len(missing) else ", or name another: RUN:TARGET"),
        )
    found = []
    for result in chosen:
        if progress:
            progress(f"localising {result.target.spec}")
        job = TargetJob(run.workload["spec"], result.target, run.fingerprint, None)
        dtype = result.target.dtype or run.workload.get("dtype") or "float32"
        value = _localized(job, dtype, result, timeout_s, said=" (localised after the run, here)")
        if value is None:
            continue

        def behind(stored: dict[str, Any] | None, latest: Any = value) -> dict[str, Any]:
            earlier = None if stored is None else Localization.from_dict(stored)
            # one stored without a date was the trial's own (one stored after the run says so)
            dated = "" if earlier is None or "after the run" in earlier.reason else run.created_at
            return kept_with(latest, earlier, dated).to_dict()

        stored = store.change_check_value(run.run_id, result.target.spec, NAME, behind)
        found.append((result.target.spec, Localization.from_dict(stored)))
    return run, found
