"""Divergence localisation on real runs: seeded faults localised to exactly one module and
confirmed by replay; the same models without the fault report nothing.

The faults are real: the emu test device's wrong-result switch (``BAKEOFF_EMU_WRONG``) scales
one op's outputs on the device, and a tiny Llama whose layer-1 activation is scaled under
torch.compile only. The cases run in one fresh process (the PrivateUse1 device is process-wide).
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from tests.conftest import EMU_ENV, FIXTURES, bakeoff_cli, cli_trial, fresh_process_json

LLAMA = "arch:llama?layers=2&hidden=32&intermediate=64&vocab=128"
FAULTY = f"py:{FIXTURES / 'localize_models.py'}:llama_faulty"

#: (name, workload, target, ops made wrong on the device, the check's options)
CASES = [
    ("emu wrong silu", LLAMA, "emu", "aten::silu", {}),
    ("emu clean", LLAMA, "emu", "", {}),
    ("emu wrong mm", LLAMA, "emu", "aten::mm", {}),
    ("emu wrong silu sampled", LLAMA, "emu", "aten::silu", {"sample": 64}),
    ("emu wrong silu tolerated", LLAMA, "emu", "aten::silu", {"tolerances": "SiLUActivation:1e6"}),
    ("compiled fault", FAULTY + "?layer=1&scale=0.01", "cpu+aot_eager", "", {}),
    ("compiled clean", FAULTY + "?scale=0", "cpu+aot_eager", "", {}),
]

SCRIPT = """
import json, sys
from bakeoff import emu
emu.enable()
from bakeoff.checks.base import CheckContext
from bakeoff.checks.correctness import Correctness
from bakeoff.checks.localization import LocalizationCheck
from bakeoff.runner.job import TargetJob
from bakeoff.target.spec import parse_target
from bakeoff.workload.registry import build_workload

out = {}
for name, spec, target_spec, wrong, options in json.loads(sys.argv[1]):
    emu.enable(wrong={op: 1.01 for op in wrong.split(",") if op})
    target = parse_target(target_spec, extra_devices=("emu",))
    built = build_workload(spec)
    job = TargetJob(workload_spec=spec, target=target, fingerprint=built.fingerprint, baseline_path=None)
    context = CheckContext(job, target, None, {}, None, "float32", "float32", built.fingerprint)
    context.results["correctness"] = Correctness("fail")  # localise as if the outputs had failed
    context.options = {"sample": -1, "full": "", "tolerances": "", **options}
    value = LocalizationCheck().run(context)
    out[name] = value.to_dict()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def found() -> dict[str, dict]:
    return fresh_process_json(SCRIPT, CASES, timeout=900)


@pytest.mark.emu
def test_a_wrong_kernel_on_the_device_is_localised_to_its_first_module_and_confirmed(found):
    value = found["emu wrong silu"]
    assert (value["verdict"], value["method"]) == ("localized", "hooks")
    (origin,) = value["origins"]  # layer 1's activation gets diverged inputs: downstream, not an origin
    assert (origin["module"], origin["cls"], origin["call"]) == ("model.layers.0.mlp.act_fn", "SiLUActivation", 0)
    assert origin["replay"] == "confirmed"
    assert origin["target_err"] == pytest.approx(0.01, rel=0.05)  # the seeded 1% scale, measured
    assert origin["op_suspect"] == "aten.silu (op 1 of 1)"
    assert origin["ratio"] > 1 and origin["reference_err"] < 1e-5
    failed = [c for c in value["calls"] if c["failed"]]
    assert value["calls_failed"] == len(failed) and origin["downstream"] > 0
    assert not any(
        c["failed"] for c in value["calls"] if c["module"] in ("model.embed_tokens", "model.layers.0.self_attn")
    )


@pytest.mark.emu
def test_a_wrong_op_used_by_three_sibling_modules_is_three_origins_down_to_the_op(found):
    value = found["emu wrong mm"]
    modules = [o["module"] for o in value["origins"]]
    assert modules == [f"model.layers.0.self_attn.{p}_proj" for p in "qkv"]  # the first matmuls, all on clean inputs
    assert all(o["replay"] == "confirmed" and o["op_suspect"].startswith("aten.mm (op ") for o in value["origins"])


@pytest.mark.emu
def test_sampled_tensors_find_the_same_origin_and_confirm_it_on_whole_ones(found):
    value, whole = found["emu wrong silu sampled"], found["emu wrong silu"]
    assert [o["module"] for o in value["origins"]] == [o["module"] for o in whole["origins"]]
    (origin,) = value["origins"]
    assert origin["replay"] == "confirmed" and origin["op_suspect"] == "aten.silu (op 1 of 1)"
    assert value["calls_failed"] == whole["calls_failed"]


@pytest.mark.emu
def test_a_module_the_user_tolerates_passes_and_the_origin_moves_to_its_caller(found):
    value = found["emu wrong silu tolerated"]
    (origin,) = value["origins"]
    assert origin["module"] == "model.layers.0.mlp" and origin["replay"] == "confirmed"


@pytest.mark.emu
def test_a_clean_device_run_reports_no_origin(found):
    value = found["emu clean"]
    assert value["verdict"] == "not_found" and value["origins"] == []
    assert value["calls_compared"] > 20 and value["calls_failed"] == 0


