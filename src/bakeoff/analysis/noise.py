"""Flags for timings that should not be trusted as they stand.

Each flag is a sentence a reader can act on. The thresholds are explicit parameters: IQR over
10% of the median (torch.utils.benchmark's warning), a 1-minute load average above the number
of cores (other work competed for them), CPU frequency moving more than 10% between rounds,
and the intra-op thread count changing while samples were taken.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bakeoff.analysis.stats import NOISE_IQR_RATIO, iqr, percentile

__all__ = ["noise_flags"]


def noise_flags(
    samples: Sequence[float],
    rounds: Sequence[Mapping[str, Any]],
    cores: int,
    iqr_ratio: float = NOISE_IQR_RATIO,
    frequency_change: float = 0.10,
) -> list[str]:
    """Flags for ``samples`` taken over ``rounds`` (each with ``load_1m``, ``cpu_mhz``, ``threads``)."""
    flags = []
    if samples:
        median = percentile(samples, 50)
        if median > 0 and iqr(samples) / median > iqr_ratio:
            flags.append(f"noisy timings: IQR is {iqr(samples) / median:.0%} of the median (over {iqr_ratio:.0%})")
    loads = [r["load_1m"] for r in rounds if r.get("load_1m") is not None]
    if loads and max(loads) > cores:
        flags.append(f"machine busy: load average up to {max(loads):.2f} on {cores} core(s)")
    freqs = [r["cpu_mhz"] for r in rounds if r.get("cpu_mhz")]
    if freqs and min(freqs) > 0 and max(freqs) / min(freqs) - 1 > frequency_change:
        flags.append(f"CPU frequency changed during timing: {min(freqs):.0f}-{max(freqs):.0f} MHz")
    threads = sorted({r["threads"] for r in rounds if r.get("threads") is not None})
    if len(threads) > 1:
        flags.append(f"intra-op threads changed during timing: {threads}")
    return flags
