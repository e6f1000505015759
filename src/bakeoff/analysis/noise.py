"""Flags for timings that should not be trusted as they stand.

Each flag is a sentence a reader can act on. The thresholds are explicit parameters: IQR over
10% of the median (torch.utils.benchmark's warning), a 1-minute load average above the number
of cores (other work competed for them), CPU frequency moving more than 10% between rounds,
and the intra-op thread count changing while samples were taken.

Under an input profile the samples mix request shapes whose latencies differ by design (a
128-token request is slower than an 8-token one), so the spread of all samples together says
nothing about noise. There the spread is judged *within* each shape: every sample is divided by
its shape's median and the IQR of those ratios is compared with the threshold, and each shape
with enough samples of its own (:data:`MIN_SHAPE_SAMPLES`) is judged on its own as well.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bakeoff.stats import NOISE_IQR_RATIO, iqr, percentile

__all__ = ["MIN_SHAPE_SAMPLES", "noise_flags"]

#: A shape's own IQR is judged from this many of its samples (fewer only join the pooled ratios).
MIN_SHAPE_SAMPLES = 5


def noise_flags(
    samples: Sequence[float],
    rounds: Sequence[Mapping[str, Any]],
    cores: int,
    iqr_ratio: float = NOISE_IQR_RATIO,
    frequency_change: float = 0.10,
    series: Mapping[str, Sequence[float]] | None = None,
) -> list[str]:
    """Flags for ``samples`` taken over ``rounds`` (each with ``load_1m``, ``cpu_mhz``, ``threads``).

    ``series`` holds the same samples per request shape (an input profile); with two or more
    shapes the spread is judged within shapes (see the module docstring).
    """
    flags = []
    shapes = {name: list(values) for name, values in (series or {}).items() if values}
    if len(shapes) > 1:
        flag = _within_shapes(shapes, iqr_ratio)
        if flag:
            flags.append(flag)
    elif samples:
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


def _within_shapes(series: Mapping[str, list[float]], iqr_ratio: float) -> str | None:
    """The noise flag for samples of several shapes, or None when each shape is steady."""
    medians = {name: percentile(values, 50) for name, values in series.items()}
    ratios = [x / medians[name] for name, values in series.items() if medians[name] > 0 for x in values]
    pooled = iqr(ratios) / percentile(ratios, 50) if ratios and percentile(ratios, 50) > 0 else 0.0
    own = {
        name: iqr(values) / medians[name]
        for name, values in series.items()
        if len(values) >= MIN_SHAPE_SAMPLES and medians[name] > 0
    }
    noisy = sorted(((v, name) for name, v in own.items() if v > iqr_ratio), reverse=True)
    if pooled <= iqr_ratio and not noisy:
        return None
    worst = ", ".join(f"{name} {v:.0%}" for v, name in noisy[:3]) + (", ..." if len(noisy) > 3 else "")
    if pooled > iqr_ratio:
        return f"noisy timings: IQR within shapes is {pooled:.0%} of each shape's median (over {iqr_ratio:.0%})" + (
            f"; noisiest {worst}" if worst else ""
        )
    return (
        f"noisy timings in {len(noisy)} of {len(series)} shapes: IQR over {iqr_ratio:.0%} of the shape's "
        f"median ({worst})"
    )
