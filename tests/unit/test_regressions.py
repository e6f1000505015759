"""Regression detection on synthetic series whose answers are known."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from bakeoff.checks.registry import registered_checks
from bakeoff.env import Environment
from bakeoff.results.values import Compilation, Correctness, ErrorInfo, Latency, Placement, RunResult, TargetResult
from bakeoff.target.spec import parse_target
from bakeoff.verdicts.regressions import (
    Thresholds,
    compare_results,
    environment_diff,
    find_regressions,
    pair_runs,
    timing_noise,
)

OLD = Environment({"torch": "2.13.0", "packages": {"torch": "2.13.0", "numpy": "2.1.0"}, "env": {}})
NEW = Environment(
    {"torch": "2.14.0", "packages": {"torch": "2.14.0", "numpy": "2.1.0"}, "env": {"OMP_NUM_THREADS": "1"}}
)


def samples(median: float, n: int = 60, spread: float = 0.02, seed: int = 0) -> tuple[float, ...]:
    rng = random.Random(seed)
    return tuple(median * (1 + rng.uniform(-spread, spread)) for _ in range(n))


def result(spec: str = "cpu+inductor", median: float = 1.0, **extra: Any) -> TargetResult:
    values: dict[str, Any] = {
        "status": "ok",
        "correctness": Correctness("pass"),
        "placement": Placement("on_device", "", device_op_share=1.0),
        "compilation": Compilation(graphs=1, recompiles=0, graph_breaks=0),
        "latency": Latency(samples(median, seed=extra.pop("seed", 0))),
        "first_call_ms": 100.0,
    }
    values.update(extra)
    checks = {c.name: values.pop(c.name) for c in registered_checks() if c.name in values}
    return TargetResult(target=parse_target(spec), checks={k: v for k, v in checks.items() if v is not None}, **values)


def classify(before: TargetResult, after: TargetResult, fp_after: str = "f" * 16, **thresholds: Any):
    return compare_results(
        before,
        after,
        before_fingerprint="f" * 16,
        after_fingerprint=fp_after,
        thresholds=Thresholds(**thresholds),
    )


def by_metric(metrics) -> dict[str, str]:
    return {m.metric: m.outcome for m in metrics}


def test_same_result_is_unchanged_everywhere():
    outcome, reason, metrics = classify(result(), result(seed=1))
    assert outcome == "unchanged" and reason == ""
    assert set(by_metric(metrics).values()) == {"unchanged"}
    assert list(by_metric(metrics)) == [
        "status",
        "correctness",
        "placement",
        "device_op_share",
        "host_op_calls",
        "host_state_copies",
        "graphs",
        "recompiles",
        "graph_breaks",
        "p50_ms",
        "first_call_ms",
    ]


BIMODAL = (0.5,) * 10 + (1.5,) * 10  # medians of resamples jump between the modes


@pytest.mark.parametrize(
    ("before", "after", "expected", "overall"),
    [
        (samples(1.0, seed=4), samples(1.30, seed=3), "regressed", "regressed"),  # 30% slower, tight samples
        (samples(1.0, seed=4), samples(0.70, seed=3), "improved", "improved"),
        (samples(1.0, seed=4), samples(1.05, seed=3), "unchanged", "unchanged"),  # significant, but within 10%
        # 25% slower medians, but the interval contains 1: not conclusive, and no change overall
        ((*BIMODAL, 1.0), (*BIMODAL, 1.25), "not_comparable", "unchanged"),
    ],
)
def test_latency_needs_both_size_and_significance(before, after, expected, overall):
    outcome, reason, metrics = classify(result(latency=Latency(before)), result(latency=Latency(after)))
    change = next(m for m in metrics if m.metric == "p50_ms")
    assert change.outcome == expected
    assert outcome == overall
    assert change.low <= change.change <= change.high
    if before[0] == 0.5:
        assert change.change == 1.25 and change.low < 1 < change.high
        assert change.detail.startswith("not conclusive (its 95% interval contains 1); x1.25 (")
        assert change.inconclusive and reason == "p50_ms not conclusive"
    else:
        assert not change.inconclusive


def test_latency_threshold_is_a_parameter():
    after = result(latency=Latency(samples(1.05, seed=3)))
    _, _, metrics = classify(result(), after, latency=0.02)
    assert by_metric(metrics)["p50_ms"] == "regressed"


def test_too_few_samples_are_not_comparable():
    _, _, metrics = classify(result(latency=Latency((1.0, 1.0))), result(latency=Latency((2.0, 2.0))))
    change = next(m for m in metrics if m.metric == "p50_ms")
    assert change.outcome == "not_comparable" and "fewer than 5 samples" in change.detail


def test_verdicts_placement_and_counts():
    after = result(
        correctness=Correctness("fail", "outputs differ"),
        placement=Placement("fallbacks", "3 ops on host", device_op_share=0.80),
        compilation=Compilation(graphs=3, recompiles=2, graph_breaks=0),
        first_call_ms=40.0,
    )
    before = result(compilation=Compilation(graphs=1, recompiles=0, graph_breaks=1))
    outcome, reason, metrics = classify(before, after)
    assert by_metric(metrics) == {
        "status": "unchanged",
        "correctness": "regressed",
        "placement": "regressed",
        "device_op_share": "regressed",
        "host_op_calls": "unchanged",  # the synthetic result names no ops: only the share moved
        "host_state_copies": "unchanged",
        "p50_ms": "unchanged",
        "first_call_ms": "improved",
        "graphs": "regressed",
        "recompiles": "regressed",
        "graph_breaks": "improved",
    }
    assert outcome == "regressed"  # the worst wins
    assert "correctness" in reason and "first_call_ms" in reason


def test_improvement_only():
    outcome, _, metrics = classify(result(correctness=Correctness("fail")), result())
    assert outcome == "improved" and by_metric(metrics)["correctness"] == "improved"


def test_error_after_is_failed_and_error_before_then_ok_is_improved():
    broken = TargetResult(
        target=parse_target("cpu+inductor"),
        status="error",
        error=ErrorInfo("RuntimeError", "backend crashed\nmore", category="crash", phase="compile"),
    )
    outcome, reason, metrics = classify(result(), broken)
    assert outcome == "failed" and reason == "crash: RuntimeError: backend crashed"
    assert [(m.metric, m.outcome) for m in metrics] == [("status", "failed")]
    outcome, _, metrics = classify(broken, result())
    assert outcome == "improved" and by_metric(metrics)["status"] == "improved"
    assert by_metric(metrics)["p50_ms"] == "not_comparable"


def test_fingerprint_or_adjustments_change_make_it_not_comparable():
    outcome, reason, metrics = classify(result(), result(latency=Latency(samples(3.0))), fp_after="e" * 16)
    assert outcome == "not_comparable"
    assert reason == f"workload fingerprint changed ({'f' * 16} -> {'e' * 16}): a different model or inputs"
    assert set(by_metric(metrics).values()) == {"not_comparable"}
    assert next(m for m in metrics if m.metric == "p50_ms").change > 2  # the values stay for information
    adjusted = result(adjustments=({"name": "environment", "value": "TORCHINDUCTOR_FREEZING=1"},))
    outcome, reason, _ = classify(result(), adjusted)
    assert outcome == "not_comparable"
    assert reason == "adjustments differ (none -> environment=TORCHINDUCTOR_FREEZING=1)"


def test_skipped_side_is_not_comparable():
    skipped = TargetResult(target=parse_target("cpu+inductor"), status="skipped", reason="no compiler")
    outcome, reason, _ = classify(result(), skipped)
    assert outcome == "not_comparable" and reason == "skipped after: no compiler"


def test_requirement_verdicts():
    def req(text: str, verdict: str, confident: bool = True) -> dict[str, Any]:
        return {"text": text, "verdict": verdict, "confident": confident}

    before = result(requirements=(req("p50 < 5 ms", "met"), req("correct", "met"), req("straddles", "met")))
    after = result(
        requirements=(
            req("p50 < 5 ms", "not_met"), req("correct", "not_measured"), req("new", "met"),
            req("straddles", "not_met", confident=False),
        )
    )  # fmt: skip
    _, _, metrics = classify(before, after)
    assert by_metric(metrics)["requirement: p50 < 5 ms"] == "regressed"
    # an interval that straddles its threshold is no "not met": not a regression, not comparable
    assert by_metric(metrics)["requirement: straddles"] == "not_comparable"
    assert by_metric(metrics)["requirement: correct"] == "not_comparable"
    assert by_metric(metrics)["requirement: new"] == "not_comparable"  # checked on one side only
    same = (req("p50 < 5 ms", "met"), req("correct", "met"), req("straddles", "met"))
    outcome, _, _ = classify(before, result(requirements=same))
    assert outcome == "unchanged"


def test_environment_diff_names_what_changed():
    diff = environment_diff(
        Environment({**OLD.data, "captured_at": "a", "load_average": [1, 1, 1]}),
        Environment({**NEW.data, "captured_at": "b", "env": {"OMP_NUM_THREADS": "1", "TORCHINDUCTOR_CACHE_DIR": "/x"}}),
    )
    assert [(c.key, c.before, c.after) for c in diff.changes] == [
        ("env.OMP_NUM_THREADS", None, "1"),
        ("packages.torch", "2.13.0", "2.14.0"),
        ("torch", "2.13.0", "2.14.0"),
    ]
    assert [c.key for c in diff.libraries] == ["packages.torch", "torch"]
    assert diff.summary() == "torch 2.13.0 -> 2.14.0, env.OMP_NUM_THREADS unset -> 1"
    assert environment_diff(OLD, Environment(dict(OLD.data))).same


def _run(run_id: str, when: str, env: Environment, *results: TargetResult, spec: str = "arch:llama") -> RunResult:
    workload = {"spec": spec, "fingerprint": "f" * 16}
    return RunResult(run_id, f"2025-01-0{when}T00:00:00+00:00", workload, env, tuple(results))


def test_pair_runs_skips_reruns_in_the_same_environment():
    headers = [
        ("r1", "1", "w", "envA", [("cpu", "as-is")]),
        ("r2", "2", "w", "envB", [("cpu", "as-is"), ("cuda", "as-is")]),
        ("r3", "3", "w", "envB", [("cpu", "as-is"), ("cuda", "as-is")]),
        ("r4", "4", "v", "envA", [("cpu", "as-is")]),
    ]
    assert pair_runs(headers) == [(("w", "cpu", "as-is"), "r1", "r3")]


def test_find_regressions_over_a_series():
    slow = result(latency=Latency(samples(1.5, seed=9)))
    runs = [
        _run("r1", "1", OLD, result("cpu"), result()),
        _run("r2", "2", OLD, result("cpu", seed=2), result(seed=2)),
        _run("r3", "3", NEW, result("cpu", seed=3), slow),
        _run("r4", "4", NEW, result("cpu", seed=4)),  # only cpu: inductor's latest stays r3
    ]
    found = {c.target: c for c in find_regressions(runs)}
    assert set(found) == {"cpu", "cpu+inductor"}
    assert (found["cpu"].before_run, found["cpu"].after_run, found["cpu"].outcome) == ("r2", "r4", "unchanged")
    inductor = found["cpu+inductor"]
    assert (inductor.before_run, inductor.after_run, inductor.outcome) == ("r2", "r3", "regressed")
    assert [m.metric for m in inductor.regressed] == ["p50_ms"]
    assert inductor.environment.summary().startswith("torch 2.13.0 -> 2.14.0")
    doc = inductor.to_dict()
    assert doc["outcome"] == "regressed" and doc["thresholds"]["latency"] == 0.10
    assert doc["environment"]["changes"][0]["key"] == "env.OMP_NUM_THREADS"
    # one environment only: nothing to compare
    assert find_regressions(runs[:2]) == []
    assert find_regressions([replace(runs[0], run_id="x")]) == []


def test_first_call_needs_a_relative_and_an_absolute_change():
    _, _, metrics = classify(result(first_call_ms=0.2), result(first_call_ms=1.4))
    change = next(m for m in metrics if m.metric == "first_call_ms")
    assert change.outcome == "unchanged" and change.change == pytest.approx(7.0)  # jitter below 5 ms
    _, _, metrics = classify(result(first_call_ms=20.0), result(first_call_ms=40.0))
    assert by_metric(metrics)["first_call_ms"] == "regressed"
    _, _, metrics = classify(result(first_call_ms=0.2), result(first_call_ms=1.4), first_call_floor_ms=0.5)
    assert by_metric(metrics)["first_call_ms"] == "regressed"


def test_scenario_figures_are_classified_like_latency():
    from bakeoff.results.values import ScenarioResult

    def scenarios(ttft: float, step: float, items_per_s: float) -> tuple[ScenarioResult, ...]:
        return (
            ScenarioResult("generation", "ok", series={"ttft": samples(ttft, seed=1), "tpot": samples(1.0, seed=2)}),
            ScenarioResult("training", "ok", series={"step": samples(step, seed=3)}),
            ScenarioResult("offline", "ok", facts={"batches": [{"batch": 8, "items_per_s": items_per_s}]}),
        )

    before = result(scenarios=scenarios(ttft=10.0, step=5.0, items_per_s=1000.0))
    after = result(scenarios=scenarios(ttft=15.0, step=5.05, items_per_s=1500.0), seed=0)
    outcome, _, metrics = classify(before, after)
    found = by_metric(metrics)
    assert found["ttft_p50_ms"] == "regressed"  # 1.5x, far outside its interval
    assert found["tpot_p50_ms"] == "unchanged"
    assert found["training_step_p50_ms"] == "unchanged"  # 1% is within the 10% threshold
    assert found["offline_items_per_s"] == "improved"
    assert outcome == "regressed"
    # a scenario that did not run on one side is simply not compared
    _, _, metrics = classify(before, result())
    assert "ttft_p50_ms" not in by_metric(metrics)


def test_fallback_counts_are_compared_even_when_the_rounded_share_is_not():
    """One op fewer marked unsupported: 13 -> 9 fallbacks moved the share by under a point."""
    before = result(
        placement=Placement(
            "fallbacks", "13 op call(s)", device_op_share=0.979, fallback_ops={"aten::rsqrt.out": 9, "aten::mul.out": 4}
        )
    )
    after = result(placement=Placement("fallbacks", "9 op call(s)", device_op_share=0.979,
                                       fallback_ops={"aten::rsqrt.out": 9}))  # fmt: skip
    outcome, reason, metrics = classify(before, after)
    change = next(m for m in metrics if m.metric == "host_op_calls")
    assert (change.outcome, change.before, change.after, change.change) == ("improved", 13, 9, -4.0)
    assert change.detail == "aten::mul.out 4 -> 0"
    assert by_metric(metrics)["device_op_share"] == "unchanged"  # the share alone would have hidden it
    assert outcome == "improved" and "host_op_calls improved" in reason
    # control: the same counts are unchanged
    _, _, metrics = classify(before, result(placement=before.placement))
    assert by_metric(metrics)["host_op_calls"] == "unchanged"


def test_host_state_copies_are_compared_by_module():
    state = ({"module": "head", "count": 2, "bytes": 32},)
    before = result(placement=Placement("on_device", "", device_op_share=1.0))
    after = result(placement=Placement("left_on_host", "host state", device_op_share=1.0, host_state_copies=state))
    outcome, _, metrics = classify(before, after)
    change = next(m for m in metrics if m.metric == "host_state_copies")
    assert change.outcome == "regressed" and change.detail == "head 0 -> 2"
    assert by_metric(metrics)["placement"] == "regressed" and outcome == "regressed"


def test_engine_that_stopped_running_is_a_placement_regression():
    cpu = {"spec": "cpu+openvino"}
    ran = result(**cpu, placement=Placement("not_applicable", "", device_op_share=1.0))
    idle = result(**cpu, placement=Placement("engine_did_not_run", "openvino ran 0%", device_op_share=0.0))
    _, _, metrics = classify(ran, idle)
    assert by_metric(metrics)["placement"] == "regressed"
    assert by_metric(metrics)["device_op_share"] == "regressed"
    _, _, metrics = classify(idle, ran)
    assert by_metric(metrics)["placement"] == "improved"
    # verdicts of equal rank but different kinds are not ranked against each other
    left = result(placement=Placement("left_on_host", "", device_op_share=1.0))
    idle_device = result(placement=Placement("engine_did_not_run", "", device_op_share=0.0))
    assert by_metric(classify(left, idle_device)[2])["placement"] == "not_comparable"


# -- cost per million requests --------------------------------------------------------------
# A price of 3.6/h is 1000 per second of the machine per million requests, and the reference
# takes exactly 1 ms (1000 requests/s), so a target at speed-up S costs 1 / S per million.


def _speedup(value: float, low: float, high: float) -> dict[str, float]:
    return {"value": value, "low": low, "high": high}


def _priced(run_id: str, when: str, env: Environment, target: TargetResult, *prices: str) -> RunResult:
    reference = result("cpu", latency=Latency((1.0,) * 60), is_reference=True)
    run = _run(run_id, when, env, reference, target)
    return replace(run, settings={"prices": list(prices)} if prices else {})


def _fast(speed: tuple[float, float, float], seed: int = 0) -> TargetResult:
    return result(latency=Latency(samples(1 / speed[0], seed=seed)), speedup_ci=_speedup(*speed))


def _cost_change(before: RunResult, after: RunResult, spec: str = "cpu+inductor", **thresholds: Any):
    from bakeoff.verdicts.regressions import compare_pair

    comparison = compare_pair(before, before.result(spec), after, after.result(spec), Thresholds(**thresholds))
    return comparison, next((m for m in comparison.metrics if m.metric == "cost"), None)


def test_cost_regresses_when_the_target_got_slower_at_the_same_price():
    before = _priced("r1", "1", OLD, _fast((2.0, 1.9, 2.1)), "cpu=$3.6/h")
    after = _priced("r2", "2", NEW, _fast((1.6, 1.5, 1.7), seed=1), "cpu=$3.6/h")
    comparison, cost = _cost_change(before, after)
    assert cost is not None and cost.outcome == "regressed"
    assert (cost.before, cost.after, cost.change) == pytest.approx((0.5, 0.625, 1.25))
    assert cost.detail == (
        "$0.5 -> $0.625 per million requests (+25%): same price $3.6/h, single-stream rate 2,000.0/s -> 1,600.0/s"
    )
    assert comparison.outcome == "regressed" and "cost regressed" in comparison.reason
    assert comparison.to_dict()["metrics"][-1]["metric"] == "cost"
    # control: the same speed (within its interval) and the same price
    same = _priced("r2", "2", NEW, _fast((2.02, 1.92, 2.12), seed=1), "cpu=$3.6/h")
    _, cost = _cost_change(before, same)
    assert cost is not None and cost.outcome == "unchanged" and cost.change == pytest.approx(2.0 / 2.02)
    assert cost.detail.endswith("; within 10%")


def test_cost_is_the_figure_the_run_decision_ranks_by():
    from bakeoff.verdicts.decision import cost_in_run, decide_run

    run = _priced("r1", "1", OLD, _fast((2.0, 1.9, 2.1)), "cpu=$3.6/h")
    standing = next(s for s in decide_run(run).standings if s.target == "cpu+inductor")
    assert standing.cost is not None and standing.cost == cost_in_run(run, run.result("cpu+inductor"))
    assert (standing.cost.value, standing.cost.low, standing.cost.high) == pytest.approx((0.5, 1 / 2.1, 1 / 1.9))


def test_cost_change_within_overlapping_intervals_is_not_conclusive():
    """18% dearer, but the speed-up's intervals overlap: the data cannot tell."""
    before = _priced("r1", "1", OLD, _fast((2.0, 1.5, 2.5)), "cpu=$3.6/h")
    after = _priced("r2", "2", NEW, _fast((1.7, 1.3, 2.1), seed=1), "cpu=$3.6/h")
    comparison, cost = _cost_change(before, after)
    assert cost is not None and cost.outcome == "not_comparable" and cost.change == pytest.approx(2.0 / 1.7)
    assert cost.inconclusive and cost.detail.startswith("not conclusive (the intervals overlap); $0.5 -> $0.588")
    assert cost not in comparison.regressed and "cost not conclusive" in comparison.reason
    # a threshold above the change: unchanged for its size alone
    _, cost = _cost_change(before, after, cost=0.5)
    assert cost is not None and cost.outcome == "unchanged" and cost.detail.endswith("; within 50%")


