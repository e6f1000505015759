"""Compilation audit, input profiles and bucketing, with ground truth from dynamo's known
behaviour and from the test device's shape-specialising compile backend."""

from __future__ import annotations

import pytest
from tests.conftest import EMU_ENV, cli_result, py_workload

import bakeoff

FAST = {"min_samples": 5, "min_seconds": 0.0, "isolate": False}
LLAMA = "arch:llama?layers=1&hidden=32"
FIVE = "seq=16,17,32,33,64"


#: The tests that read the five-shape trial: one worker, one trial.
_FIVE_SHAPES = pytest.mark.xdist_group("compilation_five_shapes")


@pytest.fixture(scope="module")
def five_shapes(tmp_path_factory: pytest.TempPathFactory):
    """One trial of the five lengths with dynamic=false, as given and padded to two buckets: the
    as-given result is what a trial without buckets gives (the buckets are a variant beside it)."""
    db = tmp_path_factory.mktemp("five") / "bakeoff.db"
    return bakeoff.trial(LLAMA, on="cpu+aot_eager?dynamic=false", db=db, profile=FIVE, pad_to_buckets="32,64", **FAST)


@_FIVE_SHAPES
@pytest.mark.compile
def test_dynamic_false_recompiles_once_per_distinct_length(five_shapes):
    result = five_shapes.result("cpu+aot_eager?dynamic=false")
    assert result.verdict == "pass"
    c = result.compilation
    assert c.graphs == 5 and c.recompiles == 4
    assert any("size mismatch at index 1. expected 16, actual 17" in r for r in c.recompile_reasons)
    assert c.steady is True and c.still_recompiling == ()
    assert len(c.compilations) == 5 and all(x["seconds"] > 0 for x in c.compilations)
    assert c.compile_seconds_total == pytest.approx(sum(x["seconds"] for x in c.compilations), rel=1e-3)
    assert result.profile["first_pass_compiles"] == 5 and result.profile["shapes"] == 5
    assert {s["shape"] for s in c.per_shape} == {"1x16", "1x17", "1x32", "1x33", "1x64"}
    # correctness is checked for every shape of the profile
    assert {o.name.split(":")[0] for o in result.correctness.outputs} == {"1x16", "1x17", "1x32", "1x33", "1x64"}
    assert {"name": "compile dynamic", "value": False} in result.adjustments


@pytest.mark.compile
def test_default_marks_the_length_dynamic_after_the_second_shape(db):
    run = bakeoff.trial(LLAMA, on="cpu+aot_eager", db=db, profile=FIVE, **FAST)
    c = run.result("cpu+aot_eager").compilation
    assert c.graphs == 2 and c.recompiles == 1
    assert c.steady is True


@pytest.mark.compile
def test_graph_breaks_are_reported_with_reason_and_location(db):
    run = bakeoff.trial(py_workload("branchy"), on="cpu+aot_eager", db=db, profile="seq=8,12", **FAST)
    result = run.result("cpu+aot_eager")
    assert result.verdict == "pass"
    c = result.compilation
    assert c.graph_breaks >= 1
    (first, *_) = c.graph_break_reasons
    assert first["reason"].startswith("Data-dependent branching")
    assert first["location"].endswith("models.py:" + str(_line_of("if hidden.sum() > 0")))
    # the placement report carries what the compiler accepted too
    assert result.placement.signals["compile"]["graph_breaks"] == c.graph_breaks
    assert result.placement.signals["compile"]["graphs"] == c.graphs


def _line_of(text: str) -> int:
    from tests.conftest import MODELS

    return next(i for i, line in enumerate(MODELS.read_text().splitlines(), start=1) if text in line)


@pytest.mark.compile
def test_recompile_limit_hits_are_reported(db, monkeypatch):
    import torch._dynamo.config

    # the trial runs in this process (isolate=False): 4 lengths pass a limit of 2 as 11 pass the default 8
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 2)
    lengths = ",".join(str(n) for n in range(8, 12))  # 4 distinct lengths, past the limit
    run = bakeoff.trial(LLAMA, on="cpu+aot_eager?dynamic=false", db=db, profile=f"seq={lengths}", **FAST)
    result = run.result("cpu+aot_eager?dynamic=false")
    assert result.compilation.recompile_limit_hits >= 1
    assert any("recompile limit" in note for note in result.notes)
    assert result.verdict == "pass"  # the frames that fell back to eager still compute the right answer


@_FIVE_SHAPES
@pytest.mark.compile
def test_bucketing_reduces_graphs_to_the_buckets_and_keeps_correctness(five_shapes):
    run = five_shapes
    as_is = run.result("cpu+aot_eager?dynamic=false")
    bucketed = run.result("cpu+aot_eager?dynamic=false", variant="bucketed")
    assert as_is.compilation.graphs == 5
    assert bucketed.compilation.graphs == 2  # one per bucket used
    assert bucketed.verdict == "pass"  # only the unpadded part of the outputs is compared
    # 16,17,32 -> 32 and 33,64 -> 64: 62 padded positions of 224 computed
    assert bucketed.profile["padding_waste"] == pytest.approx(62 / 224)
    assert {"name": "pad to buckets", "value": [32, 64]} in bucketed.adjustments
    assert run.settings["buckets"]["chosen"] == [32, 64]
    assert [r.variant for r in run.results].count("bucketed") == 1  # never for the reference


def test_auto_buckets_come_from_the_profile(db):
    run = bakeoff.trial(
        LLAMA, on="cpu", db=db, profile="seq=10,11,12,40,41", pad_to_buckets="auto", max_buckets=2, **FAST
    )
    assert run.settings["buckets"]["chosen"] == [12, 41]
    assert run.results[0].profile["requests"] == 5


@pytest.mark.emu
def test_emu_backend_compiles_exactly_once_per_new_shape(tmp_path):
    target = "emu+emu?dynamic=false"
    emu = cli_result(
        "arch:llama?layers=1&hidden=32&seq=8", target, tmp_path, "--profile", "seq=8,8,16,16,24,8", env=EMU_ENV
    )
    assert emu["correctness"]["verdict"] == "pass"
    assert emu["compilation"]["signals"]["emu"]["compilations"] == 3  # 8, 16, 24
    assert emu["compilation"]["graphs"] == 3
    assert emu["profile"]["first_pass_compiles"] == 3


@pytest.mark.compile
def test_audit_does_not_depend_on_the_users_torch_logs(tmp_path):
    # with TORCH_LOGS set, torch ignores bakeoff's set_logs; the counts must not drop to zero
    result = cli_result(
        LLAMA, "cpu+aot_eager?dynamic=false", tmp_path, "--profile", "seq=16,17,32", env={"TORCH_LOGS": "recompiles"}
    )
    assert result["compilation"]["graphs"] == 3
    assert result["compilation"]["recompiles"] == 2
    assert any("expected 16, actual 17" in r for r in result["compilation"]["recompile_reasons"])
