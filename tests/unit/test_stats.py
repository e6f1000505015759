"""Order statistics over raw latency samples."""

from __future__ import annotations

import random

import numpy as np
import pytest

from bakeoff.stats import NOISE_IQR_RATIO, iqr, is_noisy, mean, percentile


@pytest.mark.parametrize(
    ("samples", "q", "expected"),
    [
        ([5.0], 0, 5.0),
        ([5.0], 50, 5.0),
        ([5.0], 100, 5.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),
        ([4.0, 1.0, 3.0, 2.0], 50, 2.5),  # order of input does not matter
        ([1.0, 2.0, 3.0, 4.0], 0, 1.0),
        ([1.0, 2.0, 3.0, 4.0], 100, 4.0),
        ([1.0, 2.0, 3.0, 4.0], 25, 1.75),  # rank 0.75 -> 1 + 0.75 * 1
        ([1.0, 2.0, 3.0, 4.0], 75, 3.25),  # rank 2.25
        ([10.0, 20.0, 30.0, 40.0, 50.0], 90, 46.0),  # rank 3.6 -> 40 + 0.6 * 10
        ([10.0, 20.0, 30.0, 40.0, 50.0], 10, 14.0),  # rank 0.4
        ([0.0, 100.0], 99, 99.0),
        ([3.0, 3.0, 3.0], 37, 3.0),
        ([1, 3], 50, 2.0),  # integers are fine
    ],
)
def test_percentile_known_answers(samples: list[float], q: float, expected: float) -> None:
    assert percentile(samples, q) == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_percentile_does_not_modify_input() -> None:
    samples = [3.0, 1.0, 2.0]
    percentile(samples, 50)
    assert samples == [3.0, 1.0, 2.0]


def test_percentile_accepts_tuples() -> None:
    assert percentile((2.0, 1.0, 3.0), 50) == 2.0


@pytest.mark.parametrize("seed", range(5))
def test_percentile_matches_numpy_on_random_samples(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 200)
    samples = [rng.lognormvariate(0.0, 1.0) for _ in range(n)]
    for q in (0, 1, 5, 10, 25, 33.3, 50, 66.7, 75, 90, 95, 99, 99.9, 100):
        expected = float(np.percentile(samples, q))
        assert percentile(samples, q) == pytest.approx(expected, rel=1e-12), (n, q)


def test_percentile_monotonic_in_q() -> None:
    rng = random.Random(42)
    samples = [rng.random() for _ in range(50)]
    values = [percentile(samples, q) for q in range(101)]
    assert values == sorted(values)
    assert values[0] == min(samples)
    assert values[-1] == max(samples)


def test_percentile_empty_raises() -> None:
    with pytest.raises(ValueError, match="empty"):
        percentile([], 50)


@pytest.mark.parametrize("q", [-0.1, 100.01, 150, -5])
def test_percentile_q_out_of_range(q: float) -> None:
    with pytest.raises(ValueError, match="outside"):
        percentile([1.0, 2.0], q)


def test_mean() -> None:
    assert mean([1.0, 2.0, 3.0, 6.0]) == 3.0
    assert mean([0.1] * 10) == 0.1  # fsum: no accumulated rounding error
    with pytest.raises(ValueError, match="empty"):
        mean([])


def test_iqr_known_answers() -> None:
    assert iqr([1.0, 2.0, 3.0, 4.0]) == pytest.approx(1.5)  # 3.25 - 1.75
    assert iqr([1.0, 2.0, 3.0, 4.0, 5.0]) == 2.0  # 4 - 2
    assert iqr([7.0, 7.0, 7.0]) == 0.0
    assert iqr([9.0]) == 0.0


@pytest.mark.parametrize("seed", range(3))
def test_iqr_matches_numpy(seed: int) -> None:
    rng = random.Random(100 + seed)
    samples = [rng.gauss(10, 2) for _ in range(37)]
    q75, q25 = np.percentile(samples, [75, 25])
    assert iqr(samples) == pytest.approx(float(q75 - q25), rel=1e-12)


def test_iqr_empty_raises() -> None:
    with pytest.raises(ValueError, match="empty sample"):
        iqr([])


def test_noise_threshold_constant() -> None:
    assert NOISE_IQR_RATIO == 0.10


def test_is_noisy_thresholds() -> None:
    # five samples: q25 is the 2nd, median the 3rd, q75 the 4th (all exact binary values)
    exactly_at_threshold = [1.0, 9.5, 10.0, 10.5, 20.0]  # iqr 1.0 / median 10.0 = 0.1
    assert iqr(exactly_at_threshold) / percentile(exactly_at_threshold, 50) == 0.1
    assert not is_noisy(exactly_at_threshold)  # strictly greater is needed

    above = [1.0, 9.5, 10.0, 10.75, 20.0]  # 1.25 / 10 = 0.125
    assert is_noisy(above)

    below = [1.0, 9.75, 10.0, 10.5, 20.0]  # 0.75 / 10 = 0.075
    assert not is_noisy(below)


