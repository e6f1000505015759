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
from typing import Any

from bakeoff.measure.timing import TimingSettings
from bakeoff.results.values import BaselineInfo, RunResult
from bakeoff.store.db import RunSummary, Store

__all__ = ["baseline", "demo", "history", "show", "targets", "trial", "workloads"]

PathLike = str | os.PathLike[str]


def _targets(on: str | Iterable[str]) -> list:
    from bakeoff.target.detect import check_backend_name, extra_devices
    from bakeoff.target.spec import parse_targets

    parsed = parse_targets([on] if isinstance(on, str) else list(on), extra_devices())
    for target in parsed:
        if target.backend is not None:
            check_backend_name(target.backend)
    return parsed


def trial(
    workload: str,
    on: str | Iterable[str] = "cpu",
    *,
    db: PathLike | None = None,
    isolate: bool = True,
    timeout_s: float = 900.0,
    min_samples: int = 30,
    min_seconds: float = 0.5,
    refresh_baseline: bool = False,
    profile: str | os.PathLike[str] | None = None,
    pad_to_buckets: str | int | Iterable[int] | None = None,
    max_buckets: int = 4,
    cold_compile_cache: bool = False,
    env: Iterable[str] = (),
    progress: Callable[[str], None] | None = None,
) -> RunResult:
    """Run ``workload`` on each target in ``on`` and store the run.

    Args:
        workload: a workload spec (``arch:llama``, ``hf:./model``, ``py:models.py:make``).
        on: target specs, as a list or one comma-separated string.
        db: database path or URL (default ``BAKEOFF_DB`` or ``./bakeoff.db``).
        isolate: run each target in its own worker process (crashes and hangs become results).
        timeout_s: per-target limit when isolated.
        min_samples: at least this many timed calls per target.
        min_seconds: and at least this long timing each target.
        refresh_baseline: recompute the baseline even if a fresh one is stored.
        profile: an input profile (``"seq=16,32,64"``, ``"seq=uniform(8,128)&n=50"``, or a
            .csv/.jsonl file of request lengths) to run every target over.
        pad_to_buckets: ``"auto"`` or sizes such as ``"64,128,256"``: also run each target with
            requests padded to these buckets (the static-shape what-if), side by side.
        max_buckets: how many buckets ``auto`` may choose.
        cold_compile_cache: give each target's compiler an empty cache (cold compile times).
        env: ``KEY=VALUE`` environment switches set while each target runs (recorded as
            adjustments), e.g. a backend's strict no-fallback mode.
        progress: called with a short message as each step starts.

    Raises:
        SpecError, WorkloadError, StoreError: bad input; nothing is stored.
    """
    from bakeoff.runner.trial import TrialSettings, run_trial
    from bakeoff.workload.base import parse_workload

    spec = parse_workload(workload)
    parsed = _targets(on)
    from bakeoff.errors import SpecError
    from bakeoff.workload.profile import parse_profile

    if min_samples < 1:
        raise SpecError(f"samples must be at least 1, got {min_samples}", hint="e.g. --samples 30")
    if min_seconds < 0:
        raise SpecError(f"minimum timing seconds must be >= 0, got {min_seconds}", hint="e.g. --min-time 0.5")
    if timeout_s <= 0:
        raise SpecError(f"timeout must be positive, got {timeout_s:g} s", hint="e.g. --timeout 900")
    if max_buckets < 1:
        raise SpecError(f"max buckets must be at least 1, got {max_buckets}", hint="e.g. --max-buckets 4")
    if cold_compile_cache and not isolate:
        raise SpecError(
            "a cold compile cache needs worker processes (in one process compilers keep warm caches)",
            hint="drop --in-process, or drop --cold-compile-cache",
        )
    if isinstance(env, str):
        env = [env]
    if pad_to_buckets is not None and not isinstance(pad_to_buckets, str):
        values = pad_to_buckets if isinstance(pad_to_buckets, Iterable) else [pad_to_buckets]
        pad_to_buckets = ",".join(str(v) for v in values)
    parsed_profile = parse_profile(os.fspath(profile)) if profile is not None else None
    switches = []
    for item in env:
        key, eq, value = item.partition("=")
        if not eq or not key or not key.replace("_", "").isalnum() or key[0].isdigit():
            raise SpecError(f"environment switch {item!r} is not KEY=VALUE", hint="e.g. --env TORCHINDUCTOR_FREEZING=1")
        switches.append((key, value))
    store = Store.open(db)
    settings = TrialSettings(
        timing=TimingSettings(min_samples=min_samples, min_seconds=min_seconds),
        isolate=isolate,
        timeout_s=timeout_s,
        refresh_baseline=refresh_baseline,
        profile=parsed_profile,
        buckets=pad_to_buckets,
        max_buckets=max_buckets,
        cold_cache=cold_compile_cache,
        env=tuple(switches),
    )
    return run_trial(store, spec, parsed, settings, progress)


def baseline(
    workload: str, *, db: PathLike | None = None, dtypes: Iterable[str] = (), refresh: bool = False
) -> tuple[BaselineInfo, list[str]]:
    """Preserve (or reuse) the reference outputs of ``workload``; returns the baseline and notes."""
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


def history(*, db: PathLike | None = None, limit: int = 20, workload: str | None = None) -> list[RunSummary]:
    """The newest runs first (the database must exist)."""
    return Store.open(db, create=False).list_runs(limit=limit, workload_spec=workload)


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
    from bakeoff.workload.registry import DEMO_WORKLOAD

    on = ["cpu", "cpu+aot_eager", "cpu+inductor"]
    on += [f"cpu+{name}" for name in ("openvino", "onnxrt") if backend_status(name, "cpu").available]
    for device in list_devices():
        if device.available and device.name != "cpu":
            on.append(device.name)
    return trial(DEMO_WORKLOAD, on, db=db, progress=progress, min_samples=min_samples, min_seconds=min_seconds)
