"""Placement audit: pure verdict logic, and ground truth on the bundled test device (emu).

Each emu case runs ``python -m bakeoff trial`` in a fresh process with ``BAKEOFF_EMU=1``, as a
user would: the device renames PrivateUse1 for the whole process, so it stays out of pytest's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tests.conftest import EMU_ENV, cli_result, cli_trial, py_workload

from bakeoff.checks.placement import judge

NO_TRANSFERS = {"host_to_device": {"count": 0, "bytes": 0}, "device_to_host": {"count": 0, "bytes": 0}}


def _judge(**overrides):
    findings = {
        "cpu_target": False,
        "stray": [],
        "off_map": [],
        "host_ops": {},
        "fallback_ops": {},
        "transfers": NO_TRANSFERS,
        "sites": [],
    }
    return judge(**{**findings, **overrides})


def test_judge_verdicts_on_synthetic_findings():
    assert _judge()[0] == "on_device"
    assert _judge(cpu_target=True, host_ops={"aten::mm": 3})[0] == "not_applicable"
    verdict, why = _judge(fallback_ops={"aten::rsqrt.out": 5})
    assert verdict == "fallbacks" and "aten::rsqrt.out x5" in why
    verdict, why = _judge(host_ops={"aten::tanh": 1}, fallback_ops={"aten::mm.out": 2})
    assert verdict == "fallbacks" and why.startswith("3 op call(s) ran on the host")
    verdict, why = _judge(stray=["fc2.weight (cpu)"], host_ops={"aten::addmm": 1})
    assert verdict == "left_on_host" and "fc2.weight (cpu)" in why  # left behind outranks fallbacks
    assert _judge(off_map=["model.layers.1 -> cpu"])[0] == "left_on_host"
    round_trip = {"host_to_device": {"count": 1, "bytes": 64}, "device_to_host": {"count": 1, "bytes": 64}}
    sites = [{"module": "encoder", "direction": "device_to_host", "count": 1, "bytes": 64}]
    verdict, why = _judge(transfers=round_trip, sites=sites)
    assert verdict == "fallbacks" and "encoder" in why
    one_way = {"host_to_device": {"count": 0, "bytes": 0}, "device_to_host": {"count": 1, "bytes": 64}}
    assert _judge(transfers=one_way, sites=sites)[0] == "on_device"  # reading a result back is not a fallback


def _emu_trial(workload: str, tmp_path: Path, unsupported: str = "", *extra: str) -> subprocess.CompletedProcess[str]:
    return cli_trial(workload, "emu", tmp_path, *extra, env={**EMU_ENV, "BAKEOFF_EMU_UNSUPPORTED": unsupported})


def _emu_result(workload: str, tmp_path: Path, unsupported: str = "") -> dict:
    emu = cli_result(workload, "emu", tmp_path, env={**EMU_ENV, "BAKEOFF_EMU_UNSUPPORTED": unsupported})
    assert emu["status"] == "ok", emu["error"]
    assert emu["correctness"]["verdict"] == "pass"
    return emu


@pytest.mark.emu
def test_unsupported_op_is_reported_with_its_count(tmp_path):
    emu = _emu_result("arch:llama?layers=1&hidden=32", tmp_path, unsupported="aten::rsqrt")
    placement = emu["placement"]
    assert placement["verdict"] == "fallbacks"
    # one RMSNorm before attention, one before the MLP, one final: 3 rsqrt calls per forward
    assert placement["fallback_ops"] == {"aten::rsqrt.out": 3}
    assert placement["signals"]["emu"]["host_fallback_ops"] == 3
    assert 0 < placement["device_op_share"] < 1


@pytest.mark.emu
def test_clean_models_are_on_device_without_false_alarms(tmp_path):
    for workload in (py_workload("mlp"), "arch:llama?layers=1&hidden=32"):
        placement = _emu_result(workload, tmp_path)["placement"]
        assert placement["verdict"] == "on_device", placement
        assert placement["host_ops"] == {} and placement["fallback_ops"] == {}
        assert placement["stray_parameters"] == []
        assert placement["transfers"] == NO_TRANSFERS
        assert placement["device_op_share"] == 1.0


@pytest.mark.emu
def test_mid_forward_round_trip_is_reported_with_the_transfer(tmp_path):
    placement = _emu_result(py_workload("round_trip"), tmp_path)["placement"]
    assert placement["verdict"] == "fallbacks"
    hidden_bytes = 2 * 16 * 4  # the (2, 16) float32 hidden state
    assert placement["transfers"] == {
        "host_to_device": {"count": 1, "bytes": hidden_bytes},
        "device_to_host": {"count": 1, "bytes": hidden_bytes},
    }
    assert placement["host_ops"] == {"aten::tanh": 1}
    assert {s["direction"] for s in placement["transfer_sites"]} == {"host_to_device", "device_to_host"}


@pytest.mark.emu
def test_parameter_left_on_the_cpu_is_reported(tmp_path):
    placement = _emu_result(py_workload("head_left_on_host"), tmp_path)["placement"]
    assert placement["verdict"] == "left_on_host"
    assert placement["stray_parameters"] == ["fc2.weight (cpu)", "fc2.bias (cpu)"]
    assert placement["host_ops"].get("aten::addmm") == 1


@pytest.mark.emu
def test_device_map_auto_that_leaves_the_model_on_the_cpu_is_reported(tmp_path):
    model_dir = tmp_path / "tiny-llama"
    from bakeoff.workload import build_workload

    build_workload("arch:llama?layers=1&hidden=32").model.save_pretrained(model_dir)
    placement = _emu_result(f"hf:{model_dir}?device_map=auto", tmp_path)["placement"]
    assert placement["verdict"] == "left_on_host"
    assert "model.embed_tokens.weight (cpu)" in placement["stray_parameters"]
    assert placement["device_op_share"] == 0.0  # the whole forward ran on the host


@pytest.mark.emu
def test_strict_placement_fails_the_trial(tmp_path):
    assert _emu_trial(py_workload("round_trip"), tmp_path, "", "--strict-placement").returncode == 1
    assert _emu_trial(py_workload("mlp"), tmp_path, "", "--strict-placement").returncode == 0
    assert _emu_trial(py_workload("round_trip"), tmp_path).returncode == 0  # without the flag: reported only


EMU_SCRIPT = textwrap.dedent("""
    import json, torch
    from bakeoff import emu
    from bakeoff.emu.backend import COMPILATIONS
    from bakeoff.workload import build_workload
    emu.enable()
    facts = {}
    x = torch.ones(2, 3).to("emu")
    facts["device"] = str(x.device)
    facts["is_emu"] = x.is_emu
    facts["module"] = [torch.emu.is_available(), torch.emu.device_count(), torch.emu.synchronize()]
    facts["accelerator"] = str(torch.accelerator.current_accelerator())
    try:
        x + torch.ones(2, 3)
        facts["mixing"] = "accepted"
    except RuntimeError as exc:
        facts["mixing"] = str(exc)
    w = build_workload("arch:llama?layers=1&hidden=32")
    expected = w().logits
    model = w.model.to("emu")
    inputs = {k: v.to("emu") if isinstance(v, torch.Tensor) else v for k, v in w.kwargs.items()}
    with torch.no_grad():
        facts["forward_err"] = float((model(**inputs).logits.cpu() - expected).abs().max())
        generated = model.generate(inputs["input_ids"], attention_mask=inputs["attention_mask"],
                                   max_new_tokens=3, do_sample=False)
    facts["generated"] = [str(generated.device), list(generated.shape)]
    linear = torch.nn.Linear(4, 4).to("emu")
    compiled = torch.compile(linear, backend="emu", dynamic=False)
    for rows in (2, 2, 3, 3, 5, 2):
        compiled(torch.ones(rows, 4).to("emu"))
    facts["compilations"] = [list(c.shapes[-1]) for c in COMPILATIONS]
    print(json.dumps(facts))
""")


@pytest.mark.emu
def test_emu_behaves_like_an_out_of_tree_accelerator():
    result = subprocess.run([sys.executable, "-c", EMU_SCRIPT], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    facts = json.loads(result.stdout.strip().splitlines()[-1])
    assert facts["device"] == "emu:0" and facts["is_emu"] is True
    assert facts["module"] == [True, 1, None]
    assert facts["accelerator"] == "emu"
    assert "Expected all tensors to be on the same device" in facts["mixing"]
    assert facts["forward_err"] < 1e-5
    assert facts["generated"] == ["emu:0", [1, 19]]
    # one compilation per new input shape (2, 3, 5 rows), none for repeats
    assert [shape[0] for shape in facts["compilations"]] == [2, 3, 5]