@pytest.mark.emu
def test_a_compile_only_fault_is_localised_by_compiling_module_by_module(found):
    value = found["compiled fault"]
    assert value["verdict"] == "localized", value["reason"]
    assert value["method"].startswith("ladder: each module compiled alone with aot_eager")
    (origin,) = value["origins"]
    assert (origin["module"], origin["cls"], origin["replay"]) == (
        "model.layers.1.mlp.act_fn",
        "CompiledScale",
        "confirmed",
    )
    assert origin["target_err"] == pytest.approx(0.01, rel=0.05)


@pytest.mark.emu
def test_the_same_model_without_the_fault_compiled_reports_nothing(found):
    value = found["compiled clean"]
    assert value["verdict"] == "not_found" and value["origins"] == []


def _emu_of(ran: subprocess.CompletedProcess[str]) -> tuple[dict, dict]:
    assert ran.returncode == 0, ran.stderr[-2000:]
    run = json.loads(ran.stdout)
    (emu,) = [r for r in run["results"] if r["target"] == "emu"]
    return emu, run


def _bakeoff(tmp_path, *args: str, env: dict) -> subprocess.CompletedProcess[str]:
    return bakeoff_cli(*args, "--db", str(tmp_path / "b.db"), env={**os.environ, **env}, timeout=600)


@pytest.mark.emu
def test_a_trial_with_localize_and_bakeoff_localize_after_it_find_the_same_origin(tmp_path):
    wrong = {**EMU_ENV, "BAKEOFF_EMU_WRONG": "aten::silu"}
    during, _ = _emu_of(cli_trial(LLAMA, "emu", tmp_path, "--localize", env=wrong))
    assert during["correctness"]["verdict"] == "fail"
    assert during["localization"]["origins"][0]["module"] == "model.layers.0.mlp.act_fn"
    plain, run = _emu_of(cli_trial(LLAMA, "emu", tmp_path, env=wrong))
    assert plain["localization"] is None  # not asked for
    after = _bakeoff(tmp_path, "localize", f"{run['run_id']}:emu", "--format", "json", env=wrong)
    assert after.returncode == 0, after.stderr[-2000:]
    value = json.loads(after.stdout)["emu"]
    assert value["origins"][0]["module"] == "model.layers.0.mlp.act_fn" and "after the run" in value["reason"]
    shown = _bakeoff(tmp_path, "show", run["run_id"], env=EMU_ENV)
    assert "diverges first in model.layers.0.mlp.act_fn (SiLUActivation, call 0)" in " ".join(shown.stdout.split())


@pytest.mark.emu
def test_nothing_is_localised_for_a_target_that_passed(tmp_path):
    clean, run = _emu_of(cli_trial(LLAMA, "emu", tmp_path, "--localize", env=EMU_ENV))
    assert clean["correctness"]["verdict"] == "pass" and clean["localization"] is None
    refused = _bakeoff(tmp_path, "localize", run["run_id"], env=EMU_ENV)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        f"bakeoff: error: no target of run {run['run_id']} failed its correctness or training check: "
        "nothing to localise (localisation looks for where a failed check goes wrong)"
    )
    unknown = _bakeoff(tmp_path, "localize", f"{run['run_id']}:cuda", env=EMU_ENV)
    assert unknown.returncode == 2 and "has no measured target 'cuda' (its targets: emu)" in unknown.stderr


EXPORT_FAULTY = f"py:{FIXTURES / 'localize_models.py'}:mlp_export_faulty"


@pytest.mark.compile
@pytest.mark.isolated
def test_bakeoff_localize_of_an_export_engine_target_compiles_as_the_trial_did(tmp_path):
    """``onnxrt`` is an export engine, no ``torch.compile`` backend: the localisation that
    ``bakeoff localize RUN:cpu+onnxrt`` starts must prepare it through its engine."""
    from tests.revisit_data import environment, make_run, target_result

    from bakeoff.results.values import Correctness
    from bakeoff.runner.localize import localize_stored
    from bakeoff.store import Store
    from bakeoff.workload.registry import build_workload

    pytest.importorskip("onnxruntime")
    store = Store.open(tmp_path / "b.db")
    found = {}
    for run_id, scale in (("fa0100000001", "0.01"), ("c1ea00000002", "0")):
        spec = f"{EXPORT_FAULTY}?scale={scale}"
        failed = target_result("cpu+onnxrt", 1.0, correctness=Correctness("fail", "output: rms error too large"))
        results = (target_result("cpu", 2.0), failed)
        store.save_run(make_run(run_id, "2025-01-01T10:00:00+00:00", environment(), results, spec=spec,
                                fingerprint=build_workload(spec).fingerprint))  # fmt: skip
        _run, ((spec_localised, value),) = localize_stored(store, run_id, "cpu+onnxrt", timeout_s=300)
        assert spec_localised == "cpu+onnxrt"
        found[scale] = value
    fault, clean = found["0.01"], found["0"]
    assert (fault.verdict, fault.rung) == ("localized", "backend compiler"), fault.reason
    (origin,) = fault.origins  # the activation traced by torch.export, not its linear neighbours
    assert (origin.module, origin.cls, origin.replay) == ("1", "ExportedScale", "confirmed")
    assert origin.target_err == pytest.approx(0.01, rel=0.05)
    assert "compiled alone with onnxrt" in fault.method
    assert clean.verdict == "not_found", clean.reason  # the honest export engine is not flagged
    stored = store.get_run("fa0100000001").results[1].checks["localization"]
    assert stored.origins[0].module == "1"
