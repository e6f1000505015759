"""``bakeoff exec --nproc 2``: a torchrun-style DDP script written for CUDA (``nccl``,
``cuda:LOCAL_RANK``, ``device_ids=[local_rank]``), unchanged, as two ranks on the CPU's gloo
(the reference) and on the test device's process-group backend, end to end through the CLI.

The clean control rounds: the device's addmm is made to round up to two units of roundoff
(``BAKEOFF_EMU_WRONG=aten::addmm=1.0000001``), as another engine's kernel would, so the ranks'
losses, outputs and the weights rank 0 writes differ from the reference's in the last bits and
pass. Seeded faults (the device's backend, ``BAKEOFF_EMU_DIST_FAULT``): rank 1's all_reduce
averaged again (its gradients halved: rank 1's captures fail from its second step, rank 0's
after the averaged gradients reach it); rank 1 that never returns from its fourth collective (a
hang: the timeout names where each rank waited, and no rank is left running); ``kill -9`` of
bakeoff mid-hang takes every rank with it. One step whose all_reduce is wrong on rank 1 leaves
no capture after it: rank 1's final weights (each rank's DDP module's) are the evidence.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from tests.conftest import EMU_ENV, bakeoff_cli, kill_9_when_started, marked, still_running

pytestmark = [pytest.mark.isolated, pytest.mark.emu]

SCRIPT = Path(__file__).parent / "fixtures" / "scripts" / "train_ddp.py"
#: An engine whose addmm rounds up to two units of roundoff off: the honest control.
_ROUNDS = {"BAKEOFF_EMU_WRONG": "aten::addmm=1.0000001"}


def _exec(tmp: Path, *ours: str, env: dict[str, str] | None = None, wait: bool = True, args: tuple = ()):
    work = tmp / "work"
    work.mkdir(exist_ok=True)
    (work / SCRIPT.name).write_text(SCRIPT.read_text())
    command = [sys.executable, "-m", "bakeoff", "exec", "--on", "emu", "--nproc", "2", *ours]
    command += ["--db", str(tmp / "b.db"), "--format", "json", SCRIPT.name, *args]
    environ = {**os.environ, **EMU_ENV, **(env or {})}
    if not wait:
        return subprocess.Popen(command, cwd=work, env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return bakeoff_cli(*command[3:], cwd=work, env=environ, timeout=300)


def _doc(ran: subprocess.CompletedProcess) -> dict:
    assert ran.returncode == 0 and ran.stdout.strip(), ran.stderr
    return json.loads(ran.stdout)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The runs the tests read, each made once: the control, the averaged-again fault, the hang."""
    found = {}
    found["clean"] = _doc(_exec(tmp_path_factory.mktemp("clean"), env=_ROUNDS))
    avg = {"BAKEOFF_EMU_DIST_FAULT": "avg_twice@1"}
    found["avg"] = _doc(_exec(tmp_path_factory.mktemp("avg"), env=avg))
    found["avg_one_step"] = _doc(_exec(tmp_path_factory.mktemp("avg1"), "--no-audit", env=avg, args=("--steps", "1")))
    marker = uuid.uuid4().hex
    stall = {"BAKEOFF_EMU_DIST_FAULT": "stall@1:4", "BAKEOFF_TEST_MARK": marker}
    # the job on the device is the reference: no healthy run has to finish within the timeout
    found["hang"] = _doc(_exec(tmp_path_factory.mktemp("hang"), "--reference", "emu", "--timeout", "12", env=stall))
    found["hang_left"] = marked(marker)
    return found