def test_cost_improves_when_the_price_dropped():
    before = _priced("r1", "1", OLD, _fast((2.0, 1.9, 2.1)), "cpu=$3.6/h")
    after = _priced("r2", "2", NEW, _fast((2.0, 1.9, 2.1), seed=1), "cpu=$2.7/h")
    comparison, cost = _cost_change(before, after)
    assert cost is not None and cost.outcome == "improved"
    assert (cost.before, cost.after) == pytest.approx((0.5, 0.375))
    assert cost.detail == (
        "$0.5 -> $0.375 per million requests (-25%): price $3.6/h -> $2.7/h, single-stream rate 2,000.0/s -> 2,000.0/s"
    )
    assert comparison.outcome == "improved"


def test_reference_cost_is_judged_by_its_latency_interval():
    """The reference's cost has no interval of its own (its speed is its run's unit): whether
    the data can tell is the latency ratio's interval, scaled by the price ratio."""

    def run(run_id: str, when: str, env: Environment, latency: tuple[float, ...], price: str) -> RunResult:
        reference = result("cpu", latency=Latency(latency), is_reference=True)
        return replace(_run(run_id, when, env, reference), settings={"prices": [price]})

    before = run("r1", "1", OLD, samples(1.0, seed=4), "cpu=3.6/h")
    _, cost = _cost_change(before, run("r2", "2", NEW, samples(1.3, seed=3), "cpu=3.6/h"), "cpu")
    assert cost is not None and cost.outcome == "regressed" and 1 < cost.low < cost.change < cost.high
    # the same speed at a higher price: the price ratio moves the whole interval
    _, cost = _cost_change(before, run("r2", "2", NEW, samples(1.0, seed=3), "cpu=5.4/h"), "cpu")
    assert cost is not None and cost.outcome == "regressed" and cost.low > 1.4
    assert "price 3.6/h -> 5.4/h" in cost.detail
    # control: 25% dearer by medians that jump between modes: the interval contains 1
    bimodal = run("r1", "1", OLD, (*BIMODAL, 1.0), "cpu=3.6/h")
    _, cost = _cost_change(bimodal, run("r2", "2", NEW, (*BIMODAL, 1.25), "cpu=3.6/h"), "cpu")
    assert cost is not None and cost.outcome == "not_comparable" and cost.change == pytest.approx(1.25)
    assert cost.detail.startswith("not conclusive (its 95% interval contains 1); ")


