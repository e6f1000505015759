"""Comparing two sets of timing samples honestly: ratios with bootstrap intervals, and when a
compiled target pays back its compile time.

All functions are pure and deterministic (the bootstrap takes an explicit seed).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from bakeoff.analysis.stats import percentile

__all__ = ["RatioEstimate", "break_even_requests", "ratio_of_medians", "ratio_of_paired_blocks"]


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


def ratio_of_paired_blocks(
    a_blocks: Sequence[Sequence[float]],
    b_blocks: Sequence[Sequence[float]],
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> RatioEstimate:
    """median(a) / median(b) with a paired block-bootstrap interval, for samples timed in turns.

    Samples taken one after another are not independent: the machine drifts, so neighbouring
    samples share its speed, and resampling single samples gives intervals that are too narrow.
    When two targets were timed in alternating rounds, round ``i`` of each saw the same machine.
    Algorithm: pair the rounds by index (the longer side's extra rounds join its last pair),
    resample *pairs* with replacement, pool each side's samples of the chosen pairs, and take
    the ratio of medians; the interval is the percentiles of those ratios. With one pair it
    falls back to :func:`ratio_of_medians`.

    Raises:
        ValueError: no samples on a side, or a non-positive median.
    """
    a_blocks = [list(x) for x in a_blocks if len(x)]
    b_blocks = [list(x) for x in b_blocks if len(x)]
    pairs = min(len(a_blocks), len(b_blocks))
    if pairs < 2:
        return ratio_of_medians(
            [x for blk in a_blocks for x in blk], [x for blk in b_blocks for x in blk], confidence, resamples, seed
        )
    a_blocks = [*a_blocks[: pairs - 1], [x for blk in a_blocks[pairs - 1 :] for x in blk]]
    b_blocks = [*b_blocks[: pairs - 1], [x for blk in b_blocks[pairs - 1 :] for x in blk]]
    import numpy as np

    rng = np.random.default_rng(seed)
    xa = [np.asarray(blk, dtype=float) for blk in a_blocks]
    xb = [np.asarray(blk, dtype=float) for blk in b_blocks]
    ratios = []
    for _ in range(resamples):
        chosen = rng.integers(0, pairs, pairs)
        denominator = float(np.median(np.concatenate([xb[i] for i in chosen])))
        numerator = float(np.median(np.concatenate([xa[i] for i in chosen])))
        ratios.append(numerator / denominator if denominator > 0 else math.inf)
    all_a = [x for blk in a_blocks for x in blk]
    all_b = [x for blk in b_blocks for x in blk]
    med_b = percentile(all_b, 50)
    if med_b <= 0:
        raise ValueError("the denominator's median must be positive")
    tail = (1 - confidence) / 2 * 100
    return RatioEstimate(
        percentile(all_a, 50) / med_b, percentile(ratios, tail), percentile(ratios, 100 - tail), confidence
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
