"""The checkpoint check on real saves: seeded faults in a target's save path it must catch, clean
controls (the test device, a bf16 cast, tied weights, a language model) it must not flag.

The seeded faults are in the workload's ``state_dict`` off the CPU (tests/fixtures/checkpoint_models.py):
a tensor one ulp up, a tensor saved in another dtype, a save that raises. Every case runs in one
fresh process (the emu device is process-wide); the CLI case runs ``bakeoff trial`` as a user would.
"""

from __future__ import annotations

import json

import pytest
from tests.conftest import EMU_ENV, FIXTURES, cli_trial, fresh_process_json

CLASSIFIER = f"py:{FIXTURES / 'checkpoint_models.py'}:classifier"
LLAMA = "arch:llama?layers=1&hidden=32&intermediate=64&vocab=128"
GPT2 = "arch:gpt2?layers=1&hidden=32"  # its embedding and head share one weight
#: (name, workload, target)
CASES = [
    ("clean emu", CLASSIFIER, "emu"),
    ("clean bf16 emu", CLASSIFIER, "emu?dtype=bf16"),
    ("tied emu", CLASSIFIER + "?tied=1", "emu"),
    ("clean llama", LLAMA, "emu"),
    ("tied gpt2 fp16", GPT2, "emu?dtype=fp16"),
    ("one ulp on save", CLASSIFIER + "?save_fault=ulp", "emu"),
    ("another dtype on save", CLASSIFIER + "?save_fault=dtype", "emu"),
    ("cannot save", CLASSIFIER + "?save_fault=raise", "emu"),
    ("fault off the CPU only, bf16 CPU", CLASSIFIER + "?save_fault=ulp", "cpu?dtype=bf16"),
    ("optimiser field dropped", CLASSIFIER + "?optimizer_fault=drop", "emu"),
    ("optimiser step changed", CLASSIFIER + "?optimizer_fault=step", "emu"),
    ("weights only", CLASSIFIER + "?optimizer_fault=drop", "emu", 0),
    ("sliced buffer, model left on the CPU", CLASSIFIER + "?sliced=1", "cpu+aot_eager"),
    ("self-placed", f"py:{FIXTURES / 'checkpoint_models.py'}:selfplaced", "emu"),
    ("a signed zero saved as +0.0", CLASSIFIER + "?save_fault=sign", "emu"),
    ("a float8 buffer one step up", CLASSIFIER + "?save_fault=f8", "emu"),
]

SCRIPT = """
import json, sys
import torch
from bakeoff import emu
emu.enable()
from bakeoff.checks.base import CheckContext
from bakeoff.checks.checkpoint import CheckpointCheck
from bakeoff.runner.job import TargetJob
from bakeoff.target.spec import parse_target
from bakeoff.workload.registry import build_workload
out = {}
for name, spec, target_spec, *steps in json.loads(sys.argv[1]):
    target = parse_target(target_spec, extra_devices=("emu",))
    built = build_workload(spec)
    job = TargetJob(workload_spec=spec, target=target, fingerprint=built.fingerprint, baseline_path=None)
    context = CheckContext(job, target, None, {}, None, target.dtype or "float32", "float32", built.fingerprint)
    context.options = {"steps": steps[0] if steps else 2}
    with torch.no_grad():  # as a trial runs its checks
        out[name] = CheckpointCheck().run(context).to_dict()
print(json.dumps(out), flush=True)
import os
os._exit(0)  # as bakeoff's own CLI ends: torch's device threads can abort an interpreter's normal exit
"""


@pytest.fixture(scope="module")
def verdicts() -> dict[str, dict]:
    return fresh_process_json(SCRIPT, CASES, timeout=600)


@pytest.mark.emu
@pytest.mark.parametrize(
    "name",
    [
        "clean emu",
        "clean bf16 emu",
        "tied emu",
        "clean llama",
        "tied gpt2 fp16",
        "fault off the CPU only, bf16 CPU",
        "sliced buffer, model left on the CPU",
        "self-placed",
    ],
)
def test_clean_controls_pass(verdicts, name):
    value = verdicts[name]
    assert value["verdict"] == "pass", value["reason"]
    assert value["tensors"] > 0 and not value["differing"] and value["bytes"] > 0
    assert f"each of {value['tensors']} tensors read back bit for bit" in value["reason"]
    assert value["trained"] == "2 eager AdamW step(s) on the target's device, resumed on the CPU for one more"
    assert value["reason"].endswith("the optimiser state read back bit for bit and resumed as held")