def test_no_cost_metric_unless_both_runs_price_the_target():
    slower = _fast((1.6, 1.5, 1.7), seed=1)
    before = _priced("r1", "1", OLD, _fast((2.0, 1.9, 2.1)), "cpu=$3.6/h")
    for after in (_priced("r2", "2", NEW, slower), _priced("r2", "2", NEW, slower, "cuda=$3.6/h")):
        comparison, cost = _cost_change(before, after)
        assert cost is None and "cost" not in [m["metric"] for m in comparison.to_dict()["metrics"]]
        assert comparison.outcome == "regressed" and comparison.reason == "p50_ms regressed"  # latency still judged
    # through find_regressions, and for a target priced by its own spec
    runs = [before, _priced("r2", "2", NEW, slower, "cpu+inductor=$3.6/h")]
    found = {c.target: c for c in find_regressions(runs)}
    assert found["cpu+inductor"].metric("cost").outcome == "regressed"
    assert "cost" not in [m.metric for m in found["cpu"].metrics]  # the reference is not priced after


def test_costs_in_two_currencies_are_not_comparable():
    before = _priced("r1", "1", OLD, _fast((2.0, 1.9, 2.1)), "cpu=$3.6/h")
    after = _priced("r2", "2", NEW, _fast((2.0, 1.9, 2.1), seed=1), "cpu=€0.9/h")
    comparison, cost = _cost_change(before, after)
    assert cost is not None and cost.outcome == "not_comparable"
    assert cost.detail == "prices in different currencies ('$' -> '€')"
    assert comparison.outcome == "unchanged"  # a metric that cannot be compared is no change


