"""A trial: one workload against several targets, measured against one baseline, stored.

The eager CPU target is always measured as the *reference* in the same run (added if the
user did not list it), so every speed figure is a ratio measured under the same conditions.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from bakeoff.checks.baseline import compute_references, repeat_error, save_references
from bakeoff.env import Environment, capture_environment
from bakeoff.measure.timing import TimingSettings
from bakeoff.results.values import BaselineInfo, RunResult, TargetResult
from bakeoff.runner.job import TargetJob, run_target
from bakeoff.store.db import Store
from bakeoff.targets.detect import unavailable_reason
from bakeoff.targets.spec import Target
from bakeoff.workloads.base import BuiltWorkload, WorkloadSpec
from bakeoff.workloads.registry import build_workload

__all__ = ["REFERENCE", "TrialSettings", "ensure_baseline", "run_trial"]

REFERENCE = Target("cpu")
Progress = Callable[[str], None]


@dataclass(frozen=True)
class TrialSettings:
    """How a trial runs. ``isolate`` runs each target in its own worker process."""

    timing: TimingSettings = field(default_factory=TimingSettings)
    isolate: bool = True
    timeout_s: float = 900.0
    refresh_baseline: bool = False

    def to_dict(self) -> dict:
        return {"timing": self.timing.to_dict(), "isolate": self.isolate, "timeout_s": self.timeout_s}


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")


def ensure_baseline(
    store: Store,
    workload: BuiltWorkload,
    env: Environment,
    dtypes: Sequence[str] = (),
    refresh: bool = False,
    progress: Progress | None = None,
) -> tuple[BaselineInfo, list[str]]:
    """Reuse the newest baseline for this workload, or compute and store a new one.

    A new baseline is computed when asked (``refresh``), when none exists, when the stored one
    is *stale* (its fingerprint differs from the workload's now: other weights, config or
    inputs), or when it lacks an eager reference for one of ``dtypes``.

    Returns:
        The baseline and notes explaining why it was (re)computed, if it was.
    """
    spec = workload.spec.spec
    existing = store.latest_baseline(spec)
    wanted = {f"eager:{d}" for d in dtypes}
    reason = None
    if refresh:
        reason = "baseline recomputed on request"
    elif existing is None:
        reason = "baseline created"
    elif existing.fingerprint != workload.fingerprint:
        reason = f"stored baseline was stale (fingerprint {existing.fingerprint} != {workload.fingerprint}); recomputed"
    elif not wanted <= set(existing.references) or not Path(existing.path).is_file():
        missing = sorted(r.removeprefix("eager:") for r in wanted - set(existing.references))
        reason = "baseline extended with eager references for " + (", ".join(missing) or "missing files")
    if existing is not None and reason is None:
        return existing, []
    if progress:
        progress(f"computing baseline for {spec}")
    keep = set(dtypes)
    if existing is not None and existing.fingerprint == workload.fingerprint:
        keep |= {r.removeprefix("eager:") for r in existing.references if r.startswith("eager:")}
    refs, notes = compute_references(workload, sorted(keep))
    baseline_id = uuid.uuid4().hex[:12]
    path = store.artifacts_dir / "baselines" / workload.fingerprint / f"{baseline_id}.safetensors"
    save_references(path, refs)
    info = BaselineInfo(
        id=baseline_id,
        workload_spec=spec,
        fingerprint=workload.fingerprint,
        seed=workload.seed,
        created_at=_now(),
        environment_fingerprint=env.fingerprint,
        references=tuple(refs),
        deterministic=repeat_error(refs, workload.dtype) == 0.0,
        repeat_max_abs_err=repeat_error(refs, workload.dtype),
        path=str(path),
    )
    store.save_baseline(info, env)
    return info, [reason, *notes]


def _with_reference(targets: Sequence[Target]) -> tuple[list[Target], Target]:
    listed = list(targets)
    if REFERENCE not in listed:
        listed.insert(0, REFERENCE)
    return listed, REFERENCE


def _speedups(results: list[TargetResult], reference: Target) -> list[TargetResult]:
    ref = next((r for r in results if r.target == reference), None)
    if ref is None or ref.latency is None or not ref.latency.count:
        return results
    base = ref.latency.p50_ms
    return [
        replace(r, speedup=base / r.latency.p50_ms) if r.latency and r.latency.count and r.latency.p50_ms > 0 else r
        for r in results
    ]


def run_trial(
    store: Store,
    workload_spec: WorkloadSpec | str,
    targets: Sequence[Target],
    settings: TrialSettings | None = None,
    progress: Progress | None = None,
) -> RunResult:
    """Run every target (skipping those that cannot run here), store and return the run."""
    settings = settings or TrialSettings()
    say = progress or (lambda _msg: None)
    say("building workload")
    workload = build_workload(workload_spec)
    env = capture_environment()
    dtypes = sorted({t.dtype for t in targets if t.dtype} | {workload.dtype})
    baseline, notes = ensure_baseline(store, workload, env, dtypes, settings.refresh_baseline, say)
    ordered, reference = _with_reference(targets)
    results: list[TargetResult] = []
    for target in ordered:
        is_ref = target == reference
        reason = unavailable_reason(target)
        if reason is not None:
            results.append(TargetResult(target=target, status="skipped", reason=reason, is_reference=is_ref))
            continue
        say(f"running {target.spec}" + (" (reference)" if is_ref else ""))
        job = TargetJob(
            workload_spec=workload.spec.spec,
            target=target,
            fingerprint=workload.fingerprint,
            baseline_path=baseline.path,
            repeat_max_abs_err=baseline.repeat_max_abs_err,
            timing=settings.timing,
            is_reference=is_ref,
        )
        if settings.isolate:
            from bakeoff.runner.isolation import run_isolated

            results.append(run_isolated(job, settings.timeout_s))
        else:
            results.append(run_target(job))
    run = RunResult(
        run_id=uuid.uuid4().hex[:12],
        created_at=_now(),
        workload={**workload.to_dict(), "notes": notes},
        environment=env,
        results=tuple(_speedups(results, reference)),
        baseline_id=baseline.id,
        settings={**settings.to_dict(), "reference": reference.spec},
    )
    store.save_run(run)
    return run
