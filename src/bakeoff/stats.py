"""Order statistics over raw samples.

Percentiles use linear interpolation between closest ranks (numpy's default "linear"
method), so results match ``numpy.percentile`` and are defined for any non-empty sample.

A top-level module, not part of :mod:`bakeoff.analysis`: the result values summarise their own
samples with it, and the analysis sits above the values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "NOISE_IQR_RATIO",
    "Estimate",
    "iqr",
    "is_noisy",
    "mean",
    "paired_difference",
    "percentile",
    "percentile_estimate",
    "samples_needed",
]

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


def samples_needed(q: float) -> int:
    """The fewest samples that put at least one observation above the ``q``-th percentile.

    With fewer, the p``q`` "estimate" is just the largest sample: p99 needs 100, p90 10, p50 2.
    """
    if not 0 <= q < 100:
        raise ValueError(f"percentile {q} outside 0..100 (exclusive of 100)")
    return max(1, math.ceil(100 / (100 - q) - 1e-9))


@dataclass(frozen=True)
class Estimate:
    """A statistic with its bootstrap ``confidence`` interval and how many samples back it.

    ``enough`` is False when the sample is too small for the statistic (see :func:`samples_needed`):
    the value is then reported, never hidden, but flagged.
    """

    value: float
    low: float
    high: float
    samples: int
    confidence: float = 0.95
    enough: bool = True

    def inverted(self, numerator: float) -> Estimate:
        """``numerator / x`` of a positive estimate (a latency into a rate): the interval flips."""
        return Estimate(
            numerator / self.value,
            numerator / self.high,
            numerator / self.low,
            self.samples,
            self.confidence,
            self.enough,
        )

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict) -> Estimate:
        return cls(**data)


def percentile_estimate(
    samples: Sequence[float], q: float, confidence: float = 0.95, resamples: int = 2000, seed: int = 0
) -> Estimate:
    """The ``q``-th percentile with a percentile-bootstrap interval.

    Algorithm: draw ``resamples`` resamples with replacement, take each one's ``q``-th
    percentile, and report the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2``
    percentiles of those. Deterministic for a given ``seed``. A single sample gives a
    zero-width interval and ``enough=False``.
    """
    if not samples:
        raise ValueError("percentile of an empty sample")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence {confidence} outside (0, 1)")
    import numpy as np

    values = np.asarray(samples, dtype=float)
    rng = np.random.default_rng(seed)
    draws = values[rng.integers(0, len(values), (resamples, len(values)))]
    stats = np.percentile(draws, q, axis=1)
    tail = (1 - confidence) / 2 * 100
    return Estimate(
        value=percentile(samples, q),
        low=float(np.percentile(stats, tail)),
        high=float(np.percentile(stats, 100 - tail)),
        samples=len(values),
        confidence=confidence,
        enough=len(values) >= samples_needed(q) and len(values) > 1,
    )


def paired_difference(
    reference: Sequence[float],
    target: Sequence[float],
    scale: float = 1.0,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> Estimate:
    """The mean of ``(target[i] - reference[i]) * scale`` over paired examples, with a
    percentile-bootstrap interval that resamples the *pairs* (each example's two scores stay
    together, so what every example shares, its difficulty, cancels). Deterministic for a given
    ``seed``. One pair gives a zero-width interval and ``enough=False``.

    Raises:
        ValueError: no pairs, or the two sequences differ in length.
    """
    if len(reference) != len(target):
        raise ValueError(f"{len(reference)} reference scores paired with {len(target)} target scores")
    if not reference:
        raise ValueError("a paired difference of no examples")
    import numpy as np

    diffs = (np.asarray(target, dtype=float) - np.asarray(reference, dtype=float)) * scale
    rng = np.random.default_rng(seed)
    chunk = max(1, min(resamples, 2_000_000 // len(diffs)))  # a bounded index matrix per draw
    means = np.concatenate(
        [
            diffs[rng.integers(0, len(diffs), (min(chunk, resamples - done), len(diffs)))].mean(axis=1)
            for done in range(0, resamples, chunk)
        ]
    )
    tail = (1 - confidence) / 2 * 100
    return Estimate(
        value=float(diffs.mean()),
        low=float(np.percentile(means, tail)),
        high=float(np.percentile(means, 100 - tail)),
        samples=len(diffs),
        confidence=confidence,
        enough=len(diffs) > 1,
    )
