"""Running a bisection (see :mod:`bakeoff.verdicts.bisect` for what it decides).

Every trial runs in a fresh Python process (``python -m bakeoff.cli.bisect_trial PLAN``), so a
package put back is the one imported: it is installed at its before version, without its
dependencies, into a throwaway directory that goes first on that process's ``PYTHONPATH``
(pip fetches it as pip is configured: ``PIP_INDEX_URL``, ``PIP_FIND_LINKS``...). An environment
variable put back is set to its before value, or unset, in that process's environment. The
trials store their runs in a scratch knowledge base of their own, removed at the end: runs in
changed environments would otherwise become the newest runs ``regressions`` compares.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bakeoff.errors import WorkloadError
from bakeoff.launch.command import run_command
from bakeoff.launch.tempdirs import owned_tempdir
from bakeoff.stats import percentile
from bakeoff.verdicts.bisect import (
    Bisection,
    BisectStep,
    conclude,
    control_spread,
    judge_change,
    put_back,
    reproduced,
    within_reproduction,
)

__all__ = ["PARENT_ENV", "bisect_trial"]

#: How long one trial of a bisection may take (its own step timeouts apply inside it).
TRIAL_TIMEOUT_S = 1800.0
#: Names the bisecting process to each trial's process, which dies with it (a ``kill -9`` included).
PARENT_ENV = "BAKEOFF_BISECT_PARENT"
#: How long pip may take to fetch and install one package.
PIP_TIMEOUT_S = 900.0


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def _install(name: str, version: str, where: Path) -> str | None:
    """Install ``name==version`` alone into ``where``; None, or why it could not."""
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(where)]
    done = run_command([*command, f"{name}=={version}"], os.environ, PIP_TIMEOUT_S)
    if done.timed_out:
        return f"pip did not install {name}=={version} within {PIP_TIMEOUT_S:.0f} s"
    if done.code != 0:
        return f"pip could not install {name}=={version}: {_last_line(done.stderr or done.stdout)}"
    return None


def _trial(plan: dict[str, Any], db: Path, scratch: Path, env: Mapping[str, str]) -> tuple[str | None, str]:
    """One trial of ``plan`` in a fresh process: its run id, or None and why."""
    plan_file = scratch / f"plan-{len(list(scratch.glob('plan-*')))}.json"
    plan_file.write_text(json.dumps({"keywords": plan, "db": str(db)}))
    command = [sys.executable, "-m", "bakeoff.cli.bisect_trial", str(plan_file)]
    # the trial dies with this process: a kill -9 of the bisection leaves nothing running
    done = run_command(command, {**env, PARENT_ENV: str(os.getpid())}, TRIAL_TIMEOUT_S)
    if done.timed_out:
        return None, f"the trial did not finish within {TRIAL_TIMEOUT_S:.0f} s"
    lines = done.stdout.strip().splitlines()
    if done.code != 0 or not lines or not lines[-1].startswith("run "):
        return None, f"the trial failed (exit {done.code}): {_last_line(done.stderr or done.stdout)}"
    return lines[-1].split()[1], ""


def bisect_trial(
    plan: dict[str, Any],
    target: str,
    before: tuple[str, Sequence[float]],
    after: tuple[str, Sequence[float]],
    changes: Sequence[Any],
    here: Mapping[str, Any],
    threshold: float,
    workload: str,
    progress: Callable[[str], None] | None = None,
) -> Bisection:
    """Bisect one regressed target: the after run's trial ``plan`` (its :func:`bakeoff.api.trial`
    keywords) repeated here as it is, twice, and once per change in ``changes`` (environment
    keys, :class:`~bakeoff.verdicts.regressions.EnvironmentChange`) put back alone. ``before``
    and ``after`` are each run's id and the target's latency samples (ms); ``here`` is this
    machine's environment, flattened, to check that each change's after value is what runs."""
    from bakeoff.store import Store

    say = progress or (lambda _message: None)
    scratch = owned_tempdir("bisect")
    db = scratch / "bisect.db"
    plan = {**plan, "on": [target]}

    def samples(store: Store, run_id: str | None) -> tuple[float, ...]:
        if run_id is None:
            return ()
        result = store.get_run(run_id).result(target)
        return tuple(result.latency.samples_ms) if result is not None and result.latency is not None else ()

    try:
        say(f"bisect {target}: the trial as it is")
        first, why = _trial(plan, db, scratch, os.environ)
        if first is None:
            raise WorkloadError(
                f"the trial of {workload} on {target} as it is failed here, so nothing can be bisected: {why}",
                hint="run it with `bakeoff rerun` to see why",
            )
        tried: list[tuple[Any, str | None, str, bool]] = []  # change, run id, why not, whether it ran
        not_here = [c.key for c in changes if here.get(c.key) != c.after]  # as the after run had them
        for change in changes:
            key, was, now = change.key, change.before, change.after
            reason = put_back(key, was, now)
            if reason is None and here.get(key) != now:
                reason = f"this machine has {here.get(key)}, not the after run's {now}: it is not what runs here"
            if reason is not None:
                tried.append((change, None, reason, False))
                continue
            env = dict(os.environ)
            if key.startswith("env."):
                env.pop(key[4:], None)
                if was is not None:
                    env[key[4:]] = str(was)
            else:
                name = "torch" if key == "torch" else key.removeprefix("packages.")
                where = scratch / f"site-{len(tried)}"
                say(f"bisect {target}: installing {name}=={was} apart")
                failed = _install(name, str(was), where)
                if failed is not None:
                    tried.append((change, None, failed, False))
                    continue
                env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(where), env.get("PYTHONPATH")]))
            say(f"bisect {target}: {key} put back to {was}")
            run_id, why = _trial(plan, db, scratch, env)
            tried.append((change, run_id, why, True))
        say(f"bisect {target}: the trial as it is, again")
        last, why = _trial(plan, db, scratch, os.environ)
        store = Store.open(db, create=False)  # every trial has stored its run: read them once, here
        controls = [c for c in (samples(store, first), samples(store, last)) if c]
        pooled = [x for c in controls for x in c]
        spread = control_spread(controls)
        steps = []
        for change, run_id, why, ran in tried:
            taken = samples(store, run_id)
            if not taken or not pooled:
                verdict = "failed" if ran else "not tested"
                why = why or ("the target was not timed" if pooled else "the trial as it is was not timed")
                steps.append(BisectStep(change.key, change.before, change.after, verdict, why, run_id))
                continue
            verdict, ratio = judge_change(pooled, taken, spread, threshold)
            p50 = percentile(taken, 50)
            steps.append(BisectStep(change.key, change.before, change.after, verdict, "", run_id, p50, ratio))
        control_ms = percentile(pooled, 50) if pooled else None
        before_ms, after_ms = percentile(before[1], 50), percentile(after[1], 50)
        still = reproduced(before[1], pooled, spread, threshold, after_ms / before_ms) if pooled else "not conclusive"
        steps = list(within_reproduction(still, steps))
        return Bisection(
            workload=workload,
            target=target,
            before_run=before[0],
            after_run=after[0],
            before_p50_ms=before_ms,
            after_p50_ms=after_ms,
            control_p50_ms=control_ms,
            control_spread=spread,
            reproduced=still,
            steps=tuple(steps),
            conclusion=conclude(still, steps, control_ms, before_ms, after_ms, not_here),
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
