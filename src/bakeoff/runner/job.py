"""One target of one trial, run to completion in the current process.

:func:`run_target` never raises for problems of the workload or the target: an exception
becomes a ``status="error"`` result with the phase it happened in and its traceback, so the
rest of a sweep goes on. It returns plain values, so a worker process can send it back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bakeoff.checks.outputs import flatten_outputs
from bakeoff.checks.registry import registered_checks
from bakeoff.measure.timing import TimingSettings
from bakeoff.target.spec import Target
from bakeoff.workload.profile import InputProfile

__all__ = ["TargetJob", "adjustments_for", "error_checks"]


@dataclass(frozen=True)
class TargetJob:
    """Everything a worker needs, as plain picklable values.

    ``profile`` runs the target over those request shapes instead of the workload's one input;
    ``buckets`` pads every request up to the smallest bucket that holds it (the static-shape
    what-if); ``cold_cache`` gives the compiler an empty cache directory; ``env`` sets
    environment switches (a backend's strict modes, say) while the target runs.
    """

    workload_spec: str
    target: Target
    fingerprint: str
    baseline_path: str | None
    repeat_max_abs_err: float = 0.0
    timing: TimingSettings = field(default_factory=TimingSettings)
    is_reference: bool = False
    profile: InputProfile | None = None
    buckets: tuple[int, ...] | None = None
    cold_cache: bool = False
    env: tuple[tuple[str, str], ...] = ()
    scenarios: tuple[Any, ...] = ()  # ScenarioSpec values beyond single-stream

    @property
    def variant(self) -> str:
        return "bucketed" if self.buckets else "as-is"


def adjustments_for(
    target: Target, buckets: tuple[int, ...] | None = None, env: tuple[tuple[str, str], ...] = ()
) -> tuple[dict[str, Any], ...]:
    """The ordered, named changes made to run ``target`` (the adjustments ledger)."""
    ledger: list[dict[str, Any]] = [{"name": "environment", "value": f"{k}={v}"} for k, v in env]
    for name, value in (
        ("dtype cast", target.dtype),
        ("compile dynamic", target.dynamic),
        ("compile mode", target.mode),
        ("inference precision", target.precision),
        ("intra-op threads", target.threads),
    ):
        if value is not None:
            ledger.append({"name": name, "value": value})
    if target.fullgraph:
        ledger.append({"name": "compile fullgraph", "value": True})
    if buckets:
        ledger.append({"name": "pad to buckets", "value": list(buckets)})
    return tuple(ledger)


def error_checks(why: str) -> dict[str, Any]:
    """The check values a failed target records (a correctness ``error``, say); ``why`` says
    what happened."""
    return {c.name: value for c in registered_checks() if (value := c.on_error(why)) is not None}


def _native_dtype(outputs: Any) -> str:
    for tensor in flatten_outputs(outputs).values():
        if tensor.is_floating_point():
            return str(tensor.dtype).removeprefix("torch.")
    return "float32"


def _profile_calls(job: TargetJob, workload: Any, prepared: Any) -> tuple[dict, list, dict]:
    """Per request shape: a call of the prepared model on (padded) inputs, and its bucket."""
    from bakeoff.analysis.buckets import bucket_for
    from bakeoff.target.execute import place_inputs
    from bakeoff.workload.padding import pad_inputs

    assert job.profile is not None
    calls, padded_to = {}, {}
    for request in job.profile.shapes:
        key = (request.batch, request.seq)
        args, kwargs = workload.inputs_for(request.batch, request.seq)
        to = bucket_for(request.seq, job.buckets) if job.buckets else request.seq
        args, kwargs = place_inputs(workload, job.target, *pad_inputs(args, kwargs, request.seq, to))
        padded_to[key] = to
        calls[key] = lambda a=args, k=kwargs: prepared.model(*a, **k)
    order = [(r.batch, r.seq) for r in job.profile.requests]
    return calls, order, padded_to


def _steady_check(prepared: Any, calls: dict) -> Any:
    """A check that a shape runs without compiling again (dynamo's fail_on_recompile stance)."""
    import torch

    def check(shape: Any) -> bool:
        before = prepared.compile_events() if prepared.compile_events else 0
        try:
            if prepared.uses_dynamo:
                with torch.compiler.set_stance("fail_on_recompile"):
                    calls[shape]()
            else:
                calls[shape]()
        except Exception:
            return False
        return not prepared.compile_events or prepared.compile_events() == before

    return check


def _profile_summary(job: TargetJob, run: Any, padded_to: dict) -> tuple[dict, tuple]:
    from bakeoff.analysis.buckets import padding_waste
    from bakeoff.stats import percentile

    assert job.profile is not None
    per_shape = []
    for key, samples in run.steady.items():
        first = next(seconds for shape, seconds, _ in run.first_pass if shape == key)
        per_shape.append(
            {
                "shape": f"{key[0]}x{key[1]}",
                "requests": sum(1 for s, _, _ in run.first_pass if s == key),
                "padded_to": padded_to[key],
                "first_call_ms": first * 1e3,
                "steady_p50_ms": percentile(samples, 50) * 1e3 if samples else None,
            }
        )
    lengths = [r.seq for r in job.profile.requests]
    batches = [r.batch for r in job.profile.requests]
    summary = {
        "source": job.profile.source,
        "requests": len(job.profile.requests),
        "shapes": len(job.profile.shapes),
        "first_pass_ms": sum(s for _, s, _ in run.first_pass) * 1e3,
        "first_pass_compiles": sum(1 for _, _, compiled in run.first_pass if compiled),
        "steady_passes": run.passes,
        "buckets": list(job.buckets) if job.buckets else None,
        "padding_waste": padding_waste(lengths, job.buckets, batches) if job.buckets else 0.0,
    }
    return summary, tuple(per_shape)