def test_is_noisy_custom_ratio() -> None:
    samples = [1.0, 9.75, 10.0, 10.5, 20.0]  # ratio 0.075
    assert is_noisy(samples, ratio=0.05)
    assert not is_noisy(samples, ratio=0.075)
    assert not is_noisy(samples, ratio=0.5)


def test_is_noisy_steady_and_spread() -> None:
    assert not is_noisy([2.0] * 30)
    assert not is_noisy([2.0] * 29 + [50.0])  # one outlier does not move the quartiles
    assert is_noisy([1.0, 2.0, 3.0, 4.0, 5.0])  # 2 / 3


def test_is_noisy_zero_median_is_not_noisy() -> None:
    assert not is_noisy([0.0, 0.0, 0.0])
    assert not is_noisy([0.0, 0.0, 0.0, 1.0, 2.0])  # median 0: no division by zero


def test_is_noisy_empty_raises() -> None:
    with pytest.raises(ValueError, match="empty sample"):
        is_noisy([])


def test_samples_needed_puts_one_observation_above_the_percentile():
    from bakeoff.stats import samples_needed

    assert [samples_needed(q) for q in (50, 90, 95, 99, 99.9)] == [2, 10, 20, 100, 1000]


def test_percentile_estimate_interval_is_deterministic_and_covers_the_truth():
    import numpy as np

    from bakeoff.stats import percentile_estimate

    rng = np.random.default_rng(7)
    covered = 0
    for trial in range(40):  # a 95% interval should cover the true median in most trials
        samples = list(rng.normal(10.0, 1.0, 200))
        estimate = percentile_estimate(samples, 50, seed=trial)
        assert estimate.low <= estimate.value <= estimate.high
        covered += estimate.low <= 10.0 <= estimate.high
    assert covered >= 34
    samples = list(rng.normal(10.0, 1.0, 50))
    assert percentile_estimate(samples, 90, seed=1) == percentile_estimate(samples, 90, seed=1)


def test_percentile_estimate_flags_too_few_samples_and_constant_data_has_no_width():
    from bakeoff.stats import percentile_estimate

    few = percentile_estimate([1.0, 2.0, 3.0] * 10, 99)
    assert few.samples == 30 and not few.enough
    assert percentile_estimate([1.0, 2.0, 3.0] * 40, 99).enough
    flat = percentile_estimate([4.0] * 20, 50)
    assert (flat.value, flat.low, flat.high) == (4.0, 4.0, 4.0)
    assert not percentile_estimate([4.0], 50).enough


def test_inverting_a_latency_estimate_gives_a_rate_with_the_interval_flipped():
    from bakeoff.stats import Estimate

    rate = Estimate(2.0, 1.0, 4.0, 30).inverted(1000.0)  # ms per item -> items per second
    assert (rate.value, rate.low, rate.high) == (500.0, 250.0, 1000.0)
    assert Estimate.from_dict(rate.to_dict()) == rate


# -- noise flags under an input profile: judged within each shape ----------------------------


def _shape_series(spread_short: float, spread_long: float, n: int = 20) -> dict[str, list[float]]:
    rng = random.Random(11)
    return {
        "1x8": [1.0 * (1 + rng.uniform(-spread_short, spread_short)) for _ in range(n)],
        "1x128": [10.0 * (1 + rng.uniform(-spread_long, spread_long)) for _ in range(n)],
    }


def _flags(series: dict[str, list[float]] | None, samples: list[float]) -> list[str]:
    from bakeoff.analysis.noise import noise_flags

    return [f for f in noise_flags(samples, [], cores=2, series=series) if f.startswith("noisy timings")]


def test_steady_shapes_of_different_lengths_are_not_noisy() -> None:
    series = _shape_series(0.01, 0.01)
    pooled = [x for values in series.values() for x in values]
    assert _flags(None, pooled)  # the fault: all shapes together spread 1 ms to 10 ms
    assert _flags(series, pooled) == []


def test_noise_within_every_shape_is_flagged() -> None:
    series = _shape_series(0.4, 0.4)
    (flag,) = _flags(series, [x for values in series.values() for x in values])
    assert flag.startswith("noisy timings: IQR within shapes is ")
    assert "1x8" in flag and "1x128" in flag


def test_one_noisy_shape_among_steady_ones_is_named() -> None:
    series = {**_shape_series(0.01, 0.01), "1x64": [5.0 * (1 + 0.5 * (i % 2)) for i in range(10)]}
    series["1x32"] = [3.0] * 30  # steady shapes outweigh it in the pooled ratios
    series["1x16"] = [2.0] * 30
    (flag,) = _flags(series, [x for values in series.values() for x in values])
    # 1x64 alternates 5 and 7.5 ms: IQR 2.5 of a median of 6.25
    assert flag == "noisy timings in 1 of 5 shapes: IQR over 10% of the shape's median (1x64 40%)"


def test_a_single_input_or_shape_is_judged_on_all_its_samples() -> None:
    steady, noisy = [1.0, 1.01, 0.99, 1.0], [1.0, 1.5, 0.6, 1.2]
    assert _flags(None, steady) == [] and _flags({"1x8": steady}, steady) == []
    assert _flags(None, noisy) and _flags({"1x8": noisy}, noisy)
