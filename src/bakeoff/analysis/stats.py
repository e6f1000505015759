"""Order statistics over raw samples.

Percentiles use linear interpolation between closest ranks (numpy's default "linear"
method), so results match ``numpy.percentile`` and are defined for any non-empty sample.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["NOISE_IQR_RATIO", "iqr", "is_noisy", "mean", "percentile"]

#: Samples whose interquartile range exceeds this fraction of the median are flagged noisy
#: (the threshold torch.utils.benchmark uses for its warning).
NOISE_IQR_RATIO = 0.10


def percentile(samples: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``samples`` with linear interpolation."""
    if not samples:
        raise ValueError("percentile of an empty sample")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside 0..100")
    ordered = sorted(samples)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def mean(samples: Sequence[float]) -> float:
    if not samples:
        raise ValueError("mean of an empty sample")
    return math.fsum(samples) / len(samples)


def iqr(samples: Sequence[float]) -> float:
    return percentile(samples, 75) - percentile(samples, 25)


def is_noisy(samples: Sequence[float], ratio: float = NOISE_IQR_RATIO) -> bool:
    """True when IQR / median exceeds ``ratio``."""
    median = percentile(samples, 50)
    return median > 0 and iqr(samples) / median > ratio