# -- noise: a change inside a noisy measurement is not a regression --------------------------

BUSY = "machine busy: load average up to 9.20 on 2 core(s)"


def test_a_slowdown_on_quiet_timings_regresses_and_inside_noise_is_not_conclusive():
    """The seeded fault: 50x slower, quiet timings, the same settings: regressed (it counts for
    --strict). The control: the same figures with the newer side flagged noisy."""
    before, slow = result(), result(latency=Latency(samples(49.9, seed=3)))
    outcome, reason, metrics = classify(before, slow)
    assert (outcome, reason, by_metric(metrics)["p50_ms"]) == ("regressed", "p50_ms regressed", "regressed")
    outcome, reason, metrics = classify(before, replace(slow, noise=(BUSY,)))
    change = next(m for m in metrics if m.metric == "p50_ms")
    assert (outcome, reason) == ("unchanged", "p50_ms not conclusive")
    assert change.outcome == "not_comparable" and change.inconclusive and change.change > 40
    assert change.detail.startswith(f"not conclusive (noisy: after: {BUSY}); x")
    # noise on the earlier side counts the same
    spread = "noisy timings: IQR is 35% of the median (over 10%)"
    _, _, metrics = classify(replace(before, noise=(spread, BUSY, "CPU frequency changed")), slow)
    detail = next(m for m in metrics if m.metric == "p50_ms").detail
    assert detail.startswith(f"not conclusive (noisy: before: {spread}; {BUSY} and 1 more); x")
    # a move within the threshold stays unchanged, said to be noisy
    _, _, metrics = classify(before, replace(result(seed=1), noise=(BUSY,)))
    quiet = next(m for m in metrics if m.metric == "p50_ms")
    assert quiet.outcome == "unchanged" and quiet.detail.endswith(f"; timings flagged noisy (after: {BUSY})")


