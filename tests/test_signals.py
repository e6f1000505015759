"""Signals that must move when the code computing them breaks.

Each test pins one reported figure to ground truth measured independently of bakeoff's code
path: the test device's own counters, ``torch.utils.flop_counter`` on the same model, a graph
that OpenVINO is made to refuse, a frame dynamo has to skip, a private inductor cache. The emu
and OpenVINO cases run in fresh processes (both change process-wide state).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tests.conftest import EMU_ENV, bakeoff_cli, cli_result, cli_trial, python_code

import bakeoff

SIGNAL_MODELS = Path(__file__).parent / "fixtures" / "signal_models.py"
FAST = {"min_samples": 3, "min_seconds": 0.0, "isolate": False}
#: the fixture's matmul (aten::mm) is unsupported on the test device: it runs in the host fallback
UNSUPPORTED_MM = {**EMU_ENV, "BAKEOFF_EMU_UNSUPPORTED": "aten::mm"}


def signal_workload(function: str) -> str:
    return f"py:{SIGNAL_MODELS}:{function}"


def _fixture(name: str):
    spec = importlib.util.spec_from_file_location("signal_models", SIGNAL_MODELS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)()


def _results(completed: subprocess.CompletedProcess[str]) -> dict[str, dict]:
    assert completed.returncode == 0, completed.stderr[-3000:]
    return {r["target"]: r for r in json.loads(completed.stdout)["results"]}


# -- the emu device: host syncs, FLOP share, a compiled emu target, worker processes ----------


@pytest.fixture(scope="module")
def emu_in_process(tmp_path_factory) -> dict[str, dict]:
    """One in-process trial on the test device, eager and compiled, with aot_eager."""
    tmp = tmp_path_factory.mktemp("emu")
    return _results(cli_trial(signal_workload("syncs_and_matmul"), "emu,emu+aot_eager", tmp, env=UNSUPPORTED_MM))


@pytest.mark.emu
def test_device_to_host_syncs_are_counted_like_the_device_counts_them(emu_in_process):
    emu = emu_in_process["emu"]
    assert emu["status"] == "ok" and emu["correctness"]["verdict"] == "pass"
    placement = emu["placement"]
    # one .item() (dispatched as _local_scalar_dense) and one nonzero per forward pass
    assert placement["host_syncs"] == {"aten::_local_scalar_dense": 1, "aten::nonzero": 1}
    # the device's own counter sees every _local_scalar_dense it served
    assert placement["signals"]["emu"]["syncs"] == placement["host_syncs"]["aten::_local_scalar_dense"]


def test_sync_ops_count_only_when_they_read_the_device():
    """In process, with the CPU playing the device: the recorder sees devices, not data."""
    from bakeoff.checks.placement import audit_module

    model, inputs = _fixture("syncs_and_matmul")
    on_cpu = audit_module(model, lambda: model(*inputs), lambda d: d.type == "cpu", inputs=inputs)
    assert on_cpu.host_syncs == {"aten::_local_scalar_dense": 1, "aten::nonzero": 1}
    # controls: the same ops on host tensors wait for nothing; a model without them has none
    on_host = audit_module(model, lambda: model(*inputs), lambda d: False, inputs=inputs)
    assert on_host.host_syncs == {}
    linear, linear_inputs = _fixture("tiny_linear")
    clean = audit_module(linear, lambda: linear(*linear_inputs), lambda d: d.type == "cpu")
    assert clean.host_syncs == {} and clean.ops_total > 0


def _flops_by_op() -> dict[str, int]:
    """The fixture's FLOPs per op, counted by PyTorch's own FLOP counter on the CPU."""
    from torch.utils.flop_counter import FlopCounterMode

    model, inputs = _fixture("syncs_and_matmul")
    with FlopCounterMode(display=False) as counter:
        model(*inputs)
    return {str(op): int(n) for op, n in counter.get_flop_counts()["Global"].items()}


@pytest.mark.emu
def test_flop_share_on_device_leaves_out_the_host_fallbacks_flops(emu_in_process):
    placement = emu_in_process["emu"]["placement"]
    assert placement["fallback_ops"] == {"aten::mm.out": 1}  # the matmul ran in the host fallback
    flops = _flops_by_op()
    assert set(flops) == {"aten.addmm", "aten.mm"} and all(flops.values())
    expected = flops["aten.addmm"] / (flops["aten.addmm"] + flops["aten.mm"])  # 2/3 for these sizes
    share = placement["device_flop_share"]
    assert 0 < share < 1
    assert share == pytest.approx(expected, rel=1e-9, abs=0)
    # the op share is a different figure: one call of eleven, not a third of the work
    assert placement["device_op_share"] == pytest.approx(placement["ops_on_device"] / placement["ops_total"], rel=1e-12)
    assert placement["device_op_share"] != pytest.approx(share)


@pytest.mark.emu
def test_compiled_emu_target_runs_and_its_device_fallbacks_are_seen(emu_in_process):
    compiled = emu_in_process["emu+aot_eager"]
    assert compiled["status"] == "ok", compiled["error"]
    assert compiled["correctness"]["verdict"] == "pass"
    c = compiled["compilation"]
    # .item() and nonzero each break the graph: forward and two resumed frames, all compiled
    assert c["graphs"] == 3 and c["graph_breaks"] == 2 and c["eager_frames"] == 0
    assert len(c["graph_break_reasons"]) == 2
    assert {x["function"] for x in c["compilations"]} >= {"forward"}
    placement = compiled["placement"]
    assert placement["signals"]["compile"]["graphs"] == 3
    # the unsupported matmul ran inside a compiled graph: only the device's counter can see it
    assert placement["signals"]["emu"]["host_fallback_ops"] == 1
    assert placement["fallback_ops"] == {"aten::mm.out": 1}
    assert placement["verdict"] == "fallbacks"
    assert "compiled graph" in placement["scope"]


PLACEMENT_FIGURES = (
    "verdict",
    "explanation",
    "ops_total",
    "ops_on_device",
    "device_op_share",
    "device_flop_share",
    "host_ops",
    "fallback_ops",
    "host_syncs",
    "transfers",
    "stray_parameters",
)


@pytest.mark.emu
@pytest.mark.isolated
def test_emu_in_worker_processes_gives_the_in_process_placement(emu_in_process, tmp_path):
    command = [sys.executable, "-m", "bakeoff", "trial", signal_workload("syncs_and_matmul"), "--on", "emu"]
    command += ["--db", str(tmp_path / "w.db"), "--samples", "3", "--min-time", "0", "--format", "json"]
    completed = bakeoff_cli(*command[3:], env={**os.environ, **UNSUPPORTED_MM}, timeout=600)
    worker = _results(completed)["emu"]
    assert worker["status"] == "ok", worker.get("reason") or worker["error"]
    assert worker["correctness"]["verdict"] == "pass"
    in_process = emu_in_process["emu"]["placement"]
    assert {k: worker["placement"][k] for k in PLACEMENT_FIGURES} == {k: in_process[k] for k in PLACEMENT_FIGURES}
    assert worker["placement"]["signals"]["emu"] == in_process["signals"]["emu"]


# -- compilation: frames left to eager, inductor's cache ---------------------------------------


@pytest.mark.compile
def test_frame_dynamo_gave_up_on_is_an_eager_frame(db):
    run = bakeoff.trial(signal_workload("branch_in_try"), on="cpu+aot_eager", db=db, **FAST)
    result = run.result("cpu+aot_eager")
    assert result.verdict == "pass"
    # forward is skipped (a graph break inside try cannot be resumed): it all runs eagerly
    assert result.compilation.eager_frames == 1
    assert result.placement.signals["compile"]["eager_frames"] == 1
    assert result.compilation.graphs == 0
    # control: a model dynamo compiles whole leaves no frame to eager
    control = bakeoff.trial(signal_workload("tiny_linear"), on="cpu+aot_eager", db=db, **FAST)
    clean = control.result("cpu+aot_eager").compilation
    assert clean.eager_frames == 0 and clean.graphs == 1


@pytest.mark.compile
@pytest.mark.isolated
def test_inductor_cache_miss_then_hit_and_a_cold_cache_misses_again(tmp_path):
    """Three inductor compiles of a 4x4 linear layer, all in one private cache directory."""
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor-cache")}
    target = "cpu+inductor"

    def compilations(result: dict) -> list[str]:
        assert result["status"] == "ok" and result["correctness"]["verdict"] == "pass"
        return [c["cache"] for c in result["compilation"]["compilations"]]

    first = cli_result(signal_workload("tiny_linear"), target, tmp_path, env=env)
    assert compilations(first) == ["miss"]
    assert first["compilation"]["cache"] == "existing cache (0 hit(s))"
    second = cli_result(signal_workload("tiny_linear"), target, tmp_path, env=env)
    assert compilations(second) == ["hit"]
    assert second["compilation"]["cache"] == "existing cache (1 hit(s))"
    # --cold-compile-cache: the same warm directory is set, yet the worker's compiler gets an empty one
    command = [sys.executable, "-m", "bakeoff", "trial", signal_workload("tiny_linear"), "--on", target]
    command += ["--db", str(tmp_path / "b.db"), "--samples", "3", "--min-time", "0", "--format", "json"]
    completed = bakeoff_cli(*command[3:], "--cold-compile-cache", env={**os.environ, **env}, timeout=600)
    cold = _results(completed)[target]
    assert compilations(cold) == ["miss"]
    assert cold["compilation"]["cache"] == "cold (empty cache)"


# -- time to first result ------------------------------------------------------------------------


def test_time_to_first_result_is_prepare_plus_first_call_and_requirements_use_it(db):
    from bakeoff.metrics import parse_requirement
    from bakeoff.results.values import TargetResult
    from bakeoff.verdicts.metrics import check_target

    run = bakeoff.trial(signal_workload("tiny_linear"), on="cpu", db=db, requirements=["first_result<=10min"], **FAST)
    result = TargetResult.from_dict(run.result("cpu").to_dict())  # as stored and read back
    assert result.prepare_ms > 0 and result.first_call_ms > 0
    total = result.prepare_ms + result.first_call_ms
    assert result.time_to_first_result_ms == pytest.approx(total, rel=1e-12)
    (kept,) = result.requirements
    assert kept["metric"] == "first_result" and kept["verdict"] == "met"
    assert kept["value"] == pytest.approx(total, rel=1e-12)
    # a bound between the first call alone and prepare + first call: only the sum misses it
    between = (result.first_call_ms + total) / 2
    (check,) = check_target(result, [parse_requirement(f"first_result<={between:.9f}ms")])
    assert check.verdict == "not_met" and check.value == pytest.approx(total, rel=1e-12)


# -- OpenVINO handing a graph to inductor ----------------------------------------------------------

OPENVINO_REFUSES = textwrap.dedent("""
    import json, torch
    from openvino.frontend.pytorch.torchdynamo import backend

    def refuse(options):  # seeded: fails inside fx_openvino's try, before any conversion
        raise RuntimeError("seeded: OpenVINO cannot convert this graph")

    if REFUSE:
        backend._get_model_caching = refuse
    from bakeoff.checks.placement import judge
    from bakeoff.target.openvino import OpenVINOCompileWatch

    watch = OpenVINOCompileWatch("f32")
    torch.manual_seed(0)
    model, x = torch.nn.Linear(4, 4), torch.randn(2, 4)
    # without AOT autograd: under it, OpenVINO's own inductor fallback fails at the first call
    compiled = torch.compile(model, backend="openvino")
    with torch.no_grad():
        err = float((compiled(x) - model(x)).abs().max())
    fallback, signals = watch.signals()
    work = signals.pop("engine_work", None)
    verdict, why = judge(cpu_target=True, stray=[], off_map=[], host_ops={}, fallback_ops=fallback,
                         transfers={}, sites=[], engine_work=work)
    watch.close()
    print(json.dumps({"err": err, "fallback": fallback, "signals": signals["openvino"], "work": work,
                      "verdict": verdict, "why": why}))
