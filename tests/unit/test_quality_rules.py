"""The quality check's statistics and rules without a model: the paired difference, requirements
on a difference with its interval, regressions between two runs' differences, and the bad input
a user can give it."""

from __future__ import annotations

import pytest
from tests.conftest import FIXTURES, cli_in_process

from bakeoff.analysis.requirements import check_requirements, requirement_state
from bakeoff.checks.base import Metric
from bakeoff.checks.quality import Quality, QualityCheck
from bakeoff.checks.registry import parse_check
from bakeoff.errors import SpecError
from bakeoff.metrics import parse_requirement
from bakeoff.settings.trial_checks import check_checks
from bakeoff.stats import Estimate, paired_difference
from bakeoff.verdicts.regressions.rules import _check_metric
from bakeoff.verdicts.regressions.values import Thresholds


def test_pairing_cancels_what_every_example_shares():
    """Examples of very different difficulty, the target one hundredth lower on each: the paired
    interval is tight around -1 point; the examples' own spread does not widen it."""
    reference = [i / 100 for i in range(100)]  # 0.00 .. 0.99
    target = [s - 0.01 for s in reference]
    estimate = paired_difference(reference, target, scale=100)
    assert estimate.value == pytest.approx(-1.0)
    assert estimate.low == pytest.approx(-1.0) and estimate.high == pytest.approx(-1.0)
    assert estimate.samples == 100 and estimate.enough


def test_the_interval_holds_the_seeded_drop_and_is_deterministic():
    reference = [1.0] * 1000
    target = [0.0 if i % 33 == 0 and i < 990 else 1.0 for i in range(1000)]
    first = paired_difference(reference, target, scale=100)
    assert first == paired_difference(reference, target, scale=100)
    assert first.value == pytest.approx(-3.0) and -4.5 < first.low < -3 < first.high < -1.5


def test_a_large_sample_is_drawn_in_bounded_chunks_with_the_same_answer():
    reference = [float(i % 2) for i in range(50_000)]
    target = [1.0] * 50_000
    estimate = paired_difference(reference, target, resamples=200)
    assert estimate.value == pytest.approx(0.5) and estimate.low < 0.5 < estimate.high


@pytest.mark.parametrize(
    ("reference", "target", "said"),
    [([1.0], [1.0, 0.0], "1 reference scores paired with 2"), ([], [], "no examples")],
)
def test_unpaired_or_empty_scores_are_refused(reference, target, said):
    with pytest.raises(ValueError, match=said):
        paired_difference(reference, target)


def _verdict(text: str, value: float, low: float, high: float) -> str:
    requirement = parse_requirement(text)
    (check,) = check_requirements([requirement], {"quality": Estimate(value, low, high, 1000)})
    return requirement_state(check.to_dict())


@pytest.mark.parametrize(
    ("text", "interval", "state"),
    [
        ("quality>=-1", (-3.0, -4.1, -1.9), "not met"),
        ("quality>=-3", (-3.0, -4.1, -1.9), "not conclusive"),  # straddles the limit: never a pass
        ("quality>=-5", (-3.0, -4.1, -1.9), "met"),
        ("quality>=-1", (-0.2, -0.9, 0.5), "met"),
        ("quality>=-0.5", (-0.2, -0.9, 0.5), "not conclusive"),
        ("quality>=0", (0.0, 0.0, 0.0), "met"),
    ],
)
def test_a_requirement_on_quality_is_judged_on_the_whole_interval(text, interval, state):
    assert _verdict(text, *interval) == state


def test_only_a_score_may_have_a_negative_limit():
    assert parse_requirement("quality>=-0.5").threshold == -0.5
    with pytest.raises(SpecError, match="a time cannot be negative"):
        parse_requirement("p90<=-5ms")


def test_a_requirement_on_quality_asks_for_the_check_and_a_named_one_keeps_its_options():
    asked = check_checks((), {"requirements": ["quality>=-1", "p90<=5ms"]})
    assert [(spec.name, spec.options["task"]) for spec in asked] == [("quality", "perplexity")]
    named = check_checks(("quality?task=exact_match",), {"requirements": ["quality>=-1"]})
    assert [(spec.name, spec.options["task"]) for spec in named] == [("quality", "exact_match")]


def _metric(value: float, low: float, high: float) -> Metric:
    return Metric("quality", value, "score", estimate=Estimate(value, low, high, 500))


@pytest.mark.parametrize(
    ("before", "after", "outcome"),
    [
        ((0.0, -0.4, 0.4), (-3.0, -4.0, -2.0), "regressed"),
        ((-3.0, -4.0, -2.0), (0.0, -0.4, 0.4), "improved"),
        ((0.0, -0.4, 0.4), (-0.5, -1.0, 0.1), "unchanged"),  # the intervals overlap
    ],
)
def test_a_quality_difference_changes_between_runs_only_beyond_both_intervals(before, after, outcome):
    change = _check_metric(_metric(*before), _metric(*after), Thresholds())
    assert change is not None and change.outcome == outcome