def test_machine_load_and_oversubscription_are_read_from_the_result_and_its_environment():
    two = Environment({**NEW.data, "cpu_count": 2})
    busy = replace(result(), load_average=(3.1, 9.2))
    assert timing_noise(busy, two) == (BUSY,)
    rounds = replace(result(), conditions={"rounds": [{"load_1m": 0.4}, {"load_1m": 2.5}]})
    assert timing_noise(rounds, two) == ("machine busy: load average up to 2.50 on 2 core(s)",)
    flagged = replace(busy, noise=("replicate 1: machine busy: load average up to 9.00 on 2 core(s)",))
    assert timing_noise(flagged, two) == flagged.noise  # said once
    assert timing_noise(replace(result(), threads=8), two) == ("oversubscribed: 8 intra-op threads on 2 core(s)",)
    script = Environment({**two.data, "threads": {"intra_op": 16, "inter_op": 16}})  # a script's own threads
    assert timing_noise(result(), script) == ("oversubscribed: 16 intra-op threads on 2 core(s)",)
    # controls: a quiet machine, as many threads as cores, no core count known
    assert timing_noise(replace(result(), load_average=(0.3, 1.9), threads=2), script) == ()
    assert timing_noise(busy) == () and timing_noise(busy, NEW) == ()


def test_find_regressions_judges_each_side_with_its_machine():
    two_old, two_new = (Environment({**env.data, "cpu_count": 2}) for env in (OLD, NEW))
    slow = result(latency=Latency(samples(49.9, seed=3)))
    runs = [_run("r1", "1", two_old, result()), _run("r2", "2", two_new, replace(slow, load_average=(7.5, 9.2)))]
    (found,) = find_regressions(runs)
    assert found.outcome == "unchanged" and found.regressed == ()
    assert [m.metric for m in found.inconclusive] == ["p50_ms"] and BUSY in found.metric("p50_ms").detail
    # the seeded fault: the same slowdown on a quiet machine
    runs[1] = _run("r2", "2", two_new, replace(slow, load_average=(0.2, 0.4)))
    (found,) = find_regressions(runs)
    assert found.outcome == "regressed" and [m.metric for m in found.regressed] == ["p50_ms"]
    assert found.inconclusive == ()