""")


def _openvino_watch(refuse: bool) -> dict:
    script = f"REFUSE = {refuse}\n" + OPENVINO_REFUSES
    completed = python_code(script, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


@pytest.mark.compile
def test_openvino_graph_handed_to_inductor_is_reported():
    pytest.importorskip("openvino", reason="install the test extras: pip install -e '.[test]'")
    seen = _openvino_watch(refuse=True)
    assert seen["err"] < 1e-6  # inductor computed it
    assert seen["signals"]["graphs"] == seen["signals"]["graphs_handed_to_inductor"] == 1
    assert "seeded: OpenVINO cannot convert this graph" in seen["signals"]["conversion_errors"][0]
    assert seen["fallback"] == {"linear (handed to inductor)": 1}
    assert seen["signals"]["ops_converted"] == 0
    assert seen["work"]["share"] == 0.0 and seen["work"]["ran_instead"] == "inductor"
    assert seen["verdict"] == "engine_did_not_run"
    assert seen["why"] == (
        "openvino ran 0% of the work handed to it (0 of 0 op calls; every graph went to inductor); "
        "inductor ran the rest"
    )
    # control: the same graph converted is OpenVINO's own work, nothing handed on
    control = _openvino_watch(refuse=False)
    assert control["signals"]["graphs"] == 1 and control["signals"]["graphs_handed_to_inductor"] == 0
    assert control["fallback"] == {} and control["signals"]["ops_converted"] > 0
    assert control["work"]["share"] == 1.0 and control["verdict"] == "not_applicable"


TRIAL_WITH_OPENVINO_REFUSING = textwrap.dedent("""
    from openvino.frontend.pytorch.torchdynamo import backend

    def refuse(options):
        raise RuntimeError("seeded: OpenVINO cannot convert this graph")

    backend._get_model_caching = refuse
    from bakeoff.cli.main import main
    main()
""")


@pytest.mark.compile
def test_openvino_handing_a_graph_to_inductor_in_a_trial_names_the_conversion_failure(tmp_path):
    """bakeoff compiles with AOT autograd, where OpenVINO's own inductor fallback fails at the
    first call: the stored error must say so, not just "not enough values to unpack"."""
    pytest.importorskip("openvino", reason="install the test extras: pip install -e '.[test]'")
    command = [sys.executable, "-c", TRIAL_WITH_OPENVINO_REFUSING]
    result = cli_result(signal_workload("tiny_linear"), "cpu+openvino", tmp_path, command=command)
    assert result["status"] == "error"
    message = result["error"]["message"]
    assert message.startswith("OpenVINO could not convert a graph (Failed in OpenVINO execution: seeded:")
    assert "handed it to inductor, whose fallback failed under AOT autograd" in message
