"""Static-shape buckets: which few sizes to pad requests to, and what the padding costs.

Compilers that specialise on shapes compile once per distinct input shape; padding requests
up to a few fixed sizes ("buckets") bounds the number of compilations at the price of
computing on padding. These functions are pure and exact.

Padding waste is measured in tokens: for requests of lengths ``l_i`` and batch sizes ``b_i``
padded to buckets ``B(l_i)``, waste = sum b_i (B(l_i) - l_i) / sum b_i B(l_i), the share of
computed positions that are padding.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Sequence

__all__ = ["bucket_for", "optimal_buckets", "padding_waste", "power_of_two_buckets"]


def bucket_for(length: int, buckets: Sequence[int]) -> int:
    """The smallest bucket that holds ``length``.

    Raises:
        ValueError: ``length`` is larger than every bucket.
    """
    ordered = sorted(buckets)
    index = bisect.bisect_left(ordered, length)
    if index == len(ordered):
        raise ValueError(f"length {length} exceeds the largest bucket {ordered[-1]}")
    return ordered[index]


def padding_waste(lengths: Sequence[int], buckets: Sequence[int], batches: Sequence[int] | None = None) -> float:
    """Share of computed positions that are padding when each request is padded to its bucket."""
    weights = batches if batches is not None else [1] * len(lengths)
    padded = sum(w * bucket_for(n, buckets) for n, w in zip(lengths, weights, strict=True))
    real = sum(w * n for n, w in zip(lengths, weights, strict=True))
    return (padded - real) / padded if padded else 0.0


def power_of_two_buckets(lengths: Sequence[int]) -> list[int]:
    """Powers of two covering the observed lengths: the simple, common choice."""
    needed = {1 << max(0, (n - 1).bit_length()) for n in lengths}
    return sorted(needed)


def optimal_buckets(lengths: Sequence[int], k: int, batches: Sequence[int] | None = None) -> list[int]:
    """At most ``k`` bucket sizes that minimise padded positions for the observed requests.

    Algorithm: a bucket boundary is only ever useful at an observed length (moving it down to
    the largest length it serves never adds padding), and the largest length must be a bucket.
    Sorting the distinct lengths, ``cost[j][i]`` is the least padding for the first ``i``
    lengths with ``j`` buckets, the last ending at length ``i``; dynamic programming over
    ``O(k n^2)`` states gives the exact optimum.
    """
    if k < 1:
        raise ValueError("k must be at least 1")
    if not lengths:
        return []
    weights = batches if batches is not None else [1] * len(lengths)
    count: Counter = Counter()
    for n, w in zip(lengths, weights, strict=True):
        count[n] += w
    values = sorted(count)
    n = len(values)
    k = min(k, n)
    # prefix sums of weight and weight*length for O(1) group costs
    weight_sum, length_sum = [0], [0]
    for v in values:
        weight_sum.append(weight_sum[-1] + count[v])
        length_sum.append(length_sum[-1] + count[v] * v)

    def group_cost(lo: int, hi: int) -> int:  # lengths values[lo:hi] padded to values[hi-1]
        return values[hi - 1] * (weight_sum[hi] - weight_sum[lo]) - (length_sum[hi] - length_sum[lo])

    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(k + 1)]
    choice = [[0] * (n + 1) for _ in range(k + 1)]
    best[0][0] = 0
    for j in range(1, k + 1):
        for i in range(1, n + 1):
            for start in range(j - 1, i):
                candidate = best[j - 1][start] + group_cost(start, i)
                if candidate < best[j][i]:
                    best[j][i], choice[j][i] = candidate, start
    j = min(range(1, k + 1), key=lambda m: (best[m][n], m))
    buckets, i = [], n
    while i > 0:
        buckets.append(values[i - 1])
        i, j = choice[j][i], j - 1
    return sorted(buckets)
