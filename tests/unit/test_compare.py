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
    with pytest.raises(ValueError):
        ratio_of_medians([], [1.0])
    with pytest.raises(ValueError):
        ratio_of_medians([1.0], [0.0])
    with pytest.raises(ValueError):
        ratio_of_medians([1.0], [1.0], confidence=1.0)


def test_break_even_known_answers():
    # 1000 ms to compile and answer, then 1 ms; eager takes 3 ms: (1000 - 1) / (3 - 1) = 499.5 -> 500
    assert break_even_requests(1000.0, 1.0, 3.0) == 500
    assert break_even_requests(2.0, 1.0, 3.0) == 1  # pays back on the first request
    assert break_even_requests(1000.0, 3.0, 3.0) is None  # never faster per request
    assert break_even_requests(1000.0, 4.0, 3.0) is None
