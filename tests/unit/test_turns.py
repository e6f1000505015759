"""Targets timed in turns: the order of turns, and speed intervals that include the spread
between worker processes. Pure: fake sessions and synthetic results, no processes."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest

from bakeoff.results.values import Correctness, Latency, TargetResult
from bakeoff.runner.trial import REFERENCE, _drive, _speedups
from bakeoff.target.spec import parse_target


class FakeSession:
    """A worker that needs ``rounds`` rounds and writes each one into a shared log."""

    def __init__(self, name: str, rounds: int, log: list[str]) -> None:
        self.name, self.left, self.log = name, rounds, log
        self.timing_done = False
        self.job = SimpleNamespace(scenarios=())

    def start(self) -> bool:
        return False

    def round(self) -> bool:
        self.log.append(self.name)
        self.left -= 1
        self.timing_done = self.left == 0
        return self.timing_done

    def run_scenarios(self) -> None:
        pass

    def finish(self) -> str:
        return self.name


def _turns(names: str, rounds: int) -> list[str]:
    log: list[str] = []
    sessions = [(n, SimpleNamespace(name=n, is_reference=False, scenarios=())) for n in names]
    assert _drive(sessions, lambda job: FakeSession(job.name, rounds, log), True, lambda _msg: None) == list(names)
    return log


def test_three_targets_take_every_place_and_never_follow_themselves():
    log = _turns("ABC", 6)
    assert log == [*"ABC", *"BCA", *"CAB", *"ABC", *"BCA", *"CAB"]
    assert all(a != b for a, b in itertools.pairwise(log))  # the reversing order (ABC CBA) ran C twice
    for place in range(3):
        assert sorted(log[place::3]) == sorted("AABBCC")  # each target twice in each place


def test_two_targets_alternate_who_goes_first():
    assert _turns("AB", 4) == [*"AB", *"BA", *"AB", *"BA"]


def _result(spec: str, rounds: list[list[float]], reference: bool = False) -> TargetResult:
    return TargetResult(
        parse_target(spec),
        "ok",
        is_reference=reference,
        latency=Latency(tuple(x for block in rounds for x in block)),
        conditions={"rounds": [{"samples": len(block)} for block in rounds]},
        checks={"correctness": Correctness("pass")},
    )


def _rounds(scale: float, seed: int) -> list[list[float]]:
    rng = np.random.default_rng(seed)
    return [list(rng.normal(1.0, 0.01, 40) * scale * drift) for drift in (1.0, 1.02, 0.99, 1.01, 0.98, 1.0)]


def _ratio(scale: float, spread: float) -> dict:
    ref = _result("cpu", _rounds(1.0, 1), reference=True)
    other = _result("cpu?threads=1", _rounds(scale, 2))
    updated = _speedups([ref, other], REFERENCE, interleaved=True, spread=spread)
    assert updated[0].speedup == 1.0 and updated[0].speedup_ci["low"] == updated[0].speedup_ci["high"] == 1.0
    return updated[1].speedup_ci


def test_a_difference_inside_the_process_spread_is_not_significant():
    without = _ratio(1.03, spread=0.0)
    assert without["significant"] and without["high"] < 1.0  # the fault: rounds alone call 3% certain
    ci = _ratio(1.03, spread=0.02)
    assert not ci["significant"] and ci["low"] < 1.0 < ci["high"]
    assert (ci["bootstrap_low"], ci["bootstrap_high"]) == (without["low"], without["high"])
    assert ci["process_spread"] == 0.02


def test_a_difference_beyond_the_process_spread_is_significant():
    ci = _ratio(1.25, spread=0.02)
    assert ci["significant"] and ci["high"] < 0.9
    assert ci["value"] == pytest.approx(1 / 1.25, rel=0.02)


def test_few_replicate_processes_get_the_process_spread_as_a_floor():
    from bakeoff.runner.replicates import merge_replicates

    def pooled(spec: str, scales: tuple[float, ...], reference: bool = False) -> TargetResult:
        return merge_replicates([_result(spec, _rounds(s, i), reference) for i, s in enumerate(scales)])

    ref = pooled("cpu", (1.0, 1.01, 1.0), reference=True)
    other = pooled("cpu?threads=1", (1.03, 1.04, 1.03))
    without = _speedups([ref, other], REFERENCE, interleaved=True, spread=0.0)[1].speedup_ci
    assert without["significant"]  # three processes a side cannot show their own spread
    ci = _speedups([ref, other], REFERENCE, interleaved=True, spread=0.02)[1].speedup_ci
    assert not ci["significant"] and ci["low"] < 1.0 < ci["high"]


def test_process_spread_is_validated_and_stored(tmp_path):
    import bakeoff
    from bakeoff.runner.trial import TrialSettings

    with pytest.raises(bakeoff.BakeoffError, match=r"process spread must be in \[0, 1\)"):
        bakeoff.trial("arch:llama", db=tmp_path / "b.db", process_spread=-0.1)
    assert TrialSettings().to_dict()["process_spread"] == 0.02
    assert TrialSettings(process_spread=0.05).to_dict()["process_spread"] == 0.05
