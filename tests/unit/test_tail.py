"""A percentile's interval under correlated latencies, against simulated queues with a known
percentile (a long run of the same queue)."""

from __future__ import annotations

import numpy as np
import pytest

from bakeoff.analysis.queueing import fifo_queue, poisson_arrivals
from bakeoff.analysis.tail import correlated_percentile, integrated_time, requests_to_claim
from bakeoff.stats import percentile_estimate


def _md1(count: int, seed: int, load: float = 0.8, service_s: float = 0.005) -> list[float]:
    arrivals = poisson_arrivals(load / service_s, count, seed=seed)
    return fifo_queue(arrivals, [service_s] * count).latencies(arrivals)


def _held(runs: list[list[float]], truth: float) -> tuple[int, int, int, int]:
    """Of ``runs``: how many could bound the p99, how many of those held it, how many lower
    bounds held it, and how many independent-bootstrap intervals held it (the seeded fault: an
    interval that takes successive requests as independent draws)."""
    found = [correlated_percentile(r, 99) for r in runs]
    enough = [e for e in found if e.enough]
    independent = [percentile_estimate(r, 99, resamples=200, seed=1) for r in runs]
    return (
        len(enough),
        sum(e.low <= truth <= e.high for e in enough),
        sum(e.low <= truth for e in found),
        sum(e.low <= truth <= e.high for e in independent),
    )


def test_the_interval_holds_a_correlated_queues_p99_where_an_independent_one_does_not() -> None:
    # load 0.5, 5,000 requests a run: long enough to bound the p99 (deterministic seeds)
    truth = float(np.percentile(_md1(400_000, seed=999, load=0.5), 99))
    enough, held, _, independent = _held([_md1(5000, seed=s, load=0.5) for s in range(40)], truth)
    assert enough >= 36 and held >= 0.85 * enough, (enough, held)
    assert independent <= 0.75 * 40, independent


def test_a_run_too_correlated_to_bound_its_p99_says_so_and_keeps_a_lower_bound() -> None:
    # load 0.8, 2,000 requests: busy periods of dozens of requests leave under a hundred
    # effective ones, too few to bound a p99 from above
    truth = float(np.percentile(_md1(400_000, seed=999), 99))
    enough, _, lower, independent = _held([_md1(2000, seed=s) for s in range(40)], truth)
    assert enough == 0 and lower >= 38
    assert independent <= 0.3 * 40, independent  # the fault claimed intervals that missed


def test_independent_latencies_keep_their_count_and_an_ordinary_interval() -> None:
    # the control: no correlation, so the effective count is about the count
    rng = np.random.default_rng(0)
    values = list(rng.lognormal(0.0, 0.5, 5000))
    assert integrated_time(values) == pytest.approx(1.0, abs=0.2)
    found = correlated_percentile(values, 99)
    assert found.effective == pytest.approx(5000, rel=0.2) and found.enough
    truth = float(np.exp(0.5 * 2.3263478740408408))  # the lognormal's p99
    assert found.low <= truth <= found.high
    assert found.high / found.low < 1.25  # narrow: 5,000 independent draws


def test_a_run_too_short_for_its_percentile_says_so() -> None:
    assert requests_to_claim(99, 0.99) == 528 and requests_to_claim(90, 0.95) == 36
    short = correlated_percentile(_md1(300, seed=4), 99)
    assert not short.enough and short.high == max(_md1(300, seed=4))
    assert short.effective < short.samples  # the queue's correlation costs it requests


def test_a_percentile_is_bounded_from_above_exactly_when_enough_requests_claim_it() -> None:
    # independent exponential draws, 40-80 a run, around the 51 effective requests p90 needs at 99%:
    # the upper end exists exactly when the run is claimable, and then holds the true p90
    rng = np.random.default_rng(3)
    truth = float(np.log(10.0))  # the unit exponential's p90
    needed = requests_to_claim(90, 0.99)
    runs = [list(rng.exponential(1.0, int(n))) for n in rng.integers(40, 81, 400)]
    found = [correlated_percentile(r, 90, 0.99) for r in runs]
    assert all(e.enough == (e.effective >= needed) for e in found)
    bounded = [e for e in found if e.enough]
    assert 100 <= len(bounded) < len(found)  # both sides of the line were tried
    assert sum(e.high >= truth for e in bounded) >= 0.98 * len(bounded)
    assert sum(e.low <= truth for e in found) >= 0.98 * len(found)
    assert all(e.high == max(r) for e, r in zip(found, runs, strict=True) if not e.enough)
