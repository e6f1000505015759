"""Trials end to end through the keyword API, in this process (fast) and in workers."""

from __future__ import annotations

import pytest
from tests.conftest import py_workload

import bakeoff
from bakeoff.store import Store

FAST = {"min_samples": 5, "min_seconds": 0.0}


def test_clean_model_passes_on_eager_and_aot_eager_with_reference_added(db):
    run = bakeoff.trial(py_workload("mlp"), on="cpu+aot_eager", db=db, isolate=False, **FAST)
    specs = [r.target.spec for r in run.results]
    assert specs == ["cpu", "cpu+aot_eager"]  # the eager CPU reference is always measured
    ref, compiled = run.results
    assert ref.is_reference and ref.speedup == pytest.approx(1.0)
    assert compiled.status == "ok" and compiled.verdict == "pass"
    assert compiled.latency.count >= 5 and compiled.first_call_ms > 0
    assert compiled.speedup == pytest.approx(ref.latency.p50_ms / compiled.latency.p50_ms)
    ci = compiled.speedup_ci
    assert ci["low"] <= compiled.speedup <= ci["high"] and ci["confidence"] == 0.95
    assert ci["significant"] == (not ci["low"] <= 1.0 <= ci["high"])
    assert ref.speedup_ci["value"] == pytest.approx(1.0)
    if compiled.latency.p50_ms >= ref.latency.p50_ms:
        assert compiled.break_even_requests is None  # slower per request: never pays back
    else:
        assert compiled.break_even_requests >= 1
    assert {o.name for o in compiled.correctness.outputs} == {"output.logits", "output.hidden"}
    assert compiled.settled is True


def test_perturbed_output_fails_while_the_same_model_passes_eager(db):
    run = bakeoff.trial(py_workload("perturbed_when_compiled"), on="cpu,cpu+aot_eager", db=db, isolate=False, **FAST)
    eager, compiled = run.results
    assert eager.verdict == "pass"
    assert compiled.verdict == "fail"
    assert compiled.correctness.max_abs_err == pytest.approx(0.05, rel=1e-3)
    assert "output.logits" in compiled.correctness.reason
    hidden = next(o for o in compiled.correctness.outputs if o.name == "output.hidden")
    assert hidden.passed  # structural comparison: only the perturbed output fails


def test_nondeterministic_reference_is_not_comparable(db):
    run = bakeoff.trial(py_workload("nondeterministic"), on="cpu", db=db, isolate=False, **FAST)
    (result,) = run.results
    assert result.status == "ok"
    assert result.verdict == "not_comparable"
    assert "nondeterministic" in result.correctness.reason


def test_unreproducible_factory_is_not_comparable(db):
    run = bakeoff.trial(py_workload("unseeded"), on="cpu", db=db, isolate=False, **FAST)
    assert run.results[0].verdict == "not_comparable"
    assert "fingerprint" in run.results[0].correctness.reason


def test_unavailable_targets_are_skipped_with_reason(db):
    run = bakeoff.trial(py_workload("mlp"), on="cpu,cuda,neuron,cpu+tvm", db=db, isolate=False, **FAST)
    by_spec = {r.target.spec: r for r in run.results}
    assert by_spec["cpu"].status == "ok"
    assert by_spec["cuda"].status == "skipped" and "cuda" in by_spec["cuda"].reason
    assert by_spec["neuron"].status == "skipped" and "neuron" in by_spec["neuron"].reason
    assert by_spec["cpu+tvm"].status == "skipped" and "tvm" in by_spec["cpu+tvm"].reason


def test_backend_error_is_recorded_and_the_run_goes_on(db):
    run = bakeoff.trial(
        py_workload("mlp"), on="cpu+relu_compile_error_TESTING_ONLY,cpu+aot_eager", db=db, isolate=False, **FAST
    )
    by_spec = {r.target.spec: r for r in run.results}
    failed = by_spec["cpu+relu_compile_error_TESTING_ONLY"]
    assert failed.status == "error" and failed.verdict == "error"
    assert failed.error.phase == "compile and first call"
    assert "ReluCompileError" in failed.error.message or "ReluCompileError" in failed.error.traceback
    assert by_spec["cpu+aot_eager"].verdict == "pass"
    stored = Store.open(db).get_run(run.run_id)
    assert stored.result("cpu+relu_compile_error_TESTING_ONLY").error.traceback == failed.error.traceback