def test_the_value_gives_its_interval_to_requirements():
    value = Quality("lower", difference=-3.0, low=-4.0, high=-2.0, examples=1000)
    (metric,) = QualityCheck().metrics(value)
    assert metric.estimate == Estimate(-3.0, -4.0, -2.0, 1000)
    assert QualityCheck().metrics(Quality("error", "it raised")) == []
    assert QualityCheck().misses(Quality("error", "it raised")) == (["quality error: it raised"], [])
    assert QualityCheck().misses(value) == ([], [])  # how much lower is acceptable is the requirement's


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("quality?task=bleu", "unknown quality task 'bleu'"),
        ("quality?unit=percent", "quality unit 'percent'"),
        ("quality?eval=no_such_module_here:score", "cannot load the evaluation function"),
        (f"quality?eval={FIXTURES / 'quality_models.py'}:missing", "has no function 'missing'"),
        ("quality?eval=score", "is not module:function"),
        ("quality?text=/no/such/file.txt", "no such file '/no/such/file.txt'"),
        ("quality?prompts=/tmp", "'/tmp' for the quality check's prompts is a directory, not a file"),
        ("quality?examples=1", "must be at least 2"),
    ],
)
def test_bad_options_are_one_line_before_anything_runs(spec, said):
    with pytest.raises(SpecError) as raised:
        parse_check(spec)
    assert said in raised.value.one_line()


def test_the_cli_refuses_a_bad_evaluation_with_one_line_and_exit_2(capsys, tmp_path):
    code, out, err = cli_in_process(
        capsys, "trial", "arch:llama", "--on", "cpu", "--db", str(tmp_path / "b.db"), "--check", "quality?eval=nope:f"
    )
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "cannot load the evaluation function 'nope:f'" in err
    assert not (tmp_path / "b.db").exists()


def _task(bounded: bool = True):
    from bakeoff.checks.quality_tasks import Task

    return Task("a test", "points", 100.0, lambda model, place: [], bounded=bounded)


def test_no_example_moving_widens_the_interval_to_what_an_exact_bound_allows():
    from bakeoff.checks.quality import _compared

    two = _compared(_task(), [1.0, 0.0], [1.0, 0.0])
    assert (
        two.verdict == "same"
        and two.low == pytest.approx(-84.19, abs=0.01)
        and two.high == pytest.approx(84.19, abs=0.01)
    )
    assert not two.estimate.enough  # and too few examples for a requirement
    many = _compared(_task(), [1.0] * 1000, [1.0] * 1000)
    assert many.low == pytest.approx(-0.368, abs=0.001) and many.estimate.enough
    assert _verdict("quality>=-0.5", many.difference, many.low, many.high) == "met"
    dropped = _compared(_task(), [1.0] * 1000, [0.0] * 30 + [1.0] * 970)  # drops only: the high end may widen
    assert dropped.verdict == "lower" and dropped.high >= -3 + 0.368


def test_overflowing_scores_are_not_comparable():
    from bakeoff.checks.quality import _compared

    value = _compared(_task(bounded=False), [1e308, -1e308], [-1e308, 1e308])
    assert value.verdict == "not_comparable" and "overflow" in value.reason


def test_the_recompile_limit_hit_while_scoring_makes_the_scores_not_comparable():
    """A compiled target that runs some shapes eagerly once its recompile limit is hit: its
    scores are partly not the compiled target's, so no verdict is drawn from them."""
    import torch

    from bakeoff.checks.base import CheckContext
    from bakeoff.runner.job import TargetJob
    from bakeoff.target.execute import Prepared
    from bakeoff.target.spec import parse_target
    from bakeoff.workload.registry import build_workload

    spec = f"py:{FIXTURES / 'quality_models.py'}:classifier"
    built = build_workload(spec)
    target = parse_target("cpu+aot_eager")
    hits = iter([0, 3])
    prepared = Prepared(target, built.model, (), {}, compile_summary=lambda: {"recompile_limit_hits": next(hits)})
    job = TargetJob(workload_spec=spec, target=target, fingerprint=built.fingerprint, baseline_path=None)
    context = CheckContext(job, target, prepared, {}, None, "float32", "float32", built.fingerprint)
    context.options = {k: o.default for k, o in QualityCheck.options.items()} | {
        "eval": f"{FIXTURES / 'quality_models.py'}:accuracy"
    }
    with torch.no_grad():
        value = QualityCheck().run(context)
    assert value.verdict == "not_comparable" and "the recompile limit was hit 3x while scoring" in value.reason
    assert QualityCheck().misses(value)[1]  # a doubt, not a miss


def test_options_of_the_built_in_tasks_are_refused_beside_an_evaluation():
    with pytest.raises(SpecError, match="examples= in"):
        parse_check(f"quality?eval={FIXTURES / 'quality_models.py'}:accuracy&examples=100")


def test_a_unit_on_quality_is_refused_saying_it_takes_none():
    with pytest.raises(SpecError) as raised:
        parse_requirement("quality>=-1%")
    assert raised.value.hint == "a score takes no unit"