def test_a_cuda_ddp_script_runs_as_two_ranks_on_the_device_and_each_rank_matches_the_references(runs):
    doc = runs["clean"]
    reference, emu = doc["results"]
    assert reference["status"] == "ok" and emu["status"] == "ok", emu.get("error")
    correctness = emu["correctness"]
    assert correctness["verdict"] == "pass", correctness["reason"]
    names = {o["name"] for o in correctness["outputs"]}
    for rank in (0, 1):  # every rank's losses, outputs and final weights, against the reference's same rank
        assert {f"rank{rank}/loss[{step}]" for step in range(3)} <= names, names
        assert f"rank{rank}/module:DistributedDataParallel[2]" in names
        assert f"rank{rank}/params:DistributedDataParallel[0]" in names
    assert {n for n in names if n.startswith("file:")} == {f"file:model.safetensors:{p}" for p in
                                                          ("0.weight", "0.bias", "2.weight", "2.bias")}  # fmt: skip
    # an honest control: another rounding, not the same bits
    assert any(o["max_abs_err"] > 0 for o in correctness["outputs"])
    # the remap's ledger: the backend, each rank's device and DDP's device_ids, on both sides
    ledger = {a["name"]: a["value"] for a in emu["adjustments"]}
    assert "nccl -> emu" in ledger["torch.distributed.init_process_group(backend=)"]
    assert ledger["torch.distributed.init_process_group(backend=)"].startswith("2x")  # summed over the ranks
    assert "[1] -> [0]" in ledger["DistributedDataParallel(device_ids=)"]
    host = {a["name"]: a["value"] for a in reference["adjustments"]}
    assert "nccl -> gloo" in host["torch.distributed.init_process_group(backend=)"]
    assert "-> None" in host["DistributedDataParallel(device_ids=)"]
    assert any("the 2 ranks share emu:0" in n for n in emu["notes"]), emu["notes"]
    assert doc["settings"]["exec"]["nproc"] == 2
    assert emu["placement"]["verdict"] == "on_device", emu["placement"]["explanation"]


def test_an_all_reduce_averaged_again_on_rank_1_fails_rank_1_from_its_second_step(runs):
    emu = runs["avg"]["results"][1]
    correctness = emu["correctness"]
    assert correctness["verdict"] == "fail"
    passed = {o["name"]: o["passed"] for o in correctness["outputs"]}
    # the first step's forward ran before any gradient was reduced: both ranks right there
    assert passed["rank0/loss[0]"] and passed["rank1/loss[0]"]
    assert passed["rank0/module:DistributedDataParallel[0]"] and passed["rank1/module:DistributedDataParallel[0]"]
    # rank 1's weights took halved gradients: its next forward is off, and the weights rank 0 saves
    assert not passed["rank1/loss[1]"] and not passed["rank1/module:DistributedDataParallel[1]"]
    assert "rank1/module:DistributedDataParallel[1]" in correctness["reason"]
    assert not passed["file:model.safetensors:0.weight"]
    assert not passed["rank1/params:DistributedDataParallel[0]"]  # each rank's final weights


def test_one_step_whose_all_reduce_is_wrong_on_rank_1_fails_on_rank_1s_final_weights(runs):
    # no capture comes after the one update: rank 1's losses and outputs, and the weights rank 0
    # saves, are all right; only rank 1's final weights (its DDP module's, when it was freed) are not
    correctness = runs["avg_one_step"]["results"][1]["correctness"]
    assert correctness["verdict"] == "fail"
    failed = [o["name"] for o in correctness["outputs"] if not o["passed"]]
    assert failed == ["rank1/params:DistributedDataParallel[0]"], failed
    assert "rank1/params:DistributedDataParallel[0]: rms error vs the reference" in correctness["reason"]


def test_a_rank_that_never_returns_from_a_collective_is_a_timeout_naming_where_each_rank_waited(runs):
    (emu,) = runs["hang"]["results"]
    assert emu["target"] == "emu" and emu["is_reference"]
    assert emu["status"] == "error" and emu["error"]["category"] == "timeout", emu.get("error")
    message = emu["error"]["message"]
    assert message.startswith("no end within 12 s: still running rank 0 at train_ddp.py:"), message
    assert "rank 1 at train_ddp.py:" in message  # each rank's own line in the script, and the call
    assert not runs["hang_left"]  # no rank outlived the run


def test_kill_9_of_bakeoff_mid_hang_takes_every_rank_with_it(tmp_path):
    marker = uuid.uuid4().hex
    env = {"BAKEOFF_EMU_DIST_FAULT": "stall@1:1", "BAKEOFF_TEST_MARK": marker}
    process = _exec(tmp_path, "--reference", "emu", "--timeout", "600", env=env, wait=False)
    left = kill_9_when_started(process, marker, 4, 2.0)  # bakeoff, its fork server, two ranks
    assert len(left) >= 3, left
    assert not still_running(left)
    assert not (tmp_path / "b.db").exists()  # nothing half-stored
