"""The determinism check: the target's outputs over repeated calls on the same input, bit for bit."""

from __future__ import annotations

import csv
import math

import pytest
import torch
from rich.console import Console
from tests.conftest import py_workload
from tests.unit.test_regressions import by_metric, classify, result

import bakeoff
from bakeoff.checks.determinism import Determinism, compare_repeats
from bakeoff.report.terminal import run_view

FAST = {"min_samples": 3, "min_seconds": 0.0, "isolate": False}


def test_one_bit_of_difference_is_nondeterminism():
    a = torch.tensor([1.0, 2.0, float("nan")])
    b = a.clone()
    b[1] = torch.nextafter(b[1], torch.tensor(3.0))  # the next float up: one bit
    verdict = compare_repeats({"": [{"out": a}, {"out": a.clone()}, {"out": b}]})
    assert verdict.verdict == "nondeterministic" and verdict.differing == ("out",)
    assert 0 < verdict.max_abs_diff < 1e-6
    # control: identical calls (NaN where NaN) are deterministic
    same = compare_repeats({"": [{"out": a}, {"out": a.clone()}, {"out": a.clone()}]})
    assert same == Determinism("deterministic", 3, 1, (), 0.0)


def test_a_changed_shape_or_a_missing_output_counts_and_names_the_input():
    a = {"out": torch.zeros(2), "aux": torch.zeros(1)}
    verdict = compare_repeats({"@1x8": [a, {"out": torch.zeros(3), "aux": torch.zeros(1)}, {"out": torch.zeros(2)}]})
    assert verdict.verdict == "nondeterministic"
    assert verdict.differing == ("1x8:out", "1x8:aux") and math.isinf(verdict.max_abs_diff)


def test_determinism_changes_are_regressions():
    steady = result(determinism=Determinism("deterministic", 3, 1))
    noisy = result(determinism=Determinism("nondeterministic", 3, 1, ("output.logits",), 1e-6))
    assert by_metric(classify(steady, noisy)[2])["determinism"] == "regressed"
    assert by_metric(classify(noisy, steady)[2])["determinism"] == "improved"
    assert by_metric(classify(steady, steady)[2])["determinism"] == "unchanged"


@pytest.mark.compile
def test_a_target_nondeterministic_only_when_compiled_is_caught(db):
    run = bakeoff.trial(py_workload("noisy_when_compiled"), on="cpu,cpu+aot_eager", db=db, **FAST)
    compiled = run.result("cpu+aot_eager").checks["determinism"]
    assert compiled.verdict == "nondeterministic" and compiled.differing == ("output.logits",)
    assert 0 < compiled.max_abs_diff <= 1e-6
    # the eager reference of the same model is the control
    assert run.result("cpu").checks["determinism"].verdict == "deterministic"
    console = Console(width=400, record=True, highlight=False)
    console.print(run_view(run, width=400))  # the summary: a problem a reader must see
    shown = " ".join(console.export_text().split())
    assert "nondeterministic: output.logits differed between 3 calls on the same input" in shown


def test_a_deterministic_model_is_not_flagged(db):
    run = bakeoff.trial(py_workload("mlp"), on="cpu", db=db, **FAST)
    value = run.result("cpu").checks["determinism"]
    assert value == Determinism("deterministic", 3, 1, (), 0.0)
    assert run.to_dict()["results"][0]["determinism"]["verdict"] == "deterministic"


def test_more_repeats_catch_a_rarer_fault_and_the_option_reaches_the_worker(db):
    """``--check determinism?repeats=5``: six calls in a row always include a fifth call, so the
    seeded fault is caught whatever call the check starts at. The clean control, run in a
    worker process, makes as many calls and is not flagged; the option is stored with the run
    and given again by a rerun."""
    from bakeoff.api import rerun_keywords

    rare = bakeoff.trial(py_workload("noisy_every_fifth_call"), on="cpu", db=db, checks="determinism?repeats=5", **FAST)
    caught = rare.result("cpu").checks["determinism"]
    assert caught.verdict == "nondeterministic" and caught.calls == 6 and caught.differing == ("output.logits",)
    assert 0 < caught.max_abs_diff <= 2e-6

    clean = bakeoff.trial(
        py_workload("mlp"), on="cpu", db=db, checks=["determinism?repeats=4"], **{**FAST, "isolate": True}
    )
    assert clean.result("cpu").checks["determinism"] == Determinism("deterministic", 5, 1, (), 0.0)
    stored = bakeoff.show(clean.run_id, db=db)
    assert stored.settings["checks"] == ["determinism?repeats=4"]
    assert rerun_keywords(stored)["checks"] == ["determinism?repeats=4"]
    # without the option, the defaults (two repeats) and nothing stored
    default = bakeoff.trial(py_workload("mlp"), on="cpu", db=db, **FAST)
    assert default.result("cpu").checks["determinism"].calls == 3 and default.settings["checks"] == []
    # the verdicts have a column of their own in the CSV export
    bakeoff.export_runs(db.with_suffix(".csv"), db=db, format="csv")
    with db.with_suffix(".csv").open(newline="") as handle:
        column = {row["run_id"]: row["determinism"] for row in csv.DictReader(handle)}
    assert column == {rare.run_id: "nondeterministic", clean.run_id: "deterministic", default.run_id: "deterministic"}


@pytest.mark.compile
def test_a_compiled_target_is_not_called_nondeterministic_by_what_the_placement_audit_leaves_behind(db):
    """After a call under the placement audit's dispatch mode dynamo runs a compiled model eagerly:
    inductor's outputs then differ from eager ones by its rounding. The check must run before it."""
    # the demo's workload: its inductor graph is the demo's, compiled once for the suite (cold in CI)
    run = bakeoff.trial("arch:llama", on="cpu+inductor", db=db, **FAST)
    compiled = run.result("cpu+inductor")
    assert compiled.correctness.max_abs_err > 0  # inductor does round differently from eager here
    assert compiled.checks["determinism"].verdict == "deterministic"


@pytest.mark.compile
def test_training_on_a_compiled_target_runs_compiled(db):
    run = bakeoff.trial(py_workload("mlp"), on="cpu+aot_eager", db=db, scenarios="training?steps=2", **FAST)
    training = run.result("cpu+aot_eager").scenario("training")
    assert training.status == "ok" and training.facts["graphs"] >= 1  # a graph compiled for its backward
