"""Placement audit: pure verdict logic, and ground truth on the bundled test device (emu).

Each emu case runs ``python -m bakeoff trial`` in a fresh process with ``BAKEOFF_EMU=1``, as a
user would: the device renames PrivateUse1 for the whole process, so it stays out of pytest's.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import textwrap
from pathlib import Path

import pytest
from tests.conftest import EMU_ENV, MODELS, cli_trial, py_workload, python_code

from bakeoff.checks.placement import ENGINE_MOSTLY_HANDED_BACK, VERDICTS, audit_module, judge

NO_TRANSFERS = {"host_to_device": {"count": 0, "bytes": 0}, "device_to_host": {"count": 0, "bytes": 0}}


FINDINGS = {
    "cpu_target": False,
    "stray": [],
    "off_map": [],
    "host_ops": {},
    "fallback_ops": {},
    "transfers": NO_TRANSFERS,
    "sites": [],
    "host_state": [],
    "engine_work": None,
}


def _judge(**overrides):
    return judge(**{**FINDINGS, **overrides})


def contradictions(verdict: str, explanation: str, findings: dict) -> list[str]:
    """Where a verdict's explanation disagrees with the figures it was judged from."""
    f = {**FINDINGS, **findings}
    problems = []
    host_total = sum(f["host_ops"].values()) + sum(f["fallback_ops"].values())
    host_state = sum(s["count"] for s in f["host_state"] or [])
    work = f["engine_work"] or {}
    percents = [int(p) for p in re.findall(r"(\d+)%", explanation)]
    if verdict not in VERDICTS:
        problems.append(f"unknown verdict {verdict}")
    if "nothing left on the host" in explanation and (host_state or f["stray"] or f["off_map"] or host_total):
        problems.append("says nothing was left on the host, but something was")
    if verdict == "on_device" and (
        host_total or host_state or f["stray"] or f["off_map"] or work.get("share", 1) < ENGINE_MOSTLY_HANDED_BACK
    ):
        problems.append("on_device with host work, host state, stray tensors or an engine that did not run")
    if verdict == "engine_did_not_run":
        if work.get("share") is None or work["share"] >= ENGINE_MOSTLY_HANDED_BACK:
            problems.append("engine_did_not_run for an engine that ran most of its work")
        if percents[:1] != [round(100 * work.get("share", -1))]:
            problems.append(f"share in words {percents[:1]} is not the engine's share {work.get('share')}")
        if f"{work.get('op_calls_in_engine')} of {work.get('op_calls')} op calls" not in explanation:
            problems.append("op call counts missing or different")
    elif work.get("share") is not None and work["share"] < ENGINE_MOSTLY_HANDED_BACK:
        problems.append(f"{verdict} for an engine that ran {work['share']:.0%} of its work")
    if verdict == "left_on_host":
        if f["stray"] or f["off_map"]:
            if (f["stray"] + f["off_map"])[0] not in explanation:
                problems.append("left_on_host without naming what was left")
        elif not host_state:
            problems.append("left_on_host with nothing left")
        else:
            if f"{host_state} copies" not in explanation or f["host_state"][0]["module"] not in explanation:
                problems.append("host-state count or module missing")
            if f"{sum(s['bytes'] for s in f['host_state'])} B per pass" not in explanation:
                problems.append("host-state bytes missing")
            if "register_buffer" not in explanation:
                problems.append("no fix named")
    if verdict == "fallbacks":
        if host_total and not re.search(rf"\b{host_total} op call", explanation):
            problems.append(f"fallbacks without the count {host_total}")
        if not host_total and not [s for s in f["sites"] if s["direction"] == "device_to_host"]:
            problems.append("fallbacks with no host work and no round trip")
    if verdict == "not_applicable" and (not f["cpu_target"] or f["fallback_ops"]):
        problems.append("not_applicable off the CPU, or with work handed back")
    if host_total and verdict in ("left_on_host",) and f"{host_total} op call(s) ran on the host" not in explanation:
        problems.append("host op calls left out of the explanation")
    return problems