def test_every_timing_figure_is_not_conclusive_inside_noise():
    from bakeoff.results.values import ScenarioResult

    def timed(first_call: float, ttft: float, items_per_s: float) -> TargetResult:
        series = {"ttft": samples(ttft, seed=1), "tpot": samples(1.0, seed=2)}
        return result(
            first_call_ms=first_call,
            scenarios=(
                ScenarioResult("generation", "ok", series=series),
                ScenarioResult("offline", "ok", facts={"batches": [{"batch": 8, "items_per_s": items_per_s}]}),
            ),
        )

    before, after = timed(20.0, 10.0, 1000.0), timed(60.0, 20.0, 500.0)
    figures = ("first_call_ms", "ttft_p50_ms", "offline_items_per_s")
    quiet = by_metric(classify(before, after)[2])
    assert [quiet[name] for name in figures] == ["regressed"] * 3
    outcome, _, metrics = classify(before, replace(after, noise=(BUSY,)))
    moved = {m.metric: m for m in metrics if m.metric in figures}
    assert all(
        m.inconclusive and m.detail.startswith(f"not conclusive (noisy: after: {BUSY}); ") for m in moved.values()
    )
    assert moved["offline_items_per_s"].detail.endswith("best batch size's items/s; x2.00 per item")
    assert by_metric(metrics)["tpot_p50_ms"] == "unchanged" and outcome == "unchanged"


def test_a_services_goodput_reads_in_requests_and_it_has_no_first_call_row():
    """A service result (bakeoff serve) has no first call and counts requests, not a batch's items."""
    from bakeoff.results.values import ScenarioResult

    def served(goodput: float) -> TargetResult:
        facts = {"judgement": {"goodput": goodput}}
        return result(first_call_ms=None, scenarios=(ScenarioResult("service", "ok", facts=facts),))

    _, _, metrics = classify(served(20.0), served(10.0))
    moved = {m.metric: m for m in metrics}
    assert "first_call_ms" not in moved and moved["goodput"].outcome == "regressed"
    assert moved["goodput"].detail == "requests answered within every objective, per second; x2.00 per request"
    _, _, metrics = classify(result(), result(first_call_ms=None))  # a trial's stays, even measured on one side
    assert by_metric(metrics)["first_call_ms"] == "not_comparable"


def test_cost_timed_inside_noise_is_not_conclusive():
    before = _priced("r1", "1", OLD, _fast((2.0, 1.9, 2.1)), "cpu=$3.6/h")
    noisy = replace(_fast((1.6, 1.5, 1.7), seed=1), noise=(BUSY,))
    comparison, cost = _cost_change(before, _priced("r2", "2", NEW, noisy, "cpu=$3.6/h"))
    assert cost is not None and cost.outcome == "not_comparable"
    assert cost.detail.startswith(f"not conclusive (noisy: after: {BUSY}); $0.5 -> $0.625 per million requests")
    assert comparison.outcome == "unchanged" and comparison.reason == "p50_ms not conclusive, cost not conclusive"


# -- settings: runs measured differently are not compared ------------------------------------

PROFILE_20 = {"source": "seq=uniform(8,128)&n=20", "requests": [[1, 8 + i] for i in range(20)]}
PROFILE_50 = {"source": "seq=uniform(8,128)&n=50", "requests": [[1, 8 + i] for i in range(50)]}


def _slowdown(before: dict[str, Any], after: dict[str, Any], variant: str = "as-is"):
    """A 50% slowdown of cpu+inductor between two runs stored with these settings."""
    runs = [
        replace(_run("r1", "1", OLD, result(variant=variant)), settings={"reference": "cpu", **before}),
        replace(
            _run("r2", "2", NEW, result(variant=variant, latency=Latency(samples(1.5, seed=3)))),
            settings={"reference": "cpu", **after},
        ),
    ]
    (found,) = find_regressions(runs)
    return found


