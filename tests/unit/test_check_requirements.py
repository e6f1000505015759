"""Requirements on the checks' metrics: ``recompiles<=0``, ``device_op_share>=95%``, ``graphs<=1``."""

from __future__ import annotations

import pytest
from tests.revisit_data import environment, make_run

from bakeoff.checks.compilation import Compilation
from bakeoff.checks.placement import Placement
from bakeoff.errors import SpecError
from bakeoff.metrics import parse_requirement
from bakeoff.results.values import Latency, TargetResult
from bakeoff.target.spec import parse_target
from bakeoff.verdicts.metrics import check_target


def test_a_check_metric_parses_as_a_count_or_a_share():
    recompiles = parse_requirement("recompiles<=0")
    assert (recompiles.metric, recompiles.threshold, recompiles.unit, recompiles.scenario) == ("recompiles", 0, "", "")
    assert parse_requirement("device_op_share>=95%").threshold == pytest.approx(0.95)
    assert parse_requirement("device_op_share>=0.95").threshold == pytest.approx(0.95)
    with pytest.raises(SpecError, match="ms is not a count unit"):
        parse_requirement("graphs<=1ms")
    with pytest.raises(SpecError, match="unknown requirement metric 'recompilez'") as refused:
        parse_requirement("recompilez<=0")
    assert "recompiles" in refused.value.hint and "device_op_share" in refused.value.hint


def _compiled(recompiles: int) -> TargetResult:
    value = Compilation(graphs=1 + recompiles, recompiles=recompiles)
    return TargetResult(parse_target("cpu+inductor"), "ok", latency=Latency((1.0,)), checks={"compilation": value})


def test_a_recompiling_target_fails_the_requirement_and_a_steady_one_meets_it():
    required = [parse_requirement("recompiles<=0")]
    (fault,) = check_target(_compiled(2), required)
    assert (fault.verdict, fault.value, fault.samples) == ("not_met", 2, 1)  # a single observation
    (control,) = check_target(_compiled(0), required)
    assert control.verdict == "met"


def test_a_check_that_does_not_apply_makes_its_requirement_not_applicable_not_a_failure():
    eager = TargetResult(
        parse_target("cpu"),
        "ok",
        latency=Latency((1.0,)),
        skipped_checks={"compilation": "an eager target compiles nothing"},
    )
    (moot,) = check_target(eager, [parse_requirement("graphs<=1")])
    assert moot.verdict == "not_applicable" and "an eager target compiles nothing" in moot.reason
    # a check that applies but measured nothing is a gap in the evidence, not "not applicable"
    cpu = TargetResult(
        parse_target("cpu"), "ok", latency=Latency((1.0,)), checks={"placement": Placement("not_applicable", "")}
    )
    (gap,) = check_target(cpu, [parse_requirement("device_op_share>=95%")])
    assert gap.verdict == "not_measured"

    # --strict fails on not_met and not_measured, never on not_applicable
    def stored(result, checks):
        return TargetResult(result.target, "ok", requirements=tuple(c.to_dict() for c in checks))

    run = make_run("r", "2025-01-01T00:00:00+00:00", environment(), (
        stored(eager, [moot]),
        stored(_compiled(2), check_target(_compiled(2), [parse_requirement("recompiles<=0")])),
    ))  # fmt: skip
    assert run.failures(requirements=True) == ["cpu+inductor"]