HOST_STATE = [{"module": "head", "count": 2, "bytes": 32}]
ROUND_TRIP = {"host_to_device": {"count": 1, "bytes": 64}, "device_to_host": {"count": 1, "bytes": 64}}
ROUND_TRIP_SITES = [{"module": "encoder", "direction": "device_to_host", "count": 1, "bytes": 64}]
ENGINE_IDLE = {
    "engine": "openvino",
    "op_calls": 900,
    "op_calls_in_engine": 18,
    "share": 0.02,
    "partitions": 2,
    "partitions_failed": 1,
}
ENGINE_BUSY = {
    "engine": "openvino",
    "op_calls": 900,
    "op_calls_in_engine": 900,
    "share": 1.0,
    "partitions": 2,
    "partitions_failed": 0,
}


def test_judge_host_state_copied_every_forward_is_left_on_host():
    verdict, why = _judge(
        host_state=HOST_STATE, transfers={**NO_TRANSFERS, "host_to_device": {"count": 2, "bytes": 32}}
    )
    assert verdict == "left_on_host"
    assert "2 copies, 32 B per pass, in head" in why and "register_buffer" in why
    assert "nothing left on the host" not in why
    # control: a host-to-device copy that was not host state (an input, a round trip's return) is not
    assert _judge(transfers={**NO_TRANSFERS, "host_to_device": {"count": 1, "bytes": 128}})[0] == "on_device"


def test_judge_engine_that_handed_back_most_work_did_not_run():
    verdict, why = _judge(cpu_target=True, engine_work=ENGINE_IDLE, fallback_ops={"aten::mm (failed partition)": 8})
    assert verdict == "engine_did_not_run"
    assert why.startswith("openvino ran 2% of the work handed to it (18 of 900 op calls")
    assert "1 of 2 partition(s) failed at run time" in why
    zero = {**ENGINE_IDLE, "op_calls_in_engine": 0, "share": 0.0}
    assert _judge(cpu_target=True, engine_work=zero)[0] == "engine_did_not_run"
    # controls: an engine that ran all or most of its work keeps the usual verdicts
    assert _judge(cpu_target=True, engine_work=ENGINE_BUSY)[0] == "not_applicable"
    most = {**ENGINE_BUSY, "op_calls_in_engine": 600, "share": 600 / 900}
    assert _judge(cpu_target=True, engine_work=most, fallback_ops={"aten::i0 (left to PyTorch)": 1})[0] == "fallbacks"


def _findings_grid():
    """Every combination of the findings that decide a verdict, each alone and together."""
    options = {
        "cpu_target": [False, True],
        "stray": [[], ["fc2.weight (cpu)"]],
        "host_ops": [{}, {"aten::tanh": 1}],
        "fallback_ops": [{}, {"aten::rsqrt.out": 3}],
        "host_state": [[], HOST_STATE],
        "engine_work": [None, ENGINE_IDLE, ENGINE_BUSY],
        "round_trip": [False, True],
    }
    for values in itertools.product(*options.values()):
        findings = dict(zip(options, values, strict=True))
        if findings.pop("round_trip"):
            findings.update(transfers=ROUND_TRIP, sites=ROUND_TRIP_SITES)
        if findings["cpu_target"] and (findings["stray"] or findings["host_ops"] or findings["host_state"]):
            continue  # a CPU target has no host to leave anything on
        yield findings


def test_every_verdict_explanation_agrees_with_its_figures():
    seen = set()
    for findings in _findings_grid():
        verdict, why = _judge(**findings)
        seen.add(verdict)
        assert contradictions(verdict, why, findings) == [], (findings, verdict, why)
    assert seen == set(VERDICTS)  # the grid reaches every verdict


