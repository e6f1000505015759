"""Replicates: one target measured in several worker processes, pooled into one result.

The same target in two processes can differ by a few percent, run after run (memory layout,
the cores it lands on), and no statistic inside one process can see that. Running each target
in ``N`` processes, timed in turns with the others, and pooling their samples (never averaging
their averages) lets the speed interval resample *processes*: see
:func:`replicate_blocks`.

Scenarios run in the first replicate only: they describe the target, not its timing spread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from bakeoff.results.librarylog import merge_logs
from bakeoff.results.values import Latency, TargetResult

__all__ = ["merge_replicates", "replicate_blocks"]


def merge_replicates(results: Sequence[TargetResult]) -> TargetResult:
    """Pool the replicates of one target into one result.

    The first replicate that ran gives the checks (correctness, placement, compilation,
    scenarios) unless another one's correctness failed, which then wins: a failure in any
    process is a failure. Latency pools every replicate's samples; each round in
    ``conditions`` says which replicate took it; memory is the largest peak; the libraries'
    lines are counted over every replicate. A replicate that failed is a note, not the result,
    as long as one ran.
    """
    if len(results) == 1:
        return results[0]
    ran = [r for r in results if r.status == "ok"]
    if not ran:
        first = results[0]
        return replace(
            first,
            notes=(*first.notes, f"all {len(results)} replicates failed"),
            log=merge_logs(*(r.log for r in results)),
        )
    base = next((r for r in ran if r.verdict == "fail"), ran[0])
    rounds = [
        {**round_, "replicate": index}
        for index, result in enumerate(results)
        if result.status == "ok"
        for round_ in (result.conditions or {}).get("rounds", ())
    ]
    summary = [
        {
            "replicate": index,
            "status": result.status,
            "p50_ms": result.latency.p50_ms if result.latency and result.latency.count else None,
            "samples": result.latency.count if result.latency else 0,
            "first_call_ms": result.first_call_ms,
            "error": result.error.message.splitlines()[0] if result.error and result.error.message else None,
        }
        for index, result in enumerate(results)
    ]
    notes = [*base.notes, f"{len(ran)} of {len(results)} replicate processes pooled"]
    if len(ran) < 3:
        notes.append(f"the speed interval resamples only {len(ran)} processes: use 3 or more replicates")
    for item in summary:
        if item["status"] != "ok":
            notes.append(f"replicate {item['replicate']} {item['status']}: {item['error'] or ''}".rstrip(": "))
    peaks = [r.peak_host_rss_bytes for r in ran if r.peak_host_rss_bytes is not None]
    device = [r.device_peak_bytes for r in ran if r.device_peak_bytes is not None]
    return replace(
        base,
        latency=Latency(tuple(s for r in ran for s in (r.latency.samples_ms if r.latency else ()))),
        conditions={"rounds": rounds, "replicates": summary},
        peak_host_rss_bytes=max(peaks) if peaks else None,
        device_peak_bytes=max(device) if device else None,
        notes=tuple(notes),
        noise=tuple(f"replicate {i}: {flag}" for i, r in enumerate(results) if r.status == "ok" for flag in r.noise),
        duration_s=sum(r.duration_s or 0.0 for r in results),
        log=merge_logs(*(r.log for r in results)),
    )


def replicate_blocks(result: TargetResult) -> list[tuple[float, ...]]:
    """A pooled result's samples split by replicate process (empty for a single process)."""
    conditions = result.conditions or {}
    if len(conditions.get("replicates", ())) < 2 or result.latency is None:
        return []
    blocks: dict[int, list[float]] = {}
    samples = iter(result.latency.samples_ms)
    for round_ in conditions["rounds"]:
        blocks.setdefault(round_["replicate"], []).extend(next(samples) for _ in range(round_["samples"]))
    return [tuple(block) for _, block in sorted(blocks.items())]