def test_bf16_target_is_checked_against_a_bf16_eager_reference(db):
    run = bakeoff.trial("arch:llama?layers=1&hidden=32&seq=8", on="cpu?dtype=bf16", db=db, isolate=False, **FAST)
    result = run.result("cpu?dtype=bfloat16")
    assert result.verdict == "pass"
    assert result.correctness.reference == "eager:bfloat16"
    assert result.correctness.tolerance == pytest.approx(1e-2)
    # what the cast costs, against the workload's own float32, is reported beside the verdict
    assert result.correctness.drift["reference"] == "eager:float32"
    assert 1e-4 < result.correctness.drift["max_abs_err"] < 0.5


def test_baseline_is_reused_and_recomputed_when_stale(db, tmp_path):
    spec = "arch:llama?layers=1&hidden=32&seq=8"
    first, notes = bakeoff.baseline(spec, db=db)
    assert notes[0] == "baseline created"
    again, notes = bakeoff.baseline(spec, db=db)
    assert again.id == first.id and notes == []
    extended, notes = bakeoff.baseline(spec, db=db, dtypes=["bf16"])
    assert extended.id != first.id and "eager:bfloat16" in extended.references
    assert "bfloat16" in notes[0]
    refreshed, notes = bakeoff.baseline(spec, db=db, refresh=True)
    assert refreshed.id != extended.id and notes[0] == "baseline recomputed on request"
    assert "eager:bfloat16" in refreshed.references  # extending keeps earlier dtypes


def test_stale_baseline_is_detected_by_fingerprint(db, tmp_path):
    factory = tmp_path / "model.py"
    factory.write_text("import torch\ndef make():\n    return torch.nn.Linear(4, 2), (torch.ones(1, 4),)\n")
    spec = f"py:{factory}:make"
    first, _ = bakeoff.baseline(spec, db=db)
    factory.write_text("import torch\ndef make():\n    return torch.nn.Linear(4, 3), (torch.ones(1, 4),)\n")
    import sys

    for name in [n for n in sys.modules if n.startswith("bakeoff_user_")]:
        del sys.modules[name]  # a new process would import the edited file
    second, notes = bakeoff.baseline(spec, db=db)
    assert second.fingerprint != first.fingerprint
    assert notes[0].startswith("stored baseline was stale")


def test_history_and_show_read_back_what_was_stored(db):
    run = bakeoff.trial(py_workload("mlp"), on="cpu", db=db, isolate=False, **FAST)
    rows = bakeoff.history(db=db)
    assert [r.run_id for r in rows] == [run.run_id]
    assert rows[0].passed == 1 and rows[0].fingerprint == run.fingerprint
    shown = bakeoff.show(run.run_id[:6], db=db)
    assert shown.results[0].latency.samples_ms == run.results[0].latency.samples_ms


@pytest.mark.isolated
def test_workers_turn_crash_and_hang_into_results_and_the_run_goes_on(db):
    crash = bakeoff.trial(py_workload("crashes_when_compiled"), on="cpu,cpu+aot_eager", db=db, timeout_s=120, **FAST)
    ref, crashed = crash.results
    assert ref.status == "ok" and ref.verdict == "pass"
    assert crashed.status == "error" and crashed.error.category == "crash"
    assert crashed.error.type == "SIGSEGV"
    assert crashed.error.phase == "compile and first call"  # where in the worker's start it died
    assert "Segmentation fault" in crashed.error.traceback  # faulthandler's dump from the worker

    hang = bakeoff.trial(
        py_workload("hangs_with_three_threads"), on="cpu?threads=3,cpu+aot_eager", db=db, timeout_s=12, **FAST
    )
    ref, hung, after = hang.results
    assert ref.verdict == "pass"
    assert hung.status == "error" and hung.error.category == "timeout" and hung.duration_s < 60
    assert after.verdict == "pass"  # the target after the hung one still ran
    assert len(bakeoff.history(db=db)) == 2


def test_environment_switches_apply_per_target_and_are_recorded(db):
    import os

    run = bakeoff.trial(
        py_workload("env_scaled"), on="cpu+aot_eager", db=db, isolate=False, env=["BAKEOFF_FIXTURE_SCALE=3"], **FAST
    )
    compiled = run.result("cpu+aot_eager")
    assert {"name": "environment", "value": "BAKEOFF_FIXTURE_SCALE=3"} in compiled.adjustments
    assert compiled.verdict == "fail"  # the switch changed the answer, and the ledger says why
    assert "BAKEOFF_FIXTURE_SCALE" not in os.environ  # restored after the in-process target
    with pytest.raises(bakeoff.BakeoffError, match="not KEY=VALUE"):
        bakeoff.trial(py_workload("mlp"), db=db, env=["nonsense"], **FAST)