def test_contradiction_check_catches_a_wrong_explanation():
    """The agreement check itself must be able to fail."""
    assert contradictions(
        "on_device", "every op ran on the target device; nothing left on the host", {"host_state": HOST_STATE}
    )
    assert contradictions("fallbacks", "2 op call(s) ran on the host: aten::tanh x2", {"host_ops": {"aten::tanh": 3}})
    assert contradictions("not_applicable", "CPU target", {"cpu_target": True, "engine_work": ENGINE_IDLE})
    assert contradictions(
        "engine_did_not_run",
        "openvino ran 50% of the work handed to it (18 of 900 op calls)",
        {"engine_work": ENGINE_IDLE},
    )


def _load_fixture(name: str, *args):
    import importlib.util

    spec = importlib.util.spec_from_file_location("placement_fixture_models", MODELS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)(*args)


@pytest.mark.parametrize(
    ("factory", "expected"),
    [
        ("host_state_attribute", [{"module": "ScaleKeptOnHost", "count": 1, "bytes": 16}]),
        ("host_state_constant", [{"module": "OffsetBuiltOnHost", "count": 1, "bytes": 16}]),
        ("scale_as_buffer", []),  # control: a registered buffer moved with the model
        ("mlp", []),
    ],
)
def test_recorder_tells_host_state_from_clean_models(factory, expected):
    """In process, with ``meta`` playing the device: the recorder only sees devices, not data."""
    model, inputs = _load_fixture(factory)
    model, inputs = model.to("meta"), tuple(x.to("meta") for x in inputs)
    recorder = audit_module(model, lambda: model(*inputs), lambda d: d.type == "meta", inputs=inputs)
    assert recorder.host_state_sites() == expected
    assert recorder.transfers["host_to_device"]["count"] == sum(s["count"] for s in expected)


def test_recorder_does_not_count_the_workloads_own_inputs_as_host_state():
    model, inputs = _load_fixture("moves_its_own_inputs", "meta")
    recorder = audit_module(model, lambda: model(*inputs), lambda d: d.type == "meta", inputs=inputs)
    assert recorder.transfers["host_to_device"] == {"count": 1, "bytes": 2 * 16 * 4}  # the copy was seen ...
    assert recorder.host_state_sites() == []  # ... and is the input, not state left behind
    # seeded: the same copy, with the audit not told it is the input, is host state
    blind = audit_module(model, lambda: model(*inputs), lambda d: d.type == "meta")
    assert blind.host_state_sites() == [{"module": "MovesItsOwnInputs", "count": 1, "bytes": 128}]


@pytest.mark.compile
def test_auditing_a_compiled_model_compiles_nothing_more_and_sees_the_same_ops():
    """The audit's hooks break a compiled model's guards, so under the audit it runs eagerly with
    dynamo still watching its frames: dynamo must compile none of the audit's own frames (one per
    op before they were marked, seconds per trial, and graph breaks that were bakeoff's)."""
    import torch
    from torch._dynamo.utils import counters, get_compilation_metrics

    def compiled_so_far() -> tuple[int, int]:
        return len(list(get_compilation_metrics())), sum(counters["graph_break"].values())

    model, inputs = _load_fixture("mlp")
    compiled = torch.compile(model, backend="eager")
    with torch.no_grad():
        compiled(*inputs)
    before = compiled_so_far()
    on_cpu = audit_module(model, lambda: compiled(*inputs), lambda d: d.type == "cpu", inputs=inputs)
    assert compiled_so_far() == before  # unmarked: 6 more compilations and 6 graph breaks here
    eager = audit_module(model, lambda: model(*inputs), lambda d: d.type == "cpu", inputs=inputs)
    assert on_cpu.ops_total == eager.ops_total > 0 and on_cpu.device_calls == eager.device_calls


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


def _emu_run(workload: str, tmp_path: Path, unsupported: str = "") -> tuple[dict, dict]:
    """The emu target's result and the whole run document (with its decision)."""
    ran = _emu_trial(workload, tmp_path, unsupported)
    assert ran.returncode == 0, ran.stderr
    run = json.loads(ran.stdout)
    (emu,) = [r for r in run["results"] if r["target"] == "emu"]
    assert emu["status"] == "ok", emu["error"]
    assert emu["correctness"]["verdict"] == "pass"
    return emu, run


