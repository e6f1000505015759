"""``bakeoff plan``: on a profile that hits the recompile limit, the plan finds the padded
variant that meets the requirement, keeps every stage's evidence, and respects the options the
user set."""

from __future__ import annotations

import pytest

import bakeoff
from bakeoff.errors import SpecError
from bakeoff.runner.plan import variants_of
from bakeoff.settings.plan import parse_budget
from bakeoff.target.spec import parse_target

LLAMA = "arch:llama?layers=1&hidden=32"
STATIC = "cpu+aot_eager?dynamic=false"
FOUR = "seq=8,9,10,11"  # 4 lengths: past a recompile limit of 2 (the test lowers it from 8: fewer compiles)


@pytest.mark.compile
def test_the_plan_finds_the_padded_variant_when_the_recompile_limit_is_hit(db, monkeypatch):
    import torch._dynamo.config

    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 2)  # the plan runs in this process
    plan = bakeoff.plan(LLAMA, on=STATIC, budget="10min", db=db, profile=FOUR, requirements=["recompiles<=0"],
                        isolate=False, min_samples=5, min_seconds=0.0)  # fmt: skip
    decision = plan.decision
    assert (decision.outcome, decision.target) == ("recommended", f"{STATIC} padded to 11")
    lines = " | ".join(decision.lines)
    assert f"{STATIC} ruled out by recompiles<=0 not met" in lines  # the as-is target: the seeded problem
    assert "cpu (for comparison, not a candidate)" in lines  # the reference was not asked for
    assert {"name": "pad to buckets", "value": [11]} in plan.ledger
    assert {"name": "compile dynamic", "value": False} in plan.ledger  # the user's choice is kept
    assert [s.name for s in plan.stages] == ["as given", "variants"]
    assert plan.stages[1].targets == ("padded to 11",)  # no dynamic=true: the user fixed dynamic=false
    for stage in plan.stages:  # every stage's evidence is in the knowledge base
        assert bakeoff.show(stage.run_id, db=db).workload["spec"] == LLAMA
    tagged = {row.run_id for row in bakeoff.history(db=db, tag=plan.tag)}
    assert plan.tag == f"plan-{plan.stages[0].run_id}" and tagged == {s.run_id for s in plan.stages}
    assert plan.seconds < plan.budget_s


def test_budgets_and_variants():
    assert parse_budget("10min") == 600 and parse_budget("90s") == 90 and parse_budget("1.5h") == 5400
    assert parse_budget("168h") == 7 * 24 * 3600
    for bad, said in (("soon", "not a duration"), ("10 parsecs", "not a duration"), ("30s", "under a minute"),
                      ("1ms", "under a minute"), ("169h", "over a week"), ("99999999999h", "over a week")):  # fmt: skip
        with pytest.raises(SpecError, match=said):
            parse_budget(bad)
    assert [t.spec for t in variants_of(parse_target("cpu+inductor"))] == ["cpu+inductor?dynamic=true"]
    assert [t.spec for t in variants_of(parse_target("cpu+openvino"))] == [
        "cpu+openvino?dynamic=true",
        "cpu+openvino?precision=f32",
    ]
    assert variants_of(parse_target("cpu+inductor?dynamic=false")) == []  # what the user set is kept
    assert variants_of(parse_target("cpu")) == []


def test_a_plan_keeps_a_tiny_budget_and_names_what_it_left_untried(db):
    """A real plan on a tiny model, eager CPU targets only. Its first stage needs at least 6 s of
    timing (three sessions, 2 s each), so in a 10 s budget the second stage can never fit after
    it: whether the first stage finishes or is stopped at the budget's end depends on this
    machine's speed, and the test accepts either. What it asserts is the plan's own accounting,
    which the stop guarantees at any speed: nothing started on an estimate beyond what was left,
    the plan ended within its stated tolerance of the budget, and the untried stage is named."""
    plan = bakeoff.plan("arch:llama?layers=1&hidden=32&seq=8", on="cpu?threads=1", budget=10.0, db=db,
                        profile="seq=4,8", isolate=False, min_samples=3, min_seconds=2.0)  # fmt: skip
    first, variants = plan.stages
    assert first.estimate_s == 6.0 and first.left_s is not None and first.estimate_s <= first.left_s
    assert variants.untried and not variants.run_id
    assert plan.untried[-1].startswith("padded to 8 (variants): ")
    assert plan.seconds <= plan.budget_s + plan.tolerance_s
    if first.stopped:  # the budget ran out in it: nothing of it is kept, nothing decided
        assert plan.untried[0].startswith("cpu?threads=1 (as given): stopped after ")
        assert plan.decision.outcome == "none" and plan.tag == "" and bakeoff.history(db=db) == []
    else:  # it finished: its evidence is stored and tagged, and the second stage's estimate did not fit
        assert variants.skipped.startswith("estimated ") and variants.estimate_s > variants.left_s
        assert {row.run_id for row in bakeoff.history(db=db, tag=plan.tag)} == {first.run_id}
