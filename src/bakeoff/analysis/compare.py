"""Comparing two sets of timing samples honestly: ratios with bootstrap intervals, and when a
compiled target pays back its compile time.

A bootstrap over one process's samples (or its rounds) sees the noise *within* that process.
It cannot see what differs *between* worker processes running the same code (where their
memory landed, the cores they ran on): identical targets in two workers differ by a few
percent, run after run, and such an interval calls that difference significant most of the
time. :func:`with_process_spread` widens an interval by a between-process spread measured with
``benchmarks/aa_calibration.py`` (A/A trials: the same target twice), so that a difference
inside that spread is not called significant.

All functions are pure and deterministic (the bootstrap takes an explicit seed).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist

from bakeoff.stats import percentile

__all__ = [
    "PROCESS_SPREAD",
    "RatioEstimate",
    "break_even_requests",
    "ratio_of_medians",
    "ratio_of_paired_blocks",
    "with_process_spread",
]

#: The standard deviation of log(median latency) between worker processes of one target, beyond
#: what a bootstrap over one process's rounds sees. From A/A trials of the tiny llama on a shared
#: 2-core machine (one thread per worker, benchmarks/aa_calibration.py): identical workers
#: measured 0.95-1.06x of each other, a log-ratio standard deviation of about 0.03 (robust to the
#: busiest trials), so about 0.02 per process. A machine with quieter or noisier processes can
#: measure and pass its own (``process_spread``).
PROCESS_SPREAD = 0.02


@dataclass(frozen=True)
class RatioEstimate:
    """``value`` = median(a) / median(b), with a ``confidence`` interval ``[low, high]``.

    ``significant`` is False when the interval contains 1: the data cannot tell the two apart.
    ``bootstrap_low`` and ``bootstrap_high`` keep the bootstrap's own interval when
    :func:`with_process_spread` widened it by ``process_spread`` (else they are None and 0).
    """

    value: float
    low: float
    high: float
    confidence: float
    bootstrap_low: float | None = None
    bootstrap_high: float | None = None
    process_spread: float = 0.0

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
            "bootstrap_low": self.bootstrap_low,
            "bootstrap_high": self.bootstrap_high,
            "process_spread": self.process_spread,
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


def with_process_spread(
    estimate: RatioEstimate,
    spread: float,
    processes: tuple[int, int] = (1, 1),
    resampled_processes: bool = False,
) -> RatioEstimate:
    """``estimate`` with its interval widened by the spread between worker processes.

    Algorithm (on the log scale, where a ratio's errors add): each side's median carries a
    process effect with standard deviation ``spread``, averaged over its ``processes``, so the
    ratio's process part has half-width ``h = z * spread * sqrt(1/n_a + 1/n_b)`` at the
    estimate's confidence (``z`` the normal quantile). A bootstrap over rounds of one process
    per side cannot see that part: each side of the interval becomes ``sqrt(b^2 + h^2)``
    (``b`` the bootstrap's half-width on that side). A bootstrap that resampled processes
    (``resampled_processes``) saw it, but from too few processes to trust its size: ``h`` is
    then a floor, ``max(b, h)``. ``spread`` 0 returns the estimate unchanged.

    Raises:
        ValueError: a negative spread or fewer than one process on a side.
    """
    if spread < 0:
        raise ValueError(f"process spread {spread} is negative")
    if min(processes) < 1:
        raise ValueError(f"each side needs at least one process, got {processes}")
    if spread == 0 or estimate.value <= 0 or estimate.low <= 0:
        return estimate
    z = NormalDist().inv_cdf((1 + estimate.confidence) / 2)
    h = z * spread * math.sqrt(1 / processes[0] + 1 / processes[1])
    below = math.log(estimate.value / estimate.low)
    above = math.log(estimate.high / estimate.value) if math.isfinite(estimate.high) else math.inf
    if resampled_processes:
        below, above = max(below, h), max(above, h)
    else:
        below, above = math.hypot(below, h), math.hypot(above, h)
    return replace(
        estimate,
        low=estimate.value * math.exp(-below),
        high=estimate.value * math.exp(above) if math.isfinite(above) else math.inf,
        bootstrap_low=estimate.low,
        bootstrap_high=estimate.high,
        process_spread=spread,
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
