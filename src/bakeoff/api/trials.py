"""Trials of a workload: :func:`trial` runs it on each target and stores the run, and
:func:`baseline` preserves (or reuses) its reference outputs alone. Every trial setting's
keyword, default and description come from :mod:`bakeoff.settings`; the trial itself is
:mod:`bakeoff.runner.trial`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from bakeoff.api.common import _DEFAULT, PathLike, _targets, _would_create
from bakeoff.results.values import BaselineInfo, RunResult
from bakeoff.settings import TRIAL_OPTIONS, TrialSettings, describe_options
from bakeoff.store.db import Store

if TYPE_CHECKING:
    from bakeoff.workload.profile import InputProfile


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
            :func:`bakeoff.runner.workers.start_workers` (the CLI starts it before it imports the
            rest); the trial takes it over and ends it. None: the trial starts its own.

    Every setting is described, defaulted and checked once, in :mod:`bakeoff.settings`.

    Raises:
        SpecError, WorkloadError, StoreError: bad input; nothing is stored.
    """
    from bakeoff.runner.trial import run_trial
    from bakeoff.runner.workers import start_workers
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
        opened = [] if _would_create(db) else [Store.open(db)]
    except BaseException:
        if workers is not None:
            workers.close()
        raise

    def store() -> Store:
        if not opened:
            opened.append(Store.open(db))
        return opened[0]

    run = run_trial(store() if opened else store, spec, parsed, settings, progress, workers=workers)
    store().save_run(run)
    return run


if trial.__doc__:  # the settings' lines come from their one description (absent under python -OO)
    trial.__doc__ = trial.__doc__.replace("{settings}", describe_options(TRIAL_OPTIONS, " " * 8))


def baseline(
    workload: str, *, db: PathLike | None = None, dtypes: Iterable[str] = (), refresh: bool = False
) -> tuple[BaselineInfo, list[str]]:
    """Preserve (or reuse) the reference outputs of ``workload``; returns the baseline and notes."""
    from bakeoff.env import capture_environment
    from bakeoff.errors import SpecError
    from bakeoff.runner.keeping import ensure_baseline
    from bakeoff.runner.reference_job import REFERENCE_TIMEOUT_S, eager_run, reference_launcher, references_on
    from bakeoff.target.spec import DTYPE_ALIASES
    from bakeoff.workload.registry import build_workload

    names = []
    for dtype in dtypes:
        if dtype.lower() not in DTYPE_ALIASES:
            raise SpecError(f"unknown dtype {dtype!r}", hint="use one of fp32, bf16, fp16, fp64")
        names.append(DTYPE_ALIASES[dtype.lower()])
    built = build_workload(workload)
    elsewhere = reference_launcher(built.spec)  # a forward pass that crashes or hangs ends its process, not this one
    if _would_create(db):
        eager_run(elsewhere, built, REFERENCE_TIMEOUT_S)  # refused before a new database is created
    store = Store.open(db)
    compute = references_on(elsewhere, REFERENCE_TIMEOUT_S)
    return ensure_baseline(store, built, capture_environment(), names, refresh, compute=compute)