@pytest.mark.emu
def test_a_bf16_target_saves_half_the_bytes_and_tied_weights_once(verdicts):
    assert verdicts["clean bf16 emu"]["bytes"] < 0.6 * verdicts["clean emu"]["bytes"]
    assert verdicts["tied emu"]["bytes"] < verdicts["clean emu"]["bytes"]  # fc2.weight stored once


@pytest.mark.emu
def test_one_ulp_on_save_fails_naming_the_tensor_in_both_formats(verdicts):
    value = verdicts["one ulp on save"]
    assert value["verdict"] == "fail" and value["differing_total"] == 2, value
    assert [line.rpartition(", max abs ")[0] for line in value["differing"]] == [
        "safetensors:fc1.weight: 1 ulp",
        "torch.save:fc1.weight: 1 ulp",
    ]
    assert value["reason"].startswith(
        "the checkpoint read back differs from what the target held (2 differences): safetensors:fc1.weight: 1 ulp"
    )


@pytest.mark.emu
def test_another_dtype_on_save_fails_with_both_dtypes(verdicts):
    value = verdicts["another dtype on save"]
    assert value["verdict"] == "fail"
    assert "torch.save:fc2.bias: torch.float16 (16,) read back, torch.float32 (16,) held" in value["differing"]


@pytest.mark.emu
def test_a_save_that_raises_is_an_error_with_the_reason(verdicts):
    value = verdicts["cannot save"]
    assert value["verdict"] == "error"
    assert value["reason"] == (
        "safetensors could not save the weights: RuntimeError: this tensor cannot be copied to the host"
    )


@pytest.mark.emu
def test_a_trial_asked_for_the_checkpoint_check_rules_out_a_target_that_saves_wrong(tmp_path):
    ran = cli_trial(CLASSIFIER + "?save_fault=ulp", "emu", tmp_path, "--check", "checkpoint", env=EMU_ENV)
    assert ran.returncode == 0, ran.stderr[-2000:]
    run = json.loads(ran.stdout)
    reference, emu = run["results"]
    assert reference["checkpoint"] is None and "checkpoint" in reference["skipped_checks"]
    assert emu["correctness"]["verdict"] == "pass" and emu["checkpoint"]["verdict"] == "fail"
    assert run["decision"]["outcome"] == "none"
    said = "ruled out by checkpoint fail: the checkpoint read back differs"
    assert any(said in line for line in run["decision"]["lines"])


@pytest.mark.emu
def test_an_optimiser_state_that_drops_a_field_on_save_fails_and_cannot_resume(verdicts):
    value = verdicts["optimiser field dropped"]
    assert value["verdict"] == "fail", value["reason"]
    assert "optimizer:state[0].exp_avg_sq: missing" in value["differing"]
    assert any(
        line.startswith("resumed: resuming on the CPU from the checkpoint raised KeyError")
        for line in value["differing"]
    )


@pytest.mark.emu
def test_a_step_count_saved_one_off_fails_and_resumes_elsewhere(verdicts):
    value = verdicts["optimiser step changed"]
    assert value["verdict"] == "fail", value["reason"]
    assert value["differing"][:2] == [
        "optimizer:state[0].step: 3 read back, 2 held",
        "optimizer:state[1].step: 3 read back, 2 held",
    ]
    assert value["differing"][-1] == (
        "resumed: one CPU step from the checkpoint and from the state held differ first at fc1.weight"
    )


@pytest.mark.emu
def test_weights_only_does_not_train(verdicts):
    value = verdicts["weights only"]
    assert value["verdict"] == "pass" and value["trained"] == ""


@pytest.mark.emu
def test_a_self_placed_workload_is_compared_with_its_own_state(verdicts):
    assert verdicts["self-placed"]["reason"].endswith(
        "against the target's own state_dict copied to the CPU (the workload places itself); after 2 eager AdamW "
        "step(s) on the target's device, resumed on the CPU for one more: the optimiser state read back bit for bit "
        "and resumed as held"
    )


@pytest.mark.emu
@pytest.mark.parametrize(
    ("name", "line"),
    [
        (
            "a signed zero saved as +0.0",
            "torch.save:fc1.bias: same values, other bits (a signed zero or a NaN's payload)",
        ),
        ("a float8 buffer one step up", "torch.save:scale8: 1 ulp, max abs "),
    ],
)
def test_bits_a_value_comparison_cannot_see_are_caught(verdicts, name, line):
    value = verdicts[name]
    assert value["verdict"] == "fail", value["reason"]
    assert any(found.startswith(line) for found in value["differing"]), value["differing"]