@pytest.mark.parametrize(
    ("before", "after", "differs"),
    [
        (
            {"profile": PROFILE_20},
            {"profile": PROFILE_50},
            "input profile seq=uniform(8,128)&n=20 (20 requests) -> seq=uniform(8,128)&n=50 (50 requests)",
        ),
        ({}, {"profile": PROFILE_20}, "input profile none -> seq=uniform(8,128)&n=20 (20 requests)"),
        (
            {"profile": PROFILE_20},
            {"profile": {**PROFILE_20, "requests": PROFILE_20["requests"][::-1]}},
            "input profile seq=uniform(8,128)&n=20 (20 requests), with other values",
        ),
        (
            {"isolate": True, "interleaved": True},
            {"isolate": False, "interleaved": False},
            "timing mode worker processes -> one process",
        ),
        ({}, {"cold_cache": True}, "cold compile cache off -> on"),
        (
            {"scenarios": ["single-stream", "server?rate=20"]},
            {"scenarios": ["single-stream", "server?rate=50"]},
            "scenario server rate=20 -> rate=50",
        ),
        ({}, {"checks": ["determinism?repeats=5"]}, "check determinism defaults -> repeats=5"),
        (
            {"profile": PROFILE_20, "cold_cache": True},
            {"profile": PROFILE_50},
            "input profile seq=uniform(8,128)&n=20 (20 requests) -> seq=uniform(8,128)&n=50 (50 requests); "
            "cold compile cache on -> off",
        ),
    ],
)
def test_runs_measured_with_other_settings_are_not_comparable(before, after, differs):
    found = _slowdown(before, after)
    assert found.outcome == "not_comparable" and found.reason == f"settings differ: {differs}"
    assert found.regressed == () and set(by_metric(found.metrics).values()) == {"not_comparable"}
    assert found.metric("p50_ms").change > 1.4  # the values stay for information


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ({}, {}),
        ({"profile": PROFILE_20}, {"profile": {**PROFILE_20, "source": "lengths.csv"}}),  # the same requests
        ({"scenarios": ["single-stream"]}, {"scenarios": ["single-stream", "offline"]}),  # one side only
        (
            {"scenarios": ["single-stream", "server?rate=20&requests=200"]},
            {"scenarios": ["single-stream", "server?requests=200&rate=20"]},
        ),
        ({"checks": ["determinism"]}, {}),  # named without options: its defaults
        ({"timing": {"min_samples": 30}}, {"timing": {"min_samples": 100}}),  # an interval's width
        ({"prices": ["cpu=1/h"], "timeout_s": 60.0}, {"replicates": 3}),
        ({"interleaved": True}, {"interleaved": False}),  # in turns or one after another: the same thing
    ],
)
def test_settings_that_measure_the_same_thing_still_compare(before, after):
    """The control: the seeded 50% slowdown is still found when nothing measured differs."""
    found = _slowdown(before, after)
    assert found.outcome == "regressed" and [m.metric for m in found.regressed] == ["p50_ms"]


SCRIPT = {"argv": [], "map": ["cuda"], "captures": [], "repeats": 0, "seed": 0, "workdir": "/w", "timeout_s": 900.0}


@pytest.mark.parametrize(
    ("change", "differs"),
    [
        ({"map": ["cuda", "mps"]}, "device map cuda -> cuda,mps"),
        ({"repeats": 5}, "timing mode the first run's wall time, audited -> timing runs without the audit"),
        ({"audit": False}, "timing mode the first run's wall time, audited -> the first run's wall time"),
        ({"captures": ["infer:post"]}, "captures none -> infer:post"),
        ({"seed": 1}, "seed 0 -> 1"),
        ({"as_written": True}, "reference cpu, remapped -> cpu as written"),
        ({"files": False}, "file comparison on -> off"),
    ],
)
def test_script_runs_measured_otherwise_are_not_comparable(change, differs):
    found = _slowdown({"exec": SCRIPT}, {"exec": {**SCRIPT, **change}})
    assert found.outcome == "not_comparable" and found.reason == f"settings differ: {differs}"


def test_script_runs_from_another_directory_or_with_more_timing_runs_still_compare():
    found = _slowdown({"exec": SCRIPT}, {"exec": {**SCRIPT, "workdir": "/elsewhere", "timeout_s": 60.0}})
    assert found.outcome == "regressed"
    found = _slowdown({"exec": {**SCRIPT, "repeats": 3}}, {"exec": {**SCRIPT, "repeats": 10, "audit": False}})
    assert found.outcome == "regressed"


SERVICE = {"command": "python -m svc --port {port}", "map_devices": ["cuda"], "rate": 5.0, "arrivals": "poisson",
           "duration_s": 30.0, "warmup": 16, "cold_s": 10.0, "clients": 1, "slo": ["p90<=500ms"], "path": "/generate",
           "search": False, "seed": 0}  # fmt: skip


@pytest.mark.parametrize(
    ("change", "differs"),
    [
        ({"rate": 10.0}, "offered traffic 5/s poisson -> 10/s poisson"),
        ({"arrivals": "gamma?cv=2"}, "offered traffic 5/s poisson -> 5/s gamma?cv=2"),
        ({"path": "/generate_stream"}, "endpoint /generate -> /generate_stream"),
        ({"cold_s": 0.0}, "cold traffic first 10 s -> 0 s"),
        ({"map_devices": ["cuda", "mps"]}, "device map cuda -> cuda,mps"),
    ],
)
def test_service_runs_under_other_traffic_are_not_comparable(change, differs):
    found = _slowdown({"serve": SERVICE}, {"serve": {**SERVICE, **change}})
    assert found.outcome == "not_comparable" and found.reason == f"settings differ: {differs}"