def _emu_result(workload: str, tmp_path: Path, unsupported: str = "") -> dict:
    return _emu_run(workload, tmp_path, unsupported)[0]


@pytest.mark.emu
def test_unsupported_op_is_reported_with_its_count(tmp_path):
    emu, run = _emu_run("arch:llama?layers=1&hidden=32", tmp_path, unsupported="aten::rsqrt")
    placement = emu["placement"]
    assert placement["verdict"] == "fallbacks"
    # one RMSNorm before attention, one before the MLP, one final: 3 rsqrt calls per forward
    assert placement["fallback_ops"] == {"aten::rsqrt.out": 3}
    assert placement["signals"]["emu"]["host_fallback_ops"] == 3
    assert 0 < placement["device_op_share"] < 1
    # the counts agree with the share: the fallback's ops are not counted on the device
    assert placement["ops_on_device"] == placement["ops_total"] - 3
    assert placement["device_op_share"] == placement["ops_on_device"] / placement["ops_total"]
    assert contradictions(placement["verdict"], placement["explanation"], _stored_findings(placement)) == []
    # the decision rules the device out (the eager reference the trial added is shown, never chosen), and
    # what it would take names the op with its count
    assert (run["decision"]["outcome"], run["decision"]["target"]) == ("none", "emu")
    assert "closest: emu, ruled out by work left the device: placement fallbacks" in run["decision"]["lines"]
    assert any(line.startswith("cpu (for comparison, not a candidate)") for line in run["decision"]["lines"])
    (item,) = run["what_it_takes"]["emu"]
    assert item["kind"] == "placement" and item["measured"] == ""
    assert item["finding"] == "3 op call(s) per forward pass ran on the host: aten::rsqrt.out x3"


@pytest.mark.emu
def test_clean_models_are_on_device_without_false_alarms(tmp_path):
    for workload in (py_workload("mlp"), "arch:llama?layers=1&hidden=32"):
        emu, run = _emu_run(workload, tmp_path)
        assert "emu" not in run["what_it_takes"]  # nothing to change
        assert not any(line.startswith("emu ruled out") for line in run["decision"]["lines"])
        placement = emu["placement"]
        assert placement["verdict"] == "on_device", placement
        assert placement["host_ops"] == {} and placement["fallback_ops"] == {}
        assert placement["stray_parameters"] == []
        assert placement["transfers"] == NO_TRANSFERS
        assert placement["device_op_share"] == 1.0


def _stored_findings(placement: dict) -> dict:
    """The judge's findings, read back from a stored placement."""
    return {
        "stray": placement["stray_parameters"],
        "host_ops": placement["host_ops"],
        "fallback_ops": placement["fallback_ops"],
        "transfers": placement["transfers"],
        "sites": placement["transfer_sites"],
        "host_state": placement.get("host_state_copies", []),
        "engine_work": placement.get("engine_work"),
    }


@pytest.mark.emu
def test_host_state_copied_every_forward_is_left_on_host(tmp_path):
    placement = _emu_result(py_workload("host_state_attribute"), tmp_path)["placement"]
    assert placement["verdict"] == "left_on_host", placement
    assert placement["host_state_copies"] == [{"module": "ScaleKeptOnHost", "count": 1, "bytes": 16}]
    assert placement["transfers"]["host_to_device"] == {"count": 1, "bytes": 16}
    assert placement["stray_parameters"] == []  # nothing .to() could have moved: only the copy tells
    assert "nothing left on the host" not in placement["explanation"]
    assert contradictions(placement["verdict"], placement["explanation"], _stored_findings(placement)) == []


