"""Timing a script run under ``bakeoff exec``: the clean timing runs' latency, the spans
between captures beside the reference's, and the speed-up where both sides have two runs or more.

The first run of each side is the evidence, not a fair clock (a target's is audited,
``--capture`` traces every Python call). Without ``--repeats`` its wall time is the latency, a
single observation, said to be one, with no speed-up claimed. With ``--repeats`` N, the reference
and each target run N more times, in turns, without the audit or the tracing (losses and
``bakeoff.capture`` calls are still kept: they cost little), and their wall times are the
latency, with a trial's statistics: noise flags, and the speed-up as a ratio of medians with its
bootstrap interval from two runs a side. A timing run that fails is a note, its time dropped.
Each run's time between captures (:mod:`bakeoff.analysis.spans`) is compared span by span with
the reference's and kept in the target's ``conditions["timing"]``; a span out of line with the
target's typical ratio is a note.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from bakeoff.analysis.compare import ratio_of_medians
from bakeoff.analysis.noise import noise_flags
from bakeoff.analysis.spans import compare_spans, spans
from bakeoff.results.values import Latency, TargetResult
from bakeoff.units import clip, duration, significant

__all__ = ["span_samples", "speedups", "timed"]


def span_samples(runs: Sequence[Any]) -> dict[str, list[float]]:
    """Per span between captures (:func:`~bakeoff.analysis.spans.spans`), its milliseconds in
    each finished run, in the order the spans came."""
    found: dict[str, list[float]] = {}
    for run in runs:
        if run.status == "ok" and run.wall_s is not None:
            for name, seconds in spans(run.result.get("capture_times") or {}, run.wall_s).items():
                found.setdefault(name, []).append(seconds * 1e3)
    return found


def timed(
    result: TargetResult,
    runs: Sequence[Any] | None,
    span_ms: Mapping[str, Sequence[float]],
    reference_span_ms: Mapping[str, Sequence[float]] | None,
    first_run_s: float | None = None,
) -> TargetResult:
    """``result`` with its timing: with ``runs`` (the clean timing runs, ``--repeats``) its
    latency is their wall times (a failed one is a note and its time dropped) and their noise
    flags; either way its spans beside the reference's, and a note for a span out of line."""
    if result.status != "ok":
        return result
    notes = list(result.notes)
    latency, noise = result.latency, list(result.noise)
    if runs is not None:
        kept = [r.wall_s * 1e3 for r in runs if r.status == "ok" and r.wall_s is not None]
        for i, r in enumerate(runs, 1):
            if r.status != "ok" or r.wall_s is None:
                why = f"{r.error.category}: {r.error.type}: {r.error.message}" if r.error else "no wall time"
                notes.append(
                    f"timing run {i} of {len(runs)} failed, its time dropped ({clip(why.splitlines()[0], 160)})"
                )
        latency = Latency(tuple(kept)) if kept else None
        if len(kept) == 1:  # more runs: the settings line says how they were timed
            notes.append("wall time from 1 run without the audit: a single observation, no speed-up claimed")
        if len(kept) > 1:
            noise += noise_flags(kept, [], os.cpu_count() or 1)
    compared = compare_spans(span_ms, reference_span_ms if not result.is_reference else None)
    for row in compared["spans"]:
        if row["out_of_line"]:
            notes.append(
                f"span {row['span']} took {duration(row['ms'])}, {significant(row['ratio'])}x the reference's "
                f"(its other spans' typical ratio {significant(row['typical_ratio'])}x)"
            )
    timing = {
        "runs": len(runs) if runs is not None else 0,
        "first_run_s": first_run_s,  # the evidence run's wall time (a target's audited)
        "spans_from": "the timing runs"
        if runs is not None
        else "the first run" + ("" if result.placement is None else ", audited"),
        "typical_span_ratio": compared["typical_ratio"],
        "spans": compared["spans"],
    }
    return replace(
        result,
        latency=latency,
        noise=tuple(noise),
        notes=tuple(notes),
        conditions={**(result.conditions or {}), "timing": timing},
    )


def speedups(results: list[TargetResult]) -> list[TargetResult]:
    """Speed-up against the reference (the ratio of median wall times, with its bootstrap
    interval, as a trial's), only where both sides have two runs or more: none is claimed from
    a single observation."""
    ref = next((r for r in results if r.is_reference), None)
    if ref is None or ref.latency is None or ref.latency.count < 2 or ref.latency.p50_ms <= 0:
        return results
    updated = []
    for r in results:
        if r.latency is None or r.latency.count < 2 or r.latency.p50_ms <= 0:
            updated.append(r)
            continue
        estimate = ratio_of_medians(ref.latency.samples_ms, r.latency.samples_ms)
        updated.append(replace(r, speedup=estimate.value, speedup_ci=estimate.to_dict()))
    return updated
