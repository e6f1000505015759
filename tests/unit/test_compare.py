from __future__ import annotations

import random

import pytest

from bakeoff.analysis.compare import break_even_requests, ratio_of_medians


def test_ratio_of_identical_distributions_is_not_significant():
    rng = random.Random(1)
    a = [rng.gauss(10, 1) for _ in range(200)]
    b = [rng.gauss(10, 1) for _ in range(200)]
    estimate = ratio_of_medians(a, b)
    assert estimate.low < 1 < estimate.high
    assert not estimate.significant


def test_ratio_of_clearly_different_distributions():
    rng = random.Random(2)
    a = [rng.gauss(5, 0.2) for _ in range(200)]
    b = [rng.gauss(10, 0.4) for _ in range(200)]
    estimate = ratio_of_medians(a, b)
    assert estimate.value == pytest.approx(0.5, rel=0.02)
    assert estimate.low < estimate.value < estimate.high < 1
    assert estimate.significant


def test_ratio_is_exact_for_constant_samples_and_deterministic():
    estimate = ratio_of_medians([2.0] * 10, [4.0] * 10)
    assert (estimate.value, estimate.low, estimate.high) == (0.5, 0.5, 0.5)
    a, b = [1.0, 2.0, 3.0, 9.0], [2.0, 2.5, 3.5]
    assert ratio_of_medians(a, b, seed=7) == ratio_of_medians(a, b, seed=7)


def test_wider_confidence_gives_a_wider_interval():
    rng = random.Random(3)
    a = [rng.expovariate(1) for _ in range(50)]
    b = [rng.expovariate(1) for _ in range(50)]
    narrow, wide = ratio_of_medians(a, b, confidence=0.5), ratio_of_medians(a, b, confidence=0.99)
    assert wide.low <= narrow.low and narrow.high <= wide.high


def test_ratio_errors():
    with pytest.raises(ValueError, match="needs two non-empty samples"):
        ratio_of_medians([], [1.0])
    with pytest.raises(ValueError, match="denominator's median must be positive"):
        ratio_of_medians([1.0], [0.0])
    with pytest.raises(ValueError, match=r"confidence 1.0 outside \(0, 1\)"):
        ratio_of_medians([1.0], [1.0], confidence=1.0)


def test_break_even_known_answers():
    # 1000 ms to compile and answer, then 1 ms; eager takes 3 ms: (1000 - 1) / (3 - 1) = 499.5 -> 500
    assert break_even_requests(1000.0, 1.0, 3.0) == 500
    assert break_even_requests(2.0, 1.0, 3.0) == 1  # pays back on the first request
    assert break_even_requests(1000.0, 3.0, 3.0) is None  # never faster per request
    assert break_even_requests(1000.0, 4.0, 3.0) is None


def test_paired_blocks_of_identical_rounds_give_exactly_one():
    from bakeoff.analysis.compare import ratio_of_paired_blocks

    blocks = [[1.0 + i * 0.1 + j * 0.001 for j in range(20)] for i in range(8)]  # strong drift between rounds
    estimate = ratio_of_paired_blocks(blocks, blocks)
    assert (estimate.value, estimate.low, estimate.high) == (1.0, 1.0, 1.0)
    assert not estimate.significant


def test_paired_blocks_widen_the_interval_when_rounds_disagree():
    import numpy as np

    from bakeoff.analysis.compare import ratio_of_medians, ratio_of_paired_blocks

    rng = np.random.default_rng(0)
    per_round = [0.95, 1.05, 0.97, 1.03, 0.96, 1.04, 0.98, 1.02, 0.99, 1.01]  # drift the rounds share
    a = [list(rng.normal(1.0, 0.002, 50)) for _ in per_round]
    b = [list(rng.normal(r, 0.002, 50)) for r in per_round]
    paired = ratio_of_paired_blocks(a, b)
    pooled = ratio_of_medians([x for blk in a for x in blk], [x for blk in b for x in blk])
    assert paired.value == pytest.approx(pooled.value)
    assert paired.high - paired.low > 2 * (pooled.high - pooled.low)
    assert paired.low <= 1.0 <= paired.high