@pytest.mark.emu
def test_buffer_and_self_moved_inputs_are_not_host_state(tmp_path):
    placement = _emu_result(py_workload("scale_as_buffer"), tmp_path)["placement"]
    assert placement["verdict"] == "on_device", placement
    assert placement["host_state_copies"] == [] and placement["transfers"] == NO_TRANSFERS
    # a self-placed workload whose forward copies its own host inputs in
    placement = _emu_result(py_workload("moves_its_own_inputs"), tmp_path)["placement"]
    assert placement["transfers"]["host_to_device"] == {"count": 1, "bytes": 2 * 16 * 4}
    assert placement["verdict"] == "on_device", placement
    assert contradictions(placement["verdict"], placement["explanation"], _stored_findings(placement)) == []


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
    assert placement["host_state_copies"] == []  # the copy back came from the device: a round trip


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
    result = python_code(EMU_SCRIPT, timeout=600)
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


@pytest.mark.emu
def test_one_op_fewer_unsupported_is_seen_by_regressions(tmp_path):
    """Marking one op fewer unsupported changes the environment and the host-op counts, even
    where the rounded share would not move."""
    from bakeoff import api

    workload = "arch:llama?layers=1&hidden=32"
    assert _emu_trial(workload, tmp_path, "aten::rsqrt,aten::silu").returncode == 0
    assert _emu_trial(workload, tmp_path, "aten::rsqrt").returncode == 0
    (found,) = [c for c in api.regressions(db=tmp_path / "b.db") if c.target == "emu"]
    assert "env.BAKEOFF_EMU_UNSUPPORTED" in {c.key for c in found.environment.changes}
    change = next(m for m in found.metrics if m.metric == "host_op_calls")
    assert (change.outcome, change.before - change.after) == ("improved", 1)  # one SiLU per MLP
    assert change.detail == "aten::silu.out 1 -> 0"


@pytest.mark.emu
def test_a_build_baton_left_by_a_killed_builder_does_not_block_the_next_load_and_a_finished_build_is_loaded_directly():
    """torch marks an extension build with a ``lock`` file and makes every later load wait for
    it to go; a builder killed mid-build (a sweep cell's runner, Ctrl-C) leaves it for ever, and
    no stamp of a finished build. The next load builds (torch's loader, which clears nothing
    itself) and stamps what it linked; the one after it loads that library without torch's
    loader (the control: nothing of ``torch.utils.cpp_extension`` imported).

    The cache is the suite's shared one, which other workers' processes load from at the same
    time: the stale baton is left as a builder leaves it, under the loaders' ``flock`` (a baton
    touched beside a loader inside torch's build made it wait for ever, and this process on the
    ``flock`` it held), and is told from a live loader's own baton by its content."""
    script = textwrap.dedent(
        """
        import fcntl, json, sys, uuid
        import bakeoff.emu.extension as extension
        cache = extension.cache_dir()
        stale, token = cache / "lock", uuid.uuid4().hex
        with open(cache / extension.BUILDER_LOCK, "w") as held:  # a builder, killed: the kernel drops its flock
            fcntl.flock(held, fcntl.LOCK_EX)
            stale.write_text(token)
            (cache / extension.BUILT).unlink(missing_ok=True)
        before = "torch.utils.cpp_extension" in sys.modules
        extension.load_extension()
        try:
            left = stale.read_text() == token
        except FileNotFoundError:
            left = False
        print(json.dumps({"before": before, "torch_loader": "torch.utils.cpp_extension" in sys.modules,
                          "stale_left": left, "stamped": (cache / extension.BUILT).exists()}))
        """
    )
    ran = python_code(script, timeout=600)
    assert ran.returncode == 0, ran.stderr[-2000:]
    found = json.loads(ran.stdout.splitlines()[-1])
    assert found == {"before": False, "torch_loader": True, "stale_left": False, "stamped": True}
    again = textwrap.dedent(
        """
        import json, sys
        import torch
        import bakeoff.emu as emu
        emu.enable()
        ok = float((torch.ones(2, device="emu") * 3).sum().cpu()) == 6.0
        print(json.dumps({"torch_loader": "torch.utils.cpp_extension" in sys.modules, "ran": ok}))
        """
    )
    ran = python_code(again, timeout=600)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert json.loads(ran.stdout.splitlines()[-1]) == {"torch_loader": False, "ran": True}
