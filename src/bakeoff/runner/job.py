"""One target of one trial, run to completion in the current process.

:func:`run_target` never raises for problems of the workload or the target: an exception
becomes a ``status="error"`` result with the phase it happened in and its traceback, so the
rest of a sweep goes on. It returns plain values, so a worker process can send it back.
"""

from __future__ import annotations

import os
import resource
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bakeoff.checks.baseline import load_references
from bakeoff.checks.correctness import compare_outputs
from bakeoff.checks.outputs import flatten_outputs
from bakeoff.checks.placement import audit_placement
from bakeoff.measure.clock import Clock
from bakeoff.measure.timing import TimingSettings, time_callable
from bakeoff.results.values import Correctness, ErrorInfo, Latency, TargetResult
from bakeoff.targets.spec import Target

__all__ = ["TargetJob", "run_target"]


@dataclass(frozen=True)
class TargetJob:
    """Everything a worker needs, as plain picklable values."""

    workload_spec: str
    target: Target
    fingerprint: str
    baseline_path: str | None
    repeat_max_abs_err: float = 0.0
    timing: TimingSettings = field(default_factory=TimingSettings)
    is_reference: bool = False


def _peak_rss_bytes() -> int:
    # ru_maxrss is KiB on Linux, bytes on macOS.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if os.uname().sysname == "Darwin" else peak * 1024)


def _correctness(job: TargetJob, outputs: Any, fingerprint: str) -> Correctness:
    from bakeoff.analysis.tolerance import tolerance_for

    if job.baseline_path is None:
        return Correctness("not_comparable", "no baseline for this workload")
    if fingerprint != job.fingerprint:
        return Correctness(
            "not_comparable",
            f"workload fingerprint here ({fingerprint}) differs from the baseline's "
            f"({job.fingerprint}): the model or its inputs are not reproducible",
        )
    dtype = job.target.dtype or _native_dtype(outputs)
    name = f"eager:{dtype}"
    refs = load_references(Path(job.baseline_path), [name, "golden"])
    if name not in refs:
        return Correctness("not_comparable", f"the baseline has no {name} reference", name)
    tol = tolerance_for(dtype)
    if job.repeat_max_abs_err > tol:
        return Correctness(
            "not_comparable",
            f"the eager reference is nondeterministic: two eager CPU runs differ by "
            f"{job.repeat_max_abs_err:.3g} (> {tol:g})",
            name,
            tol,
        )
    return compare_outputs(flatten_outputs(outputs), refs[name], refs.get("golden"), dtype, name)


def _native_dtype(outputs: Any) -> str:
    for tensor in flatten_outputs(outputs).values():
        if tensor.is_floating_point():
            return str(tensor.dtype).removeprefix("torch.")
    return "float32"


def run_target(job: TargetJob, clock: Clock | None = None) -> TargetResult:
    """Build the workload, put it on the target, time it and check its outputs."""
    import torch

    from bakeoff.targets.execute import (
        device_peak_memory,
        prepare,
        reset_device_peak_memory,
        synchronizer,
    )
    from bakeoff.targets.plugins import load_plugins
    from bakeoff.targets.probes import probe_for
    from bakeoff.workloads.registry import build_workload

    load_plugins()
    started = time.monotonic()
    target = job.target
    phase = "build"
    load_before = os.getloadavg()[0]
    prepared = None
    try:
        threads = target.effective_threads
        if threads is not None:
            torch.set_num_threads(threads)
        workload = build_workload(job.workload_spec, device=target.torch_device)
        fingerprint = workload.fingerprint
        if target.is_compiled:
            torch._dynamo.reset()
        phase = "prepare"
        reset_device_peak_memory(target)
        prepared = prepare(workload, target)
        phase = "first call" if not target.is_compiled else "compile and first call"
        with torch.no_grad():
            run = time_callable(prepared, synchronizer(target), job.timing, clock, prepared.compile_events)
        phase = "correctness"
        correctness = _correctness(job, run.first_output, fingerprint)
        phase = "placement audit"
        placement = audit_placement(prepared, target, probe_for(target))
    except Exception as exc:
        text = str(exc).lower()
        oom = isinstance(exc, MemoryError) or "out of memory" in text or "can't allocate memory" in text
        return TargetResult(
            target=target,
            status="error",
            is_reference=job.is_reference,
            error=ErrorInfo(
                type=type(exc).__name__,
                message=str(exc).strip()[:2000] or type(exc).__name__,
                category="out_of_memory" if oom else "exception",
                phase=phase,
                traceback=traceback.format_exc(),
            ),
            duration_s=time.monotonic() - started,
            threads=torch.get_num_threads(),
        )
    finally:
        if prepared is not None:
            prepared.close()
    notes = []
    latency = Latency(tuple(s * 1e3 for s in run.samples_s))
    if latency.noisy:
        notes.append("noisy timings (IQR > 10% of median)")
    if not run.settled:
        notes.append(f"still compiling after {run.warmup_calls} warm-up calls")
    return TargetResult(
        target=target,
        status="ok",
        is_reference=job.is_reference,
        correctness=correctness,
        placement=placement,
        latency=latency,
        first_call_ms=run.first_call_s * 1e3,
        warmup_calls=run.warmup_calls,
        settled=run.settled,
        peak_host_rss_bytes=_peak_rss_bytes(),
        device_peak_bytes=device_peak_memory(target),
        threads=torch.get_num_threads(),
        load_average=(load_before, os.getloadavg()[0]),
        duration_s=time.monotonic() - started,
        notes=tuple(notes),
    )
