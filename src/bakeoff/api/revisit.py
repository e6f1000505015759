"""Revisiting stored runs: what changed since an earlier environment (:func:`regressions`,
:func:`compare`), which environment change caused a slow-down (:func:`bisect`), the same
trials again here (:func:`rerun`, from the keywords a stored run gives back), the runs stored
(:func:`history`), and what a run says to do: its decision, its remedies and where its failed
targets go wrong (:func:`localize`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from bakeoff.api.common import PathLike
from bakeoff.api.distributed import dist
from bakeoff.api.fitting import fit
from bakeoff.api.knowledge_base import show
from bakeoff.api.scripts import exec_script
from bakeoff.api.services import serve_service
from bakeoff.api.trials import trial
from bakeoff.results.values import RunResult
from bakeoff.settings import LOCALIZE_OPTIONS, ExecSettings, TrialSettings
from bakeoff.store.db import RunSummary, Store

if TYPE_CHECKING:
    from bakeoff.verdicts.bisect import Bisection
    from bakeoff.verdicts.decision import Decision
    from bakeoff.verdicts.regressions import Comparison, Thresholds
    from bakeoff.verdicts.remedies import Remedy


def regressions(
    *,
    db: PathLike | None = None,
    workload: str | None = None,
    target: str | None = None,
    thresholds: Thresholds | None = None,
    against: str | None = None,
) -> list[Comparison]:
    """Each workload + target's latest result against the newest earlier one from a different
    environment, or with ``against`` (a tag) the newest earlier run carrying that tag, whatever
    its environment; metric by metric (see :mod:`bakeoff.verdicts.regressions`).

    Raises:
        StoreError: ``against`` names no run.
    """
    from bakeoff.store.selection import run_headers
    from bakeoff.verdicts.regressions import compare_pair, pair_runs

    store = Store.open(db, create=False)
    baseline = None
    if against is not None:
        baseline = set(store.run_ids_with_tag(against))
        if not baseline:
            from bakeoff.errors import StoreError

            raise StoreError(
                f"no runs tagged {against!r} to compare against",
                hint="tag the baseline runs with `bakeoff tag RUN_ID NAME`; `bakeoff history` lists runs",
            )
    pairs = pair_runs((h.as_tuple() for h in run_headers(store, workload=workload, target=target)), baseline)
    loaded: dict[str, RunResult] = {}

    def run(run_id: str) -> RunResult:
        if run_id not in loaded:
            loaded[run_id] = store.get_run(run_id)
        return loaded[run_id]

    return [
        compare_pair(run(a), run(a).result(spec, variant), run(b), run(b).result(spec, variant), thresholds)
        for (_, spec, variant), a, b in pairs
    ]


def _run_and_target(store: Store, ref: str) -> tuple[RunResult, str | None]:
    run_id, _, spec = ref.partition(":")
    return store.get_run(run_id), spec or None


def compare(a: str, b: str, *, db: PathLike | None = None, thresholds: Thresholds | None = None) -> list[Comparison]:
    """``b`` against ``a``: two runs (target by target, for the targets both have) or two
    ``RUN:TARGET`` results (e.g. two targets of one run).

    Raises:
        StoreError: an unknown or ambiguous run id.
        SpecError: a target the run does not have, or two runs with no target in common.
    """
    from bakeoff.errors import SpecError
    from bakeoff.verdicts.regressions import compare_pair

    store = Store.open(db, create=False)
    (run_a, spec_a), (run_b, spec_b) = _run_and_target(store, a), _run_and_target(store, b)
    if (spec_a is None) != (spec_b is None):
        raise SpecError(f"cannot compare {a!r} with {b!r}", hint="give two runs, or two RUN:TARGET results")
    if spec_a is not None and spec_b is not None:
        picked = []
        for run, spec in ((run_a, spec_a), (run_b, spec_b)):
            try:
                picked.append(run.result(spec))
            except KeyError:
                have = ", ".join(dict.fromkeys(r.target.spec for r in run.results))
                raise SpecError(f"run {run.run_id} has no target {spec!r}", hint=f"it has {have}") from None
        return [compare_pair(run_a, picked[0], run_b, picked[1], thresholds)]
    keys_b = {(r.target.spec, r.variant) for r in run_b.results}
    common = [r for r in run_a.results if (r.target.spec, r.variant) in keys_b]
    if not common:
        raise SpecError(
            f"runs {run_a.run_id} and {run_b.run_id} have no target in common",
            hint="compare two results instead, e.g. RUN_A:cpu+inductor RUN_B:cuda",
        )
    return [compare_pair(run_a, r, run_b, run_b.result(r.target.spec, r.variant), thresholds) for r in common]


def bisect(
    *,
    db: PathLike | None = None,
    workload: str | None = None,
    target: str | None = None,
    thresholds: Thresholds | None = None,
    against: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[list[Comparison], list[Bisection]]:
    """:func:`regressions`, then a bisection of each trial whose target's median latency moved
    beyond the threshold in the bad direction (regressed, or not conclusive on noisy timings):
    which environment change, put back alone, moves it back (see :mod:`bakeoff.verdicts.bisect`).
    Script runs are not bisected. The bisection's trials are stored apart and removed.

    Raises:
        StoreError: ``against`` names no run.
        SpecError: a regressed run's settings can no longer be repeated.
        WorkloadError: the trial as it is fails here.
    """
    from bakeoff.env import capture_environment
    from bakeoff.runner.bisect import bisect_trial
    from bakeoff.verdicts.regressions import Thresholds, flattened

    t = thresholds or Thresholds()
    found = regressions(db=db, workload=workload, target=target, thresholds=t, against=against)
    store = Store.open(db, create=False)
    here = flattened(capture_environment())
    bisections = []
    for comparison in found:
        latency = next((m for m in comparison.metrics if m.metric == "p50_ms"), None)
        if latency is None or latency.change is None or latency.change <= 1 + t.latency:
            continue
        before, after = store.get_run(comparison.before_run), store.get_run(comparison.after_run)
        if after.workload.get("kind") in ("script", "service"):  # no trial to bisect
            continue
        was = before.result(comparison.target, comparison.variant)
        now = after.result(comparison.after_target or comparison.target, comparison.variant)
        if was is None or now is None or was.latency is None or now.latency is None:
            continue
        bisections.append(
            bisect_trial(
                rerun_keywords(after),
                now.target.spec,
                (before.run_id, was.latency.samples_ms),
                (after.run_id, now.latency.samples_ms),
                comparison.environment.changes,
                here,
                t.latency,
                comparison.workload,
                progress,
            )
        )
    return found, bisections


def rerun_keywords(run: RunResult) -> dict[str, Any]:
    """The :func:`trial` keywords that repeat ``run``: its workload, targets (as listed, padded
    variants come back from the same buckets) and its settings, read back from what it stored
    (see :meth:`~bakeoff.settings.TrialSettings.from_dict`).

    Raises:
        SpecError: a stored setting this release no longer accepts.
    """
    if run.workload.get("kind") == "script":
        return {"exec": exec_keywords(run), "env": []}
    if run.workload.get("kind") == "service":
        return {"serve": serve_keywords(run), "env": []}
    if run.workload.get("kind") == "fit":
        return {"fit": fit_keywords(run), "env": []}
    if run.workload.get("kind") == "dist":
        return {"dist": dist_keywords(run), "env": []}
    return {
        "workload": run.workload["spec"],
        "on": list(dict.fromkeys(r.target.spec for r in run.results if r.variant == "as-is")),
        **TrialSettings.from_dict(run.settings).options(),
    }


def exec_keywords(run: RunResult) -> dict[str, Any]:
    """The :func:`exec_script` keywords that repeat a stored script run: the same script, argv,
    working directory, targets, reference and options, read back from its settings.

    Raises:
        SpecError: the run does not say where it ran (stored by an older bakeoff).
    """
    from bakeoff.errors import SpecError

    stored = run.settings.get("exec") or {}
    if "workdir" not in stored:
        raise SpecError(
            f"run {run.run_id} does not record the directory its script ran in",
            hint="run the same bakeoff exec command again, from that directory",
        )
    return {
        "script": run.workload["details"]["script"],
        "args": list(stored["argv"]),
        "on": [r.target.spec for r in run.results if not r.is_reference],
        **ExecSettings.from_run(run.settings).options(),
        "workdir": stored["workdir"],
    }


def serve_keywords(run: RunResult) -> dict[str, Any]:
    """The :func:`serve_service` keywords that repeat a stored service run: the same command,
    targets, reference and settings, read back from its settings."""
    from bakeoff.settings.serve import ServeSettings

    return {
        "command": run.settings["serve"]["command"],
        "on": [r.target.spec for r in run.results if not r.is_reference],
        **ServeSettings.from_run(run.settings).options(),
    }


def fit_keywords(run: RunResult) -> dict[str, Any]:
    """The :func:`fit` keywords that repeat a stored fit map: the same workload, target and
    settings, read back (and checked again) from what it stored.

    Raises:
        SpecError: a stored setting this release no longer accepts.
    """
    from bakeoff.errors import SpecError
    from bakeoff.settings.fit import FIT_OPTIONS
    from bakeoff.settings.option import read_options

    stored = dict(run.settings["fit"])
    on = stored.pop("on")
    try:
        values = read_options(FIT_OPTIONS, stored, "stored fit setting")
    except TypeError as exc:  # a setting of another release
        raise SpecError(f"run {run.run_id}: {exc}", hint="repeat it with the same bakeoff fit command") from None
    return {"workload": run.workload["spec"], "on": on, **values}


def dist_keywords(run: RunResult) -> dict[str, Any]:
    """The :func:`dist` keywords that ask a stored ``bakeoff dist`` question again: the same
    check, target and settings, read back (and checked again) from what it stored.

    Raises:
        SpecError: a stored setting this release no longer accepts.
    """
    from bakeoff.errors import SpecError
    from bakeoff.settings.dist import DIST_OPTIONS
    from bakeoff.settings.option import read_options

    stored = dict(run.settings["dist"])
    on = stored.pop("on", None)
    hint = "repeat it with the same bakeoff dist command"
    if not isinstance(on, str):
        raise SpecError(f"run {run.run_id}: its stored settings name no target", hint=hint)
    try:
        values = read_options(DIST_OPTIONS, stored, "stored dist setting")
    except TypeError as exc:  # a setting of another release
        raise SpecError(f"run {run.run_id}: {exc}", hint=hint) from None
    except SpecError as exc:
        raise SpecError(f"run {run.run_id}: {exc.message}", hint=exc.hint or hint) from None
    return {"workload": run.workload["spec"].removeprefix("dist:"), "on": on, **values}


def rerun(
    run_id: str | None = None,
    *,
    workload: str | None = None,
    tag: str | None = None,
    db: PathLike | None = None,
    isolate: bool | None = None,
    refresh_baseline: bool = False,
    allow_code_env: bool = False,
    progress: Callable[[str], None] | None = None,
) -> list[RunResult]:
    """Repeat stored trials in the current environment: one run, the latest run of a workload,
    or (``tag`` alone) every run with a tag (identical trials once). The new runs carry ``tag``
    when one is given, so a series repeated by its tag stays one series. ``isolate`` overrides
    the stored choice of worker processes. A stored script run (``bakeoff exec``) is repeated
    by :func:`exec_script` with its stored keywords (:func:`exec_keywords`), a service run
    (``bakeoff serve``) by :func:`serve_service` (:func:`serve_keywords`), a fit map
    (``bakeoff fit``) by :func:`fit` (:func:`fit_keywords`).

    The stored environment switches are applied again and announced through ``progress``.
    Switches that load code (``LD_PRELOAD``, ``PYTHONPATH``, ...; see
    :mod:`bakeoff.runner.switches`) are refused unless ``allow_code_env``: a run imported from
    someone else's export must not run code of their choosing here.

    Raises:
        SpecError: neither or both of run_id and workload, and no tag; a tag that cannot be one;
            a code-loading switch without ``allow_code_env``.
        StoreError: nothing matches.
    """
    from bakeoff.errors import SpecError, StoreError
    from bakeoff.store.annotations import check_tag

    chosen = sum(x is not None for x in (run_id, workload))
    if chosen > 1 or (chosen == 0 and tag is None):
        raise SpecError("rerun needs one of RUN_ID, --workload or --tag", hint="e.g. bakeoff rerun 3f2a")
    if tag is not None:
        check_tag(tag)  # before minutes of trials, not after
    store = Store.open(db, create=False)
    if run_id is not None:
        ids = [store.resolve_run_id(run_id)]
    elif workload is not None:
        latest = store.list_runs(limit=1, workload_spec=workload)
        if not latest:
            raise StoreError(f"no runs of {workload!r} to repeat", hint="run `bakeoff history` to list workloads")
        ids = [latest[0].run_id]
    else:
        ids = list(store.run_ids_with_tag(tag))
        if not ids:
            raise StoreError(f"no runs tagged {tag!r} to repeat", hint="tag runs with `bakeoff tag RUN_ID TAG`")
    from bakeoff.store.transfer import check_rerunnable

    repeated = [store.get_run(i) for i in ids]
    for stored in repeated:  # before anything runs: an import's code never runs
        check_rerunnable(store, stored)
    plans: list[dict[str, Any]] = []
    for stored in repeated:  # several tagged runs of one trial are repeated once
        plan = rerun_keywords(stored)
        if plan not in plans:
            plans.append(plan)
    from bakeoff.runner.switches import loads_code

    switches = list(dict.fromkeys(s for plan in plans for s in plan["env"]))
    risky = [s for s in switches if loads_code(s.partition("=")[0])]
    if risky and not allow_code_env:
        raise SpecError(
            f"the stored run would set {', '.join(risky)}, which can load code into bakeoff's processes",
            hint="check where the run came from; pass --allow-code-env to apply it anyway",
        )
    if switches and progress:
        progress("applying the stored environment switches: " + ", ".join(switches))
    runs = []
    for plan in plans:
        if "exec" in plan:  # a script run: the same script, again, from the directory it ran in
            runs.append(exec_script(**plan["exec"], db=db, progress=progress))
        elif "serve" in plan:  # a service run: the same command line under the same traffic
            runs.append(serve_service(**plan["serve"], db=db, progress=progress))
        elif "fit" in plan:  # a fit map: the same grid on the same target
            runs.append(store.get_run(fit(**plan["fit"], db=db, progress=progress).run_id))
        elif "dist" in plan:  # a distributed check: the same ladder on the same target
            runs.append(store.get_run(dist(**plan["dist"], db=db, progress=progress).run_id))
        else:
            if isolate is not None:
                plan["isolate"] = isolate
            if not plan["isolate"]:
                plan["cold_compile_cache"] = False
            runs.append(trial(**plan, db=db, refresh_baseline=refresh_baseline, progress=progress))
        if tag is not None:
            store.add_tag(runs[-1].run_id, tag)
    return runs


def history(
    *, db: PathLike | None = None, limit: int = 20, workload: str | None = None, tag: str | None = None
) -> list[RunSummary]:
    """The newest runs first, optionally only one workload's or one tag's (the database must exist)."""
    return Store.open(db, create=False).list_runs(limit=limit, workload_spec=workload, tag=tag)


def decide(run: str | RunResult, *, prices: Iterable[str] | None = None, db: PathLike | None = None) -> Decision:
    """The decision for a run (a stored run's id, or the run): which target to pick and why, by
    :data:`~bakeoff.verdicts.decision.RULE`. ``prices`` (``"cpu=0.34/h"``...) rank qualifying
    targets by cost per million requests; None uses the prices the run was given.

    Raises:
        SpecError: a malformed price.
        StoreError: no such run.
    """
    from bakeoff.analysis.cost import parse_prices
    from bakeoff.verdicts.decision import decide_run

    found = show(run, db=db) if isinstance(run, str) else run
    return decide_run(found, None if prices is None else parse_prices(list(prices)))


def remedies(run: str | RunResult, *, db: PathLike | None = None) -> dict[str, list[Remedy]]:
    """What each target of a run (a stored run's id, or the run) would take, most effect first,
    by target spec: see :mod:`bakeoff.verdicts.remedies`.

    Raises:
        StoreError: no such run.
    """
    from bakeoff.verdicts.remedies import what_it_takes

    return what_it_takes(show(run, db=db) if isinstance(run, str) else run)


def localize(
    run: str,
    *,
    target: str | None = None,
    db: PathLike | None = None,
    timeout_s: float = LOCALIZE_OPTIONS["timeout_s"].default,
    progress: Callable[[str], None] | None = None,
) -> list[tuple[str, Any]]:
    """Find where a stored run's failed targets go wrong (or ``target``'s), store each result
    with the run and return ``(target spec, Localization)`` pairs; ``run`` may be
    ``RUN_ID:TARGET``. See :mod:`bakeoff.checks.localization`.

    Raises:
        SpecError: the target is not in the run, or did not fail.
        StoreError: no such run.
    """
    from bakeoff.runner.localize import localize_stored
    from bakeoff.store.transfer import check_rerunnable

    if target is None and ":" in run:
        run, target = run.split(":", 1)
    store = Store.open(db, create=False)
    check_rerunnable(store, store.get_run(store.resolve_run_id(run)))  # an import's code never runs
    return localize_stored(store, run, target, timeout_s, progress)[1]
