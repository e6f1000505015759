"""``bakeoff exec --nodes``: one torchrun-style job across machines, each running the same command.

Two bakeoff processes stand for two machines on the loopback (``--nodes 0/2@127.0.0.1:PORT`` and
``--nodes 1/2@...``), one rank each, running the CUDA-style DDP script of the ``--nproc`` tests on
the test device: the world is two ranks, and each machine compares and stores its own rank,
named by its global rank. The clean control rounds (the device's addmm two units of roundoff
off); the seeded fault is the device's all_reduce averaged again on rank 1 (on the second
machine): that machine's rank fails from its second step, by name. A machine whose peer never
comes is a timeout that says only its own ranks were there.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import EMU_ENV

pytestmark = [pytest.mark.isolated, pytest.mark.emu]

SCRIPT = Path(__file__).parent / "fixtures" / "scripts" / "train_ddp.py"
_ROUNDS = {"BAKEOFF_EMU_WRONG": "aten::addmm=1.0000001"}
#: The jobs of a run on one target without repeats: the reference, the honest reference, the target.
_JOBS = 3


def _free_ports(count: int) -> int:
    """A port with the ``count - 1`` after it free on the loopback now."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + count > 65535:
            continue
        try:
            held = []
            for port in range(base, base + count):
                sock = socket.socket()
                held.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
    raise RuntimeError("no run of free ports")


def _node(
    tmp: Path, node: int, count: int, port: int, env: dict[str, str], *ours: str, args: tuple[str, ...] = ()
) -> subprocess.Popen:
    work = tmp / f"node{node}"
    work.mkdir()
    (work / SCRIPT.name).write_text(SCRIPT.read_text())
    command = [sys.executable, "-m", "bakeoff", "exec", "--on", "emu", "--nproc", "1", *ours]
    command += ["--nodes", f"{node}/{count}@127.0.0.1:{port}", "--db", str(work / "b.db"), "--format", "json"]
    environ = {**os.environ, **EMU_ENV, **env}
    return subprocess.Popen(
        [*command, SCRIPT.name, *args], cwd=work, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _docs(*processes: subprocess.Popen) -> list[dict]:
    found = []
    for process in processes:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0 and out.strip(), err
        found.append(json.loads(out))
    return found


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The control and the fault across two machines, and a machine alone, each run once."""
    found = {}
    tmp, port = tmp_path_factory.mktemp("clean"), _free_ports(_JOBS)
    found["clean"] = _docs(*(_node(tmp, node, 2, port, _ROUNDS) for node in (0, 1)))
    tmp, port = tmp_path_factory.mktemp("avg"), _free_ports(_JOBS)
    fault = {"BAKEOFF_EMU_DIST_FAULT": "avg_twice@1"}
    found["avg"] = _docs(*(_node(tmp, node, 2, port, fault, "--no-audit", args=("--steps", "2")) for node in (0, 1)))
    tmp, port = tmp_path_factory.mktemp("alone"), _free_ports(1)
    # the device as the reference too: one job, the run's first, waits for its peer and times out
    (found["alone"],) = _docs(_node(tmp, 0, 2, port, _ROUNDS, "--reference", "emu", "--timeout", "8"))
    return found


def test_each_machine_compares_its_own_rank_by_its_global_rank_and_the_control_passes(runs):
    for node, doc in enumerate(runs["clean"]):
        reference, emu = doc["results"]
        assert reference["status"] == "ok" and emu["status"] == "ok", emu.get("error")
        correctness = emu["correctness"]
        assert correctness["verdict"] == "pass", correctness["reason"]
        names = {o["name"] for o in correctness["outputs"]}
        assert {f"rank{node}/loss[{step}]" for step in range(3)} <= names, names
        assert not any(n.startswith(f"rank{1 - node}/") for n in names)  # the other machine's rank is its own
        assert any(o["max_abs_err"] > 0 for o in correctness["outputs"])  # another rounding, not the same bits
        assert doc["settings"]["exec"]["nodes"] == f"{node}/2@127.0.0.1:{_port_of(doc)}"


def _port_of(doc: dict) -> int:
    return int(doc["settings"]["exec"]["nodes"].rsplit(":", 1)[1])


def test_an_all_reduce_averaged_again_on_the_second_machines_rank_fails_that_rank_by_name(runs):
    emu = runs["avg"][1]["results"][1]
    correctness = emu["correctness"]
    assert correctness["verdict"] == "fail"
    passed = {o["name"]: o["passed"] for o in correctness["outputs"]}
    assert passed["rank1/loss[0]"]  # the first forward ran before any gradient was reduced
    assert not passed["rank1/loss[1]"] and not passed["rank1/params:DistributedDataParallel[0]"]
    assert "rank1/" in correctness["reason"]


def test_a_machine_whose_peer_never_comes_times_out_saying_only_its_ranks_were_there(runs):
    (emu,) = runs["alone"]["results"]
    assert emu["is_reference"] and emu["status"] == "error" and emu["error"]["category"] == "timeout"
    message = emu["error"]["message"]
    assert message.startswith("no end within 8 s: still running rank 0 at train_ddp.py:"), message
    assert "this machine's ranks only: 1 of 2; another machine's may not have come" in message
