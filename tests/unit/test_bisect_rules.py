"""The verdicts of a bisection on known timing samples (see :mod:`bakeoff.verdicts.bisect`)."""

from __future__ import annotations

import numpy as np
import pytest

from bakeoff.verdicts.bisect import (
    BisectStep,
    conclude,
    control_spread,
    judge_change,
    put_back,
    reproduced,
    within_reproduction,
)


def _samples(median_ms: float, jitter: float = 0.01, n: int = 40, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return [median_ms * (1 + jitter * x) for x in rng.standard_normal(n)]


CONTROL = _samples(3.0) + _samples(3.0, seed=1)


@pytest.mark.parametrize(
    ("variant_ms", "verdict"),
    [
        (1.0, "moves it back"),  # 3x faster with the change put back: the seeded cause
        (3.03, "no effect"),  # 1% apart, as two honest runs are
        (6.0, "makes it worse"),
        (2.6, "not conclusive"),  # 15% faster, but the floor between processes straddles the threshold
    ],
)
def test_each_change_is_judged_against_the_controls(variant_ms, verdict):
    assert judge_change(CONTROL, _samples(variant_ms, seed=2), spread=0.0, threshold=0.10)[0] == verdict


def test_controls_that_differ_widen_every_interval():
    spread = control_spread([_samples(3.0), _samples(3.6, seed=1)])
    assert spread == pytest.approx(np.log(1.2), rel=0.02)
    # 40% faster is a cause when the controls agree, not when they are 20% apart themselves
    assert judge_change(CONTROL, _samples(2.1, seed=2), 0.0, 0.10)[0] == "moves it back"
    assert judge_change(CONTROL, _samples(2.5, seed=2), spread, 0.10)[0] == "not conclusive"


def test_whether_the_regression_still_reproduces():
    before = _samples(1.0, seed=3)
    assert reproduced(before, _samples(3.0), 0.0, 0.10, regression=3.0) == "yes"
    assert reproduced(before, _samples(1.01), 0.0, 0.10, regression=3.0) == "no"
    assert reproduced(before, _samples(1.12), 0.0, 0.10, regression=1.2) == "not conclusive"
    # the seeded fault: a control 1.3x the before run (a busier machine now) against a 6x
    # regression reproduces nothing (it was "yes", over the threshold alone); the control: a
    # control at 5.5x of the same 6x does, and one at 1.5x of a 1.5x regression does too
    assert reproduced(before, _samples(1.3), 0.0, 0.10, regression=6.0) == "no"
    assert reproduced(before, _samples(5.5), 0.0, 0.10, regression=6.0) == "yes"
    assert reproduced(before, _samples(1.5), 0.0, 0.10, regression=1.5) == "yes"


def test_what_can_be_put_back():
    assert put_back("env.OMP_NUM_THREADS", None, "4") is None
    assert put_back("packages.transformers", "5.23.0", "5.24.0") is None
    assert "added since" in put_back("packages.onnx", None, "1.17.0")
    assert "machine's" in put_back("cpu.model", "EPYC", "Xeon")


def test_the_answer_agrees_with_the_verdicts_beside_it():
    cause = BisectStep("packages.transformers", "5.23.0", "5.24.0", "moves it back", p50_ms=1.0,
                       speedup={"value": 3.0, "low": 2.8, "high": 3.2})  # fmt: skip
    idle = BisectStep(
        "env.OMP_NUM_THREADS", None, "4", "no effect", p50_ms=3.0, speedup={"value": 1, "low": 1, "high": 1}
    )
    said = conclude("yes", [cause, idle], 3.0, 1.0, 3.1)
    assert said.startswith("the cause: putting back transformers 5.24.0 -> 5.23.0 alone gives 1 ms against 3 ms")
    assert "OMP_NUM_THREADS" not in said
    none = conclude("yes", [idle], 3.0, 1.0, 3.1)
    assert none.startswith("no change put back alone moves the figure back")
    assert conclude("no", [idle], 1.0, 1.0, 3.1).startswith("the regression does not reproduce here now")


def test_a_bisection_run_where_the_after_run_was_not_blames_the_environment_not_the_machines_load():
    # run in the before environment, the answer blamed "another state of the machine (load, ...)",
    # beside a table saying this machine has not the after run's packages
    idle = BisectStep("packages.numpy", "2.1.0", "2.2.0", "not tested", why="this machine has 2.1.0")
    said = conclude("no", [idle], 1.0, 1.0, 3.1, not_here=["packages.numpy"])
    assert said.endswith(
        "; this machine is not the after run's environment (packages.numpy differ from it), so bisect it where the "
        "after run was measured"
    )
    assert "load" not in said
    # the control: in the after run's environment, the machine's state is what is left
    assert "another state of the machine (load, other processes)" in conclude("no", [idle], 1.0, 1.0, 3.1)


def test_where_the_regression_does_not_reproduce_no_change_moves_it_back():
    # the seeded case: a change measured faster than the controls on a busy machine, while the
    # trial as it is runs as fast as the before run (it failed the bisect test under load)
    faster = BisectStep(
        "env.NOTE", None, "1", "moves it back", p50_ms=1.0, speedup={"value": 1.6, "low": 1.2, "high": 2}
    )
    worse = BisectStep(
        "env.SLOW", None, "1", "makes it worse", p50_ms=2.0, speedup={"value": 0.5, "low": 0.4, "high": 0.6}
    )
    judged = within_reproduction("no", [faster, worse])
    assert judged[0].verdict == "not conclusive" and "does not reproduce here now" in judged[0].why
    assert (judged[0].p50_ms, judged[0].speedup) == (faster.p50_ms, faster.speedup)  # the figures stay
    assert judged[1] == worse  # a slowdown is a measurement, not a cause named
    # the controls: where it reproduces, or may, the verdict stands
    assert within_reproduction("yes", [faster]) == (faster,)
    assert within_reproduction("not conclusive", [faster]) == (faster,)