def test_service_runs_longer_searched_or_with_other_objectives_still_compare():
    change = {"duration_s": 60.0, "seed": 3, "clients": 2, "slo": ["p99<=1s"], "search": True, "command": "x"}
    found = _slowdown({"serve": SERVICE}, {"serve": {**SERVICE, **change}})
    assert found.outcome == "regressed" and [m.metric for m in found.regressed] == ["p50_ms"]


def test_padded_variants_compare_only_under_the_same_buckets():
    found = _slowdown({"buckets": {"chosen": [16, 32]}}, {"buckets": {"chosen": [16, 64]}}, variant="bucketed")
    assert found.outcome == "not_comparable" and found.reason == "settings differ: padding buckets [16, 32] -> [16, 64]"
    # controls: the same buckets; and the unpadded results of those two runs
    assert _slowdown({"buckets": {"chosen": [16, 32]}}, {"buckets": {"chosen": [16, 32]}}, "bucketed").outcome == (
        "regressed"
    )
    assert _slowdown({"buckets": {"chosen": [16, 32]}}, {"buckets": {"chosen": [16, 64]}}).outcome == "regressed"


# -- a long adjustments ledger stays one line -------------------------------------------------


def test_a_long_ledger_is_summarised_with_where_to_read_it():
    """A script's ledger runs to hundreds of rewrites: the reason counts them, names the first
    that differ and says where every entry is."""
    ledger = tuple({"name": f"torch.cuda.api_{i}", "value": f"{i}x, first at train.py:{i}"} for i in range(209))
    autocast = {"name": "torch.autocast", "value": "1x, first at train.py:7: autocast the target cannot honour here"}
    after = (*ledger[:100], autocast, *ledger[101:], {"name": "torch.cuda.synchronize", "value": "3x"})
    runs = [_run("r1", "1", OLD, result(adjustments=ledger)), _run("r2", "2", NEW, result(adjustments=after))]
    (found,) = find_regressions(runs)
    assert found.outcome == "not_comparable"
    assert found.reason == (
        "adjustments differ (209 -> 210 entries; 2 only after: torch.autocast=1x, first at train.py:7: autocast the "
        "target…, torch.cuda.synchronize=3x; 1 only before: torch.cuda.api_100=100x, first at train.py:100; all of "
        "them: `bakeoff show r1 --verbose` and `bakeoff show r2 --verbose`)"
    )
    many = (*ledger[:50], *({"name": f"new_{i}", "value": "1x"} for i in range(40)))
    runs[1] = _run("r2", "2", NEW, result(adjustments=many))
    (found,) = find_regressions(runs)
    assert "40 only after: new_0=1x, new_1=1x, new_2=1x and 37 more; 159 only before: " in found.reason
    assert len(found.reason) < 400 and "\n" not in found.reason


# -- the baseline chosen by a tag ------------------------------------------------------------


def test_pair_runs_against_tagged_runs_takes_them_whatever_their_environment():
    headers = [
        ("r1", "1", "w", "envA", [("cpu", "as-is")]),
        ("r2", "2", "w", "envB", [("cpu", "as-is")]),
        ("r3", "3", "w", "envC", [("cpu", "as-is"), ("cuda", "as-is")]),
        ("r4", "4", "w", "envC", [("cuda", "as-is")]),
    ]
    assert pair_runs(headers) == [(("w", "cpu", "as-is"), "r2", "r3")]  # the newest in another environment
    assert pair_runs(headers, {"r1"}) == [(("w", "cpu", "as-is"), "r1", "r3")]  # cuda: no tagged run before
    assert pair_runs(headers, {"r1", "r3"}) == [
        (("w", "cpu", "as-is"), "r1", "r3"),  # the latest is tagged too: the tagged run before it
        (("w", "cuda", "as-is"), "r3", "r4"),  # in the same environment, as asked
    ]
    assert pair_runs(headers, {"r4"}) == [] and pair_runs(headers, set()) == []


def test_a_pass_that_can_no_longer_be_judged_regressed_and_a_fail_that_cannot_is_no_unchanged():
    cannot = Correctness("not_comparable", "the baseline has no eager:bfloat16 reference")
    outcome, reason, metrics = classify(result(), result(correctness=cannot, seed=1))
    change = next(m for m in metrics if m.metric == "correctness")
    assert (outcome, change.outcome) == ("regressed", "regressed")  # was "unchanged": a lost pass went unseen
    assert change.detail == "pass before, not_comparable after: no longer shown" and reason == "correctness regressed"
    # a fail that cannot be judged any more is neither better nor worse, and not "unchanged" either
    outcome, reason, metrics = classify(result(correctness=Correctness("fail")), result(correctness=cannot, seed=1))
    assert by_metric(metrics)["correctness"] == "not_comparable"
    assert outcome == "not_comparable" and reason == "correctness fail -> not_comparable"
    # the control: the same verdicts on both sides, and a verdict of one kind that changed rank
    assert classify(result(correctness=cannot), result(correctness=cannot, seed=1))[0] == "unchanged"
    assert classify(result(), result(correctness=Correctness("fail"), seed=1))[0] == "regressed"
