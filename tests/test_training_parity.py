"""The training parity check on real runs: seeded faults it must catch, clean controls it must not flag.

The seeded faults are real: the emu test device's wrong-result switch scales one op's outputs on
the device (``BAKEOFF_EMU_WRONG``), and a model that scales its activation under torch.compile only
(a backend that computes wrong). Every emu case runs in one fresh process (the PrivateUse1 device
is process-wide); the CLI cases run ``bakeoff trial`` as a user would.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.conftest import EMU_ENV, FIXTURES, cli_trial, fresh_process_json

CLASSIFIER = f"py:{FIXTURES / 'training_models.py'}:classifier"
LLAMA = "arch:llama?layers=1&hidden=32&intermediate=64&vocab=128"

#: (name, workload, target, ops made wrong on the device)
CASES = [
    ("clean emu", CLASSIFIER, "emu", ""),
    ("wrong forward op", CLASSIFIER, "emu", "aten::tanh"),
    ("wrong backward op", CLASSIFIER, "emu", "aten::tanh_backward"),
    ("wrong optimiser op", CLASSIFIER, "emu", "aten::addcdiv"),
    ("dropout", CLASSIFIER + "?dropout=0.1", "emu", ""),
    ("raises off the CPU", CLASSIFIER + "?raises_off_cpu=1", "emu", ""),
    ("clean bf16 emu", CLASSIFIER, "emu?dtype=bf16", ""),
    ("clean compiled", CLASSIFIER, "cpu+aot_eager", ""),
    ("wrong when compiled", CLASSIFIER + "?compiled_fault=0.01", "cpu+aot_eager", ""),
    ("clean llama", LLAMA, "emu", ""),
    ("llama wrong silu", LLAMA, "emu", "aten::silu"),
]

SCRIPT = """
import json, sys
from bakeoff import emu
emu.enable()
from bakeoff.checks.base import CheckContext
from bakeoff.checks.training import TrainingCheck
from bakeoff.runner.job import TargetJob
from bakeoff.target.spec import parse_target
from bakeoff.workload.registry import build_workload

out = {}
for name, spec, target_spec, wrong in json.loads(sys.argv[1]):
    emu.enable(wrong={op: 1.01 for op in wrong.split(",") if op})
    target = parse_target(target_spec, extra_devices=("emu",))
    built = build_workload(spec)
    job = TargetJob(workload_spec=spec, target=target, fingerprint=built.fingerprint, baseline_path=None)
    context = CheckContext(job, target, None, {}, None, target.dtype or "float32", "float32", built.fingerprint)
    context.options = {"steps": 6, "optimizer": "adamw", "lr": 1e-3}
    emu.counters(reset=True)
    value = TrainingCheck().run(context)
    out[name] = {**value.to_dict(), "wrong_calls": sum(emu.counters()["wrong_ops"].values())}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def verdicts() -> dict[str, dict]:
    return fresh_process_json(SCRIPT, CASES, timeout=900)


@pytest.mark.emu
@pytest.mark.parametrize("name", ["clean emu", "clean bf16 emu", "clean compiled", "clean llama"])
def test_clean_controls_pass(verdicts, name):
    value = verdicts[name]
    assert value["verdict"] == "pass", value["reason"]
    assert value["gradients_failed"] == 0 and value["gradients_total"] > 0
    assert len(value["curve"]) == 6 and value["wrong_calls"] == 0
    assert value["worst"] <= 1.0


@pytest.mark.emu
@pytest.mark.parametrize(
    ("name", "fault", "gradients_off"),
    [
        ("wrong forward op", "forward", True),
        ("wrong backward op", "backward", True),
        ("wrong optimiser op", "optimiser", False),
        ("wrong when compiled", "forward", True),
        ("llama wrong silu", "forward", True),
    ],
)
def test_seeded_faults_fail_at_step_1_and_say_where(verdicts, name, fault, gradients_off):
    value = verdicts[name]
    assert (value["verdict"], value["first_step"], value["fault"]) == ("fail", 1, fault), value["reason"]
    assert value["error"] > value["band"]
    assert f"{value['error']:.3g}" in value["reason"] and f"{value['band']:.3g}" in value["reason"]
    assert (value["gradients_failed"] > 0) is gradients_off
    if name != "wrong when compiled":
        assert value["wrong_calls"] > 0  # the device really computed wrong


@pytest.mark.emu
def test_the_backward_fault_leaves_the_loss_alone_and_names_the_parameters(verdicts):
    value = verdicts["wrong backward op"]
    _golden, reference, target = value["curve"][0]["loss"]
    assert target == reference  # the forward pass is untouched
    off = [g["name"] for g in value["gradients"] if not g["passed"]]
    assert "fc1.weight" in off and "fc2.weight" not in off  # tanh's backward feeds fc1 only


@pytest.mark.emu
def test_a_language_model_trains_on_the_causal_lm_loss(verdicts):
    value = verdicts["clean llama"]
    assert value["loss_kind"] == "causal_lm"
    losses = [s["loss"][0] for s in value["curve"]]
    assert len(set(losses)) == len(losses)  # fresh tokens every step


@pytest.mark.emu
def test_stochastic_training_is_not_comparable_with_the_reason(verdicts):
    value = verdicts["dropout"]
    assert value["verdict"] == "not_comparable"
    assert "Dropout with p > 0" in value["reason"] and "set the dropout probabilities to 0" in value["reason"]


@pytest.mark.emu
def test_a_target_that_cannot_train_is_an_error_of_this_check_only(verdicts):
    value = verdicts["raises off the CPU"]
    assert value["verdict"] == "error"
    assert "training raised on the target at step 1: RuntimeError: no backward kernel" in value["reason"]


def _training(tmp_path: Path, wrong: str) -> tuple[dict, dict]:
    env = {**EMU_ENV, "BAKEOFF_EMU_WRONG": wrong}
    ran = cli_trial(CLASSIFIER, "emu", tmp_path, "--check", "training?steps=3", env=env)
    assert ran.returncode == 0, ran.stderr[-2000:]
    run = json.loads(ran.stdout)
    (emu,) = [r for r in run["results"] if r["target"] == "emu"]
    return emu, run


@pytest.mark.emu
def test_a_trial_asked_for_training_parity_rules_out_a_target_that_trains_wrong(tmp_path):
    emu, run = _training(tmp_path, "aten::tanh_backward")
    assert emu["status"] == "ok" and emu["correctness"]["verdict"] == "pass"  # inference is right
    assert emu["training"]["verdict"] == "fail" and emu["training"]["fault"] == "backward"
    assert run["decision"]["outcome"] == "none"
    assert any("ruled out by training fails at step 1" in line for line in run["decision"]["lines"])


@pytest.mark.emu
def test_the_clean_control_trial_qualifies_and_a_trial_without_the_option_does_not_train(tmp_path):
    emu, run = _training(tmp_path, "")
    assert emu["training"]["verdict"] == "pass"
    assert not any("training" in line for line in run["decision"]["lines"])
    plain = cli_trial(CLASSIFIER, "emu", tmp_path, env=EMU_ENV)
    (result,) = [r for r in json.loads(plain.stdout)["results"] if r["target"] == "emu"]
    assert result["training"] is None and "training" not in result["skipped_checks"]
