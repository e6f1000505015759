from __future__ import annotations

import itertools
import random

import pytest

from bakeoff.analysis.buckets import bucket_for, optimal_buckets, padding_waste, power_of_two_buckets


def test_bucket_for_picks_the_smallest_that_fits():
    assert bucket_for(5, [8, 4, 16]) == 8
    assert bucket_for(8, [8, 16]) == 8
    with pytest.raises(ValueError, match="exceeds the largest bucket 16"):
        bucket_for(17, [8, 16])


def test_padding_waste_known_answers():
    # 3 -> 4 (1 pad), 4 -> 4, 9 -> 16 (7 pad): 8 pads out of 24 computed positions
    assert padding_waste([3, 4, 9], [4, 16]) == pytest.approx(8 / 24)
    assert padding_waste([4, 16], [4, 16]) == 0.0
    # batches weight the positions: 3 x2 -> 2 pads of 8; 9 x1 -> 7 pads of 16
    assert padding_waste([3, 9], [4, 16], batches=[2, 1]) == pytest.approx(9 / 24)


def test_power_of_two_buckets():
    assert power_of_two_buckets([1, 3, 16, 17, 100]) == [1, 4, 16, 32, 128]


def test_optimal_buckets_small_known_answers():
    assert optimal_buckets([5, 5, 9, 30], 1) == [30]
    assert optimal_buckets([5, 5, 9, 30], 2) == [9, 30]  # pads 4+4 = 8 (vs [5, 30]: 21)
    assert optimal_buckets([5, 5, 9, 30], 3) == [5, 9, 30]
    assert optimal_buckets([5, 5, 9, 30], 10) == [5, 9, 30]  # never more buckets than lengths
    # a heavy batch on 20 pulls a bucket there
    assert optimal_buckets([10, 20, 30], 2, batches=[1, 100, 1]) == [20, 30]


def _brute_force(lengths, k):
    values = sorted(set(lengths))
    best = None
    for size in range(1, min(k, len(values)) + 1):
        for combo in itertools.combinations(values[:-1], size - 1):
            buckets = [*combo, values[-1]]
            waste = sum(bucket_for(n, buckets) - n for n in lengths)
            if best is None or waste < best[0]:
                best = (waste, buckets)
    return best[0]


@pytest.mark.parametrize("seed", range(20))
def test_optimal_buckets_match_brute_force(seed):
    rng = random.Random(seed)
    lengths = [rng.randint(1, 200) for _ in range(rng.randint(1, 25))]
    k = rng.randint(1, 5)
    buckets = optimal_buckets(lengths, k)
    assert len(buckets) <= k and max(buckets) == max(lengths)
    assert sum(bucket_for(n, buckets) - n for n in lengths) == _brute_force(lengths, k)