def test_paired_blocks_keep_unpaired_rounds_and_fall_back_with_one_round():
    from bakeoff.analysis.compare import ratio_of_medians, ratio_of_paired_blocks

    a = [[2.0] * 5, [2.0] * 5, [2.0] * 5]
    b = [[1.0] * 5, [1.0] * 5]
    estimate = ratio_of_paired_blocks(a, b)  # a's third round joins its second pair
    assert (estimate.value, estimate.low, estimate.high) == (2.0, 2.0, 2.0) and estimate.significant
    assert ratio_of_paired_blocks([[1.0, 2.0, 3.0]], [[1.0, 1.5]]) == ratio_of_medians([1.0, 2.0, 3.0], [1.0, 1.5])


# -- the spread between worker processes -----------------------------------------------------


def test_process_spread_known_answers():
    import math

    from bakeoff.analysis.compare import RatioEstimate, with_process_spread

    exact = RatioEstimate(1.0, 1.0, 1.0, 0.95)  # a bootstrap that saw no noise at all
    h = 1.959964 * 0.02 * math.sqrt(2)  # one process a side
    widened = with_process_spread(exact, 0.02)
    assert widened.low == pytest.approx(math.exp(-h), rel=1e-6) and widened.high == pytest.approx(math.exp(h))
    assert (widened.bootstrap_low, widened.bootstrap_high, widened.process_spread) == (1.0, 1.0, 0.02)
    assert not widened.significant and widened.to_dict()["process_spread"] == 0.02
    # three processes a side: the process part shrinks with sqrt(1/3 + 1/3)
    assert with_process_spread(exact, 0.02, (3, 3)).high == pytest.approx(math.exp(h / math.sqrt(3)))
    # a bootstrap over rounds cannot see processes: the parts add in quadrature, per side
    boot = RatioEstimate(1.5, 1.5 / math.exp(0.05), 1.5 * math.exp(0.01), 0.95)
    both = with_process_spread(boot, 0.02)
    assert both.value == 1.5
    assert math.log(1.5 / both.low) == pytest.approx(math.hypot(0.05, h))
    assert math.log(both.high / 1.5) == pytest.approx(math.hypot(0.01, h))
    # a bootstrap over processes saw some of it: the process part is a floor
    floor = with_process_spread(boot, 0.02, (3, 3), resampled_processes=True)
    assert math.log(1.5 / floor.low) == pytest.approx(0.05)  # already wider than the floor
    assert math.log(floor.high / 1.5) == pytest.approx(h / math.sqrt(3))


def test_process_spread_zero_changes_nothing_and_bad_input_is_refused():
    from bakeoff.analysis.compare import RatioEstimate, with_process_spread

    estimate = RatioEstimate(1.04, 1.03, 1.05, 0.95)
    assert with_process_spread(estimate, 0.0) is estimate
    with pytest.raises(ValueError, match="negative"):
        with_process_spread(estimate, -0.01)
    with pytest.raises(ValueError, match="at least one process"):
        with_process_spread(estimate, 0.02, (0, 1))


def _aa_trials(trials: int, spread: float, effect: float, seed: int):
    """Simulated trials timed in turns: each process has its own speed (log-normal, ``spread``),
    the rounds share drift, and the target is ``effect`` times as fast as the reference."""
    import numpy as np

    from bakeoff.analysis.compare import ratio_of_paired_blocks

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(trials):
        ref_speed, tgt_speed = np.exp(rng.normal(0, spread, 2))
        drift = np.exp(rng.normal(0, 0.01, 10))
        ref = [list(rng.normal(1.0, 0.02, 30) * d * ref_speed) for d in drift]
        tgt = [list(rng.normal(1.0, 0.02, 30) * d * tgt_speed / effect) for d in drift]
        out.append(ratio_of_paired_blocks(ref, tgt, resamples=300))
    return out


def test_aa_intervals_contain_one_once_the_process_spread_is_included():
    from bakeoff.analysis.compare import with_process_spread

    estimates = _aa_trials(60, spread=0.02, effect=1.0, seed=5)
    bootstrap_only = sum(e.significant for e in estimates) / len(estimates)
    widened = sum(with_process_spread(e, 0.02).significant for e in estimates) / len(estimates)
    assert bootstrap_only > 0.5  # the fault users saw: identical targets "differ" most of the time
    assert widened <= 0.10  # calibrated: about 5% false positives


def test_a_real_difference_beyond_the_process_spread_is_still_significant():
    from bakeoff.analysis.compare import with_process_spread

    estimates = _aa_trials(20, spread=0.02, effect=1.25, seed=6)
    assert all(with_process_spread(e, 0.02).significant for e in estimates)
    assert sorted(e.value for e in estimates)[10] == pytest.approx(1.25, rel=0.03)  # the widening moves no value
