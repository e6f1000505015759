"""Comparing two sets of timing samples honestly: ratios with bootstrap intervals, and when a
compiled target pays back its compile time.

All functions are pure and deterministic (the bootstrap takes an explicit seed).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from bakeoff.analysis.stats import percentile

__all__ = ["RatioEstimate", "break_even_requests", "ratio_of_medians"]


@dataclass(frozen=True)
class RatioEstimate:
    """``value`` = median(a) / median(b), with a ``confidence`` interval ``[low, high]``.

    ``significant`` is False when the interval contains 1: the data cannot tell the two apart.
    """

    value: float
    low: float
    high: float
    confidence: float

    @property
    def significant(self) -> bool:
        return not (self.low <= 1.0 <= self.high)

    def to_dict(self) -> dict:
        return {
            "value": self.value,
            "low": self.low,
            "high": self.high,
            "confidence": self.confidence,
            "significant": self.significant,
        }


def ratio_of_medians(
    a: Sequence[float], b: Sequence[float], confidence: float = 0.95, resamples: int = 2000, seed: int = 0
) -> RatioEstimate:
    """Percentile-bootstrap interval for median(a) / median(b).

    Algorithm: resample ``a`` and ``b`` independently with replacement ``resamples`` times,
    take the ratio of medians each time, and report the ``(1 - confidence) / 2`` and
    ``(1 + confidence) / 2`` percentiles of those ratios. Independent resampling suits timing
    samples from two separate runs; it makes no assumption about their distribution.

    Raises:
        ValueError: an empty sample, a non-positive median, or confidence outside (0, 1).
    """
    if not a or not b:
        raise ValueError("ratio of medians needs two non-empty samples")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence {confidence} outside (0, 1)")
    med_b = percentile(b, 50)
    if med_b <= 0:
        raise ValueError("the denominator's median must be positive")
    import numpy as np

    rng = np.random.default_rng(seed)
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    # all resamples at once: one row per resample
    denominators = np.median(xb[rng.integers(0, len(xb), (resamples, len(xb)))], axis=1)
    numerators = np.median(xa[rng.integers(0, len(xa), (resamples, len(xa)))], axis=1)
    with np.errstate(divide="ignore"):
        safe = np.where(denominators > 0, denominators, 1.0)
        ratios = [float(x) for x in np.where(denominators > 0, numerators / safe, math.inf)]
    tail = (1 - confidence) / 2 * 100
    return RatioEstimate(
        percentile(a, 50) / med_b, percentile(ratios, tail), percentile(ratios, 100 - tail), confidence
    )


def break_even_requests(
    first_call: float, steady: float, reference: float, reference_first: float | None = None
) -> float | None:
    """After how many requests a compiled target has paid back its slow start.

    The compiled target costs ``first_call + (n - 1) * steady`` for ``n`` requests, the
    reference ``reference_first + (n - 1) * reference`` (``reference_first`` defaults to
    ``reference``: a reference with no start-up cost). They are equal at ``n = 1 +
    (first_call - reference_first) / (reference - steady)``. Returns that ``n`` rounded up (at
    least 1), or None when the compiled target is not faster per request and so never pays back.
    """
    if steady >= reference:
        return None
    start = reference if reference_first is None else reference_first
    return max(1.0, math.ceil(1 + (first_call - start) / (reference - steady) - 1e-9))
