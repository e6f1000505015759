"""The keyword API. The CLI calls exactly these functions; so can your own code.

Example:
    >>> import bakeoff
    >>> run = bakeoff.trial("arch:llama", on=["cpu", "cpu+aot_eager"], db="results.db")
    >>> run.result("cpu+aot_eager").correctness.verdict
    'pass'
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from bakeoff.results.values import BaselineInfo, RunResult
from bakeoff.settings import TrialSettings, describe_options
from bakeoff.store.db import RunSummary, Store

if TYPE_CHECKING:
    from bakeoff.report.evidence import Evidence
    from bakeoff.store.annotations import Note
    from bakeoff.store.sweeps import SweepRecord
    from bakeoff.store.transfer import ExportSummary, ImportSummary
    from bakeoff.sweep.changes import SweepChanges
    from bakeoff.sweep.run import CellDone
    from bakeoff.verdicts.bisect import Bisection
    from bakeoff.verdicts.coverage import Coverage
    from bakeoff.verdicts.decision import Decision
    from bakeoff.verdicts.plan import Plan
    from bakeoff.verdicts.regressions import Comparison, Thresholds
    from bakeoff.verdicts.remedies import Remedy
    from bakeoff.workload.profile import InputProfile

__all__ = [
    "baseline",
    "bisect",
    "compare",
    "coverage",
    "db_status",
    "db_upgrade",
    "decide",
    "demo",
    "exec_script",
    "export_runs",
    "history",
    "import_runs",
    "note",
    "notes_and_tags",
    "plan",
    "regressions",
    "remedies",
    "report",
    "rerun",
    "show",
    "sweep",
    "sweep_regressions",
    "sweeps",
    "tag",
    "targets",
    "trial",
    "workloads",
]

PathLike = str | os.PathLike[str]
_DEFAULT = TrialSettings()


def _targets(on: str | Iterable[str]) -> list:
    from bakeoff.target.detect import check_backend_name, extra_devices
    from bakeoff.target.spec import parse_targets

    parsed = parse_targets([on] if isinstance(on, str) else list(on), extra_devices())
    for target in parsed:
        if target.backend is not None:
            check_backend_name(target.backend)
    return parsed


def _would_create(db: PathLike | None) -> bool:
    """Whether opening ``db`` would create a new SQLite file."""
    from pathlib import Path

    from bakeoff.store.connection import resolve_db_url

    url = resolve_db_url(db)
    return url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists()


def trial(
    workload: str,
    on: str | Iterable[str] = "cpu",
    *,
    db: PathLike | None = None,
    isolate: bool = _DEFAULT.isolate,
    timeout_s: float = _DEFAULT.timeout_s,
    min_samples: int = _DEFAULT.timing.min_samples,
    min_seconds: float = _DEFAULT.timing.min_seconds,
    refresh_baseline: bool = _DEFAULT.refresh_baseline,
    profile: str | os.PathLike[str] | InputProfile | None = _DEFAULT.profile,
    pad_to_buckets: str | int | Iterable[int] | None = _DEFAULT.pad_to_buckets,
    max_buckets: int = _DEFAULT.max_buckets,
    cold_compile_cache: bool = _DEFAULT.cold_cache,
    env: Iterable[str] = _DEFAULT.env,
    scenarios: str | Iterable[str] = _DEFAULT.scenarios,
    requirements: Iterable[str] | None = _DEFAULT.requirements,
    interleave: bool = _DEFAULT.interleave,
    replicates: int = _DEFAULT.replicates,
    process_spread: float | None = _DEFAULT.process_spread,
    checks: str | Iterable[str] = _DEFAULT.checks,
    prices: str | Iterable[str] = _DEFAULT.prices,
    progress: Callable[[str], None] | None = None,
    workers: Any = None,
) -> RunResult:
    """Run ``workload`` on each target in ``on`` and store the run.

    Args:
        workload: a workload spec (``arch:llama``, ``hf:./model``, ``py:models.py:make``).
        on: target specs, as a list or one comma-separated string.
        db: database path or URL (default ``BAKEOFF_DB`` or ``./bakeoff.db``).
        {settings}
        progress: called with a short message as each step starts.
        workers: the reference's worker, started earlier by
            :func:`bakeoff.runner.trial.start_workers` (the CLI starts it before it imports the
            rest); the trial takes it over and ends it. None: the trial starts its own.

    Every setting is described, defaulted and checked once, in :mod:`bakeoff.settings`.

    Raises:
        SpecError, WorkloadError, StoreError: bad input; nothing is stored.
    """
    from bakeoff.runner.trial import run_trial, start_workers
    from bakeoff.workload.base import parse_workload

    try:
        spec = parse_workload(workload)
        settings = TrialSettings.from_options(
            isolate=isolate,
            timeout_s=timeout_s,
            min_samples=min_samples,
            min_seconds=min_seconds,
            refresh_baseline=refresh_baseline,
            profile=profile,
            pad_to_buckets=pad_to_buckets,
            max_buckets=max_buckets,
            cold_compile_cache=cold_compile_cache,
            env=env,
            scenarios=scenarios,
            requirements=requirements,
            interleave=interleave,
            replicates=replicates,
            process_spread=process_spread,
            checks=checks,
            prices=prices,
        )
        # the reference's worker starts importing now, while this process parses the targets
        # (which imports torch) and builds the workload; run_trial ends it however the trial ends
        if workers is None:
            workers = start_workers(spec, settings)
        parsed = _targets(on)
        # an existing knowledge base is opened now (a bad one fails before any model is built);
        # a new one only once the workload has built and run, so bad input creates no database
        store = (lambda: Store.open(db)) if _would_create(db) else Store.open(db)
    except BaseException:
        if workers is not None:
            workers.close()
        raise
    return run_trial(store, spec, parsed, settings, progress, workers=workers)


if trial.__doc__:  # the settings' lines come from their one description (absent under python -OO)
    trial.__doc__ = trial.__doc__.replace("{settings}", describe_options(" " * 8))


def exec_script(
    script: PathLike,
    args: Iterable[str] = (),
    on: str | Iterable[str] = "cpu",
    *,
    db: PathLike | None = None,
    reference: str | None = None,
    map_devices: str | Iterable[str] = ("cuda",),
    strict: bool = False,
    capture: str | Iterable[str] = (),
    timeout_s: float = _DEFAULT.timeout_s,
    seed: int = 0,
    audit: bool = True,
    workdir: PathLike | None = None,
    files: bool = True,
    capture_modules: str | Iterable[str] = (),
    repeats: int = 0,
    progress: Callable[[str], None] | None = None,
) -> RunResult:
    """Run a script unchanged: as the reference, then on each target with its devices remapped;
    compare what it captured, keep the ledger of rewrites, store the run.

    Args:
        script: the script's path; it runs in a copy of the current working directory.
        args: its arguments (``sys.argv[1:]``).
        on: targets, as a list or one comma-separated string: devices (``emu``, ``xpu``,
            ``cpu``...), or a device with a ``torch.compile`` backend (``cpu+inductor``,
            ``emu+aot_eager?dynamic=true``), which compiles the script's root module calls
            (:mod:`bakeoff.script.compiled`).
        reference: the device the reference runs on. None: the script's own device (the first
            of ``map_devices``) where it exists here, else ``cpu``.
        map_devices: the device names the script uses that are remapped (``cuda``), each to each
            target's device (and the reference's where it does not run as written); ``cuda=emu``
            says so explicitly, and must name the targets' device.
        strict: a rewrite that may change numerics (autocast the target cannot honour, a dtype
            downgrade, a library's answer to ``torch.cuda.is_available()``) fails the run.
        capture: ``module:function`` names whose return values are compared, call by call
            (losses passed to ``backward()`` and ``bakeoff.capture(name, value)`` always are).
        timeout_s: a run still going after this long is stopped and recorded as a timeout.
        audit: audit where each target's work ran over the whole script (its first 20,000 op
            calls) and what torch.compile did; False leaves placement "not audited".
        workdir: the directory each run gets a copy of and ``script`` is relative to (None: the
            current working directory).
        files: compare the files each run wrote in its copy of the working directory
            (safetensors, npy, npz and JSON, read without unpickling; see
            :mod:`bakeoff.script.outputs`) with the reference's; False ignores them.
        capture_modules: glob patterns (``*.mlp``, ``Linear``) of module qualified names or
            class names whose outputs are compared call by call, as ``module:QUALNAME``
            captures (at most 8 calls per module; see :mod:`bakeoff.script.modules`);
            ``@roots`` the root module calls (the model the script calls). None given: the
            root calls at a small budget (4 calls of each, 32 MiB); ``none``: no module call.
        repeats: time the reference and each target over this many more runs, without the audit
            or ``capture``'s tracing (the first run stays the evidence): their latency, and a
            speed-up from two or more. 0: the first run's wall time, a single observation.

    Raises:
        SpecError: bad input (a missing script, an unknown target); nothing is stored.
    """
    from pathlib import Path

    from bakeoff.errors import SpecError
    from bakeoff.runner.script import exec_script as run_exec
    from bakeoff.script.modules import DEFAULT, check_patterns
    from bakeoff.target.detect import unavailable_reason
    from bakeoff.target.spec import parse_target

    path = Path(script)
    folder = Path.cwd() if workdir is None else Path(workdir)
    if not folder.is_dir():
        raise SpecError(f"no working directory at {folder}", hint="give the directory the script runs in")
    if not (folder / path).is_file():
        raise SpecError(f"no script at {path}", hint="give the path of a Python script")
    from bakeoff.settings import SEED, TIMEOUT

    TIMEOUT.check(timeout_s, "timeout_s")  # nan would disable it; a negative seed is no seed
    SEED.check(seed, "seed")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 0:
        raise SpecError(f"repeats {repeats!r}", hint="give a whole number of timing runs, 0 or more")
    given = [map_devices] if isinstance(map_devices, str) else list(map_devices)
    entries = [part.strip() for text in given for part in text.split(",") if part.strip()]
    sources = [entry.partition("=")[0].strip() for entry in entries]
    if not sources or any(not s.isidentifier() for s in sources):
        raise SpecError(f"--map {','.join(entries) or '(empty)'}", hint="name the device types the script uses: cuda")
    named = {entry.partition("=")[2].strip() for entry in entries if "=" in entry}
    names = [capture] if isinstance(capture, str) else list(capture)
    for name in names:
        module, _, function = name.partition(":")
        if not module or not function:
            raise SpecError(f"--capture {name}", hint="give module:function, e.g. infer:postprocess")
    patterns = [capture_modules] if isinstance(capture_modules, str) else list(capture_modules)
    patterns = patterns or list(DEFAULT)
    problem = check_patterns(patterns)
    if problem is not None:
        raise SpecError(f"--capture-modules {problem[0]!r}", hint=problem[1])
    parsed = _targets(on)
    as_written = reference is None and unavailable_reason(parse_target(sources[0])) is None
    ref = parse_target(reference or ("cpu" if not as_written else sources[0]))
    if ref.is_compiled or ref.dtype or ref.amp:
        raise SpecError(f"--reference {ref.spec}", hint="the reference is a device: cpu, cuda, xpu...")
    remapped = {t.torch_device for t in parsed if t != ref}
    if named and named != remapped:  # --map cuda=emu names the targets' device: it must be theirs
        raise SpecError(
            f"--map {','.join(entries)}: the targets run on {', '.join(sorted(remapped)) or 'the reference only'}",
            hint="each run's devices are remapped to its target's device: give --map cuda, or --on the device named",
        )
    from bakeoff.store.connection import resolve_db_url

    url = resolve_db_url(db)  # the knowledge base is never copied into a run's working directory
    keep_out = [Path(url.removeprefix("sqlite:///"))] if url.startswith("sqlite:///") else []
    store = (lambda: Store.open(db)) if _would_create(db) else Store.open(db)
    return run_exec(
        store, path, list(args), parsed, reference=ref, source_devices=sources, strict=strict, captures=names,
        timeout_s=timeout_s, seed=seed, as_written=as_written or ref.device in sources, audit=audit,
        progress=progress, keep_out=keep_out, workdir=folder, files=files, capture_modules=patterns,
        repeats=repeats,
    )  # fmt: skip


def plan(
    workload: str,
    on: str | Iterable[str] = "cpu",
    *,
    budget: str | float = "10min",
    db: PathLike | None = None,
    progress: Callable[[str], None] | None = None,
    **settings: Any,
) -> Plan:
    """Search the adjustments for ``workload`` on the targets in ``on`` within ``budget``
    (``"10min"``, ``"90s"``, or seconds) and recommend the cheapest (with prices) or fastest
    variant that is correct, on its device and meets every requirement; see
    :mod:`bakeoff.runner.plan`. Every stage's run is stored, tagged ``plan-RUN_ID`` (the first
    stage's run), so ``bakeoff report --tag`` shows them together. ``settings`` are
    :func:`trial`'s keywords (``profile``, ``requirements``, ``prices``, ``min_samples``...).

    Raises:
        SpecError, WorkloadError, StoreError: bad input; nothing is stored.
        TypeError: a keyword that is not a trial setting.
    """
    from bakeoff.runner.plan import parse_budget, run_plan
    from bakeoff.runner.trial import run_trial
    from bakeoff.workload.base import parse_workload

    spec = parse_workload(workload)
    parsed = _targets(on)
    seconds = parse_budget(budget) if isinstance(budget, str) else float(budget)
    trial_settings = TrialSettings.from_options(**settings)
    opened: list[Store] = []

    def store() -> Store:  # opened once, and (for a new file) only after the workload ran
        if not opened:
            opened.append(Store.open(db))
        return opened[0]

    def one_trial(targets: Any, stage: TrialSettings) -> RunResult:
        return run_trial(store() if opened or not _would_create(db) else store, spec, targets, stage, progress)

    named: list[str] = []

    def tag(run_id: str) -> str:  # every stage's run carries the first stage's plan-RUN tag
        named.append(named[0] if named else f"plan-{run_id}")
        store().add_tag(run_id, named[-1])
        return named[-1]

    return run_plan(one_trial, spec.spec, parsed, trial_settings, seconds, progress or (lambda _line: None), tag)


def baseline(
    workload: str, *, db: PathLike | None = None, dtypes: Iterable[str] = (), refresh: bool = False
) -> tuple[BaselineInfo, list[str]]:
    """Preserve (or reuse) the reference outputs of ``workload``; returns the baseline and notes."""
    from bakeoff.checks.baseline import run_eagerly
    from bakeoff.env import capture_environment
    from bakeoff.errors import SpecError
    from bakeoff.runner.trial import ensure_baseline
    from bakeoff.target.spec import DTYPE_ALIASES
    from bakeoff.workload.registry import build_workload

    names = []
    for dtype in dtypes:
        if dtype.lower() not in DTYPE_ALIASES:
            raise SpecError(f"unknown dtype {dtype!r}", hint="use one of fp32, bf16, fp16, fp64")
        names.append(DTYPE_ALIASES[dtype.lower()])
    built = build_workload(workload)
    if _would_create(db):
        run_eagerly(built)  # refused as bad input before a new database is created
    store = Store.open(db)
    return ensure_baseline(store, built, capture_environment(), names, refresh)


def targets() -> dict[str, list[dict[str, Any]]]:
    """Devices and torch.compile backends as seen from this process, with availability."""
    from bakeoff.target.detect import list_backends, list_devices

    return {"devices": [d.to_dict() for d in list_devices()], "backends": [b.to_dict() for b in list_backends()]}


def workloads() -> dict[str, Any]:
    """Workload kinds with their syntax, and the architecture names ``arch:`` accepts."""
    from bakeoff.workload.base import KINDS
    from bakeoff.workload.hf import ARCH_DEFAULTS, INPUT_DEFAULTS, list_architectures

    return {
        "kinds": KINDS,
        "architectures": list_architectures(),
        "arch_options": {k: v[1] for k, v in ARCH_DEFAULTS.items()} | INPUT_DEFAULTS,
    }


def checks() -> list[dict[str, Any]]:
    """The registered checks, in the order they run (bakeoff's own, then plugins'): each
    one's name, title, where it comes from, its options (type, default, minimum, what it
    does) and the metrics it offers to requirements."""
    from bakeoff.checks.registry import is_builtin, registered_checks

    return [
        {
            "name": check.name,
            "title": check.title,
            "source": "bakeoff" if is_builtin(check) else f"plugin {type(check).__module__.partition('.')[0]}",
            "runs": "on request (--check NAME)" if getattr(check, "on_request", False) else "always",
            "options": {
                key: {"type": o.kind.__name__, "default": o.default, "minimum": o.minimum, "help": o.help}
                for key, o in check.options.items()
            },
            "requirement_metrics": {name: what for name, (_kind, what) in check.offers.items()},
        }
        for check in registered_checks()
    ]


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
    timeout_s: float = 900.0,
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


#: ``timing=`` of a sweep: the trial's timing minimums. A sweep grades coverage, not speed:
#: ``none`` still times one call (every session does), ``full`` is a trial's default.
SWEEP_TIMING = {
    "none": {"min_samples": 1, "min_seconds": 0.0},
    "quick": {"min_samples": 10, "min_seconds": 0.1},
    "full": {},
}


def sweep(
    population: str | None = None,
    on: str | Iterable[str] | None = None,
    *,
    db: PathLike | None = None,
    resume: str | None = None,
    timing: str | None = None,
    timeout_s: float | None = None,
    checks: str | Iterable[str] = (),
    env: Iterable[str] = (),
    limit: int | None = None,
    progress: Callable[[CellDone], None] | None = None,
    status: Callable[[str], None] | None = None,
    executor: str = "local",
    ray_address: str | None = None,
) -> Coverage:
    """Run every workload of ``population`` on the targets ``on``, storing each cell as it
    finishes, and return the coverage; ``resume`` (a sweep id) finishes an interrupted sweep
    with its own population, targets and settings instead (giving any of them then is refused:
    a resume must not look as if it had changed them).

    Args:
        population: ``arch:all``, ``arch:causal_lm``, ``arch:base`` or a file of workload specs.
        on: target specs, as a list or one comma-separated string (default ``cpu``).
        timing: ``none``, ``quick`` (the default) or ``full`` (see :data:`SWEEP_TIMING`).
        timeout_s: the most a target's step may take (default 600 s); longer is that cell's
            timeout.
        checks: options for checks (``training?steps=5`` turns on an on-request check).
        env: ``KEY=VALUE`` switches set while each target runs.
        limit: run at most this many pending workloads now (the rest stay pending).
        progress: called before the first cell (with the sweep's id) and after each;
            ``status`` with each workload as it starts (and, on Ray, the cluster's state).
        executor: ``local`` (worker processes here) or ``ray`` (one Ray task per cell): how this
            invocation runs, not part of the sweep (one started locally may resume on Ray).
        ray_address: the Ray cluster to use (``auto``, ``ray://host:port``); None starts a
            local cluster for the sweep and stops it at the end.

    Raises:
        SpecError: an unknown population or target, a malformed file or setting, an unknown
            executor, ray missing or a resource the local Ray cluster would lack (nothing
            stored); a resource a given cluster lacks (the sweep is stored, nothing ran).
    """
    from bakeoff.errors import SpecError
    from bakeoff.sweep.results import load_coverage
    from bakeoff.sweep.run import EXECUTORS, create_sweep, run_sweep, sweep_options

    if executor not in EXECUTORS:
        raise SpecError(f"unknown executor {executor!r}", hint="use " + " or ".join(EXECUTORS))
    if ray_address is not None and executor != "ray":
        raise SpecError("a Ray address needs the ray executor", hint="add --executor ray")
    if resume is not None:
        given = {"population": population, "targets": on, "timing": timing, "timeout": timeout_s}
        given |= {"checks": checks or None, "switches": env or None}
        changed = [name for name, value in given.items() if value is not None]
        if changed:
            raise SpecError(
                f"a resumed sweep keeps its {', '.join(changed)}",
                hint="give --resume SWEEP_ID alone (with --db, --limit or --executor)",
            )
        store = Store.open(db, create=False)
        sweep_id = store.resolve_sweep_id(resume)
    else:
        from bakeoff.sweep.population import resolve_population

        if population is None:
            raise SpecError("no population to sweep", hint="give arch:all, arch:causal_lm, arch:base or a file")
        timing = "quick" if timing is None else timing
        if timing not in SWEEP_TIMING:
            raise SpecError(f"unknown timing {timing!r}", hint="use " + ", ".join(SWEEP_TIMING))
        targets = _targets("cpu" if on is None else on)
        found = resolve_population(population)
        checks = [checks] if isinstance(checks, str) else list(checks)
        timeout = 600.0 if timeout_s is None else timeout_s
        options = sweep_options({**SWEEP_TIMING[timing], "timeout_s": timeout, "checks": checks, "env": list(env)})
        if executor == "ray":  # what can be refused before the sweep exists is refused now
            from bakeoff.sweep.ray_executor import preflight

            preflight(targets, ray_address)
        store = Store.open(db)
        sweep_id = create_sweep(store, found, targets, options).id
    run_sweep(
        store, sweep_id, progress=progress, status=status, limit=limit, executor=executor, ray_address=ray_address
    )
    return load_coverage(store, sweep_id)


def coverage(sweep_id: str, *, db: PathLike | None = None) -> Coverage:
    """A stored sweep's coverage (``sweep_id`` may be a unique prefix)."""
    from bakeoff.sweep.results import load_coverage

    return load_coverage(Store.open(db, create=False), sweep_id)


def sweeps(*, db: PathLike | None = None, limit: int = 20) -> list[SweepRecord]:
    """The newest stored sweeps, with how many of their workloads are stored."""
    return Store.open(db, create=False).list_sweeps(limit)


def show(run_id: str, *, db: PathLike | None = None) -> RunResult:
    """A stored run by id (or unique id prefix)."""
    return Store.open(db, create=False).get_run(run_id)


def demo(
    *,
    db: PathLike | None = None,
    progress: Callable[[str], None] | None = None,
    min_samples: int = 30,
    min_seconds: float = 0.5,
) -> RunResult:
    """The bundled tiny workload against every target available here: eager and compiled CPU,
    the OpenVINO and ONNX Runtime engines when installed, and each accelerator present."""
    from bakeoff.target.detect import backend_status, list_devices
    from bakeoff.target.engines import demo_backends
    from bakeoff.workload.registry import DEMO_WORKLOAD

    on = ["cpu", "cpu+aot_eager", "cpu+inductor"]
    on += [f"cpu+{name}" for name in demo_backends() if backend_status(name, "cpu").available]
    for device in list_devices():
        if device.available and device.name != "cpu":
            on.append(device.name)
    return trial(DEMO_WORKLOAD, on, db=db, progress=progress, min_samples=min_samples, min_seconds=min_seconds)


# -- revisiting after an update -------------------------------------------------------------


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


def sweep_regressions(
    sweep_id: str, *, against: str | None = None, db: PathLike | None = None, thresholds: Thresholds | None = None
) -> SweepChanges:
    """A sweep against an earlier one (``against``, else the one before it of the same
    population): which cells started or stopped working, and each cell's two runs compared
    metric by metric (see :mod:`bakeoff.sweep.changes`).

    Raises:
        StoreError: an unknown or ambiguous sweep id.
        SpecError: no earlier sweep to compare with, or no target in common.
    """
    from bakeoff.sweep.changes import sweep_changes

    return sweep_changes(Store.open(db, create=False), sweep_id, against, thresholds)


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
        if after.workload.get("kind") == "script":
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
        "reference": None if stored.get("as_written") else run.settings.get("reference"),
        "map_devices": list(stored.get("map", ("cuda",))),
        "strict": bool(stored.get("strict", False)),
        "capture": list(stored.get("captures", ())),
        "timeout_s": float(stored.get("timeout_s", _DEFAULT.timeout_s)),
        "seed": int(stored.get("seed", 0)),
        "audit": bool(stored.get("audit", True)),
        "files": bool(stored.get("files", True)),
        "capture_modules": list(stored.get("capture_modules", ())),
        "repeats": int(stored.get("repeats", 0)),
        "workdir": stored["workdir"],
    }


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
    by :func:`exec_script` with its stored keywords (:func:`exec_keywords`).

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
        else:
            if isolate is not None:
                plan["isolate"] = isolate
            if not plan["isolate"]:
                plan["cold_compile_cache"] = False
            runs.append(trial(**plan, db=db, refresh_baseline=refresh_baseline, progress=progress))
        if tag is not None:
            store.add_tag(runs[-1].run_id, tag)
    return runs


def select_runs(
    store: Store, run_ids: Iterable[str] = (), *, workload: str | None = None, tag: str | None = None
) -> list[RunResult]:
    """Stored runs chosen by id prefixes, a workload or a tag (everything when none is given), oldest first."""
    from bakeoff.errors import StoreError
    from bakeoff.store.selection import run_headers

    run_ids = list(run_ids)
    if run_ids:
        ids = list(dict.fromkeys(store.resolve_run_id(i) for i in run_ids))
    elif tag is not None:
        ids = list(store.run_ids_with_tag(tag))
        if not ids:
            raise StoreError(f"no runs tagged {tag!r}", hint="run `bakeoff history` to see what is stored")
    else:
        ids = [h.run_id for h in run_headers(store, workload=workload)]
        if not ids:
            what = f"no runs of {workload!r}" if workload else "no runs"
            raise StoreError(f"{what} in {store.display_url}", hint="run a trial first, or check --db")
    return sorted((store.get_run(i) for i in ids), key=lambda r: (r.created_at, r.run_id))


def report(
    run_ids: Iterable[str] = (),
    *,
    workload: str | None = None,
    tag: str | None = None,
    db: PathLike | None = None,
    html: PathLike | None = None,
    markdown: PathLike | None = None,
    json: PathLike | None = None,
    thresholds: Thresholds | None = None,
    prices: Iterable[str] | None = None,
) -> Evidence:
    """Build the evidence for the selected runs and write it as HTML, Markdown and/or JSON;
    each run's decision is priced by ``prices`` (None: the prices each run was given).

    Raises:
        SpecError: no output was asked for.
        StoreError: nothing matches the selection.
    """
    from bakeoff.analysis.cost import parse_prices
    from bakeoff.errors import SpecError
    from bakeoff.outfiles import check_writable, write_text
    from bakeoff.report.evidence import build_evidence

    outputs = {"html": html, "markdown": markdown, "json": json}
    if all(v is None for v in outputs.values()):
        raise SpecError("no report format chosen", hint="add --html out.html, --markdown out.md or --json out.json")
    for path in outputs.values():
        if path is not None:
            check_writable(path)  # before minutes of rendering, not after
    store = Store.open(db, create=False)
    runs = select_runs(store, run_ids, workload=workload, tag=tag)
    selection = ", ".join(run_ids) or (f"workload {workload}" if workload else f"tag {tag}" if tag else "all runs")
    evidence = build_evidence(
        runs,
        notes={r.run_id: store.notes(r.run_id) for r in runs},
        tags={r.run_id: store.tags(r.run_id) for r in runs},
        selection=selection,
        database=store.display_url,
        thresholds=thresholds,
        prices=None if prices is None else parse_prices(list(prices)),
    )
    for kind, path in outputs.items():
        if path is None:
            continue
        if kind == "html":
            from bakeoff.report.html import render_html as render
        elif kind == "markdown":
            from bakeoff.report.markdown import render_markdown as render
        else:
            from bakeoff.report.evidence import render_json as render
        write_text(path, render(evidence))
    return evidence


# -- sharing a knowledge base ---------------------------------------------------------------


def db_status(*, db: PathLike | None = None) -> dict[str, Any]:
    """The database's schema version, this release's, the migrations pending and the number of runs."""
    return Store.open(db, create=False, upgrade=False).schema_status()


def db_upgrade(*, db: PathLike | None = None) -> dict[str, Any]:
    """Apply pending migrations (safe while other clients open the database); what was done."""
    store = Store.open(db, create=False, upgrade=False)
    before = store.schema_status()
    if before["newer"]:
        from bakeoff.errors import StoreError

        raise StoreError(
            f"database {store.display_url} has schema version {before['schema_version']}, newer than this "
            f"bakeoff understands ({before['supported_version']})",
            hint="upgrade bakeoff to use it",
        )
    applied = store.upgrade()
    return {
        "database": store.display_url,
        "from_version": before["schema_version"],
        "schema_version": store.schema_status()["schema_version"],
        "applied": applied,
    }


def export_runs(
    path: PathLike,
    *,
    db: PathLike | None = None,
    format: str = "jsonl",
    workload: str | None = None,
    tag: str | None = None,
) -> ExportSummary:
    """Write the runs (all, one workload's or one tag's) to ``path`` as JSON lines or CSV.

    JSON lines carry each run's full document with its notes and tags, and the baselines and
    requirements of the workloads exported: :func:`import_runs` reads them into another
    database. CSV is a flat table (one row per run and target) for spreadsheets.
    """
    from bakeoff.store.transfer import export

    return export(Store.open(db, create=False), path, fmt=format, workload=workload, tag=tag)


def import_runs(path: PathLike, *, db: PathLike | None = None) -> ImportSummary:
    """Add what a JSON-lines export holds that the database lacks (importing twice adds nothing)."""
    from bakeoff.store.transfer import import_

    return import_(lambda: Store.open(db), path)  # opened once the whole file has been checked


def note(run_id: str, text: str, *, db: PathLike | None = None, author: str | None = None) -> Note:
    """Keep a free-form note on a run (``run_id`` may be a unique prefix); ``author`` defaults to $USER."""
    return Store.open(db, create=False).add_note(run_id, text, author=author)


def tag(run_id: str, name: str, *, db: PathLike | None = None, remove: bool = False) -> list[str]:
    """Put a tag on a run, or take it off with ``remove``; returns the run's tags afterwards."""
    store = Store.open(db, create=False)
    if not remove:
        return store.add_tag(run_id, name)
    full = store.resolve_run_id(run_id)
    if not store.remove_tag(full, name):
        from bakeoff.errors import StoreError

        have = ", ".join(store.tags(full)) or "none"
        raise StoreError(f"run {full} has no tag {name!r}", hint=f"its tags: {have}")
    return store.tags(full)


def notes_and_tags(run_id: str, *, db: PathLike | None = None) -> dict[str, Any]:
    """``{"run_id", "notes": [Note, ...], "tags": [str, ...]}`` of a run (``run_id`` may be a prefix)."""
    store = Store.open(db, create=False)
    full = store.resolve_run_id(run_id)
    return {"run_id": full, "notes": store.notes(full), "tags": store.tags(full)}
