"""The single-server queue: known answers for Lindley's recursion and Poisson arrivals."""

from __future__ import annotations

import itertools

import pytest

from bakeoff.analysis.queueing import fifo_queue, poisson_arrivals, queue_depths


def test_back_to_back_arrivals_queue_behind_each_other():
    trace = fifo_queue([0.0, 1.0, 2.0, 10.0], [2.0, 2.0, 2.0, 2.0])
    assert trace.starts == (0.0, 2.0, 4.0, 10.0)
    assert trace.waits == (0.0, 1.0, 2.0, 0.0)
    assert trace.depths == (0, 1, 1, 0)  # at t=2 request 0 has just finished, request 1 is in service
    assert trace.latencies([0.0, 1.0, 2.0, 10.0]) == [2.0, 3.0, 4.0, 2.0]


def test_queue_depth_counts_unfinished_earlier_requests():
    assert queue_depths([0, 0, 0], [3, 6, 9]) == [0, 1, 2]
    assert queue_depths([0, 5], [1, 6]) == [0, 0]


def test_arrivals_must_be_ordered_and_matched():
    with pytest.raises(ValueError, match="time order"):
        fifo_queue([1.0, 0.5], [1.0, 1.0])
    with pytest.raises(ValueError, match="one service time"):
        fifo_queue([0.0], [1.0, 1.0])


def test_poisson_arrivals_have_the_requested_rate_and_are_reproducible():
    arrivals = poisson_arrivals(50.0, 20_001, seed=3)
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)
    assert (len(arrivals) - 1) / arrivals[-1] == pytest.approx(50.0, rel=0.03)
    assert poisson_arrivals(50.0, 10, seed=3) == arrivals[:10]
    assert poisson_arrivals(50.0, 10, seed=4) != arrivals[:10]
    with pytest.raises(ValueError, match="must be positive"):
        poisson_arrivals(0.0, 10)


def test_md1_mean_wait_matches_the_pollaczek_khinchine_formula():
    # M/D/1 with service 1 and load rho: mean wait = rho / (2 (1 - rho))
    for rho in (0.5, 0.8):
        arrivals = poisson_arrivals(rho, 200_000, seed=1)
        trace = fifo_queue(arrivals, [1.0] * len(arrivals))
        mean_wait = sum(trace.waits) / len(trace.waits)
        assert mean_wait == pytest.approx(rho / (2 * (1 - rho)), rel=0.08)


def test_exact_arrivals_offer_exactly_the_requested_rate():
    loose = poisson_arrivals(100.0, 100, seed=0)
    exact = poisson_arrivals(100.0, 100, seed=0, exact=True)
    assert 99 / exact[-1] == pytest.approx(100.0)
    assert abs(99 / loose[-1] - 100.0) > 1.0  # a hundred draws alone miss the rate noticeably
    gaps = [b - a for a, b in itertools.pairwise(exact)]
    loose_gaps = [b - a for a, b in itertools.pairwise(loose)]
    ratios = {round(g / h, 9) for g, h in zip(gaps, loose_gaps, strict=True)}
    assert len(ratios) == 1  # the same draws, uniformly rescaled
