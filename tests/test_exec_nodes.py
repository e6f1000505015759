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
import uuid
from pathlib import Path

import pytest
from tests.conftest import EMU_ENV, ForkedCLI, start_cli

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
    tmp: Path, node: int, count: int, port: int, env: dict[str, str], *ours: str, args: tuple[str, ...] = (),
    host: str = "127.0.0.1", inside: tuple[str, ...] = (),
) -> subprocess.Popen | ForkedCLI:  # fmt: skip
    """One machine's ``bakeoff exec``; ``inside``: what runs it (``ip netns exec NAME``)."""
    work = tmp / f"node{node}"
    work.mkdir()
    (work / SCRIPT.name).write_text(SCRIPT.read_text())
    command = ["exec", "--on", "emu", "--nproc", "1", *ours, "--nodes", f"{node}/{count}@{host}:{port}"]
    command += ["--db", str(work / "b.db"), "--format", "json", SCRIPT.name, *args]
    environ = {k: v for k, v in os.environ.items() if k != "GLOO_SOCKET_IFNAME"} | EMU_ENV | env
    if not inside:  # forked from this worker's warm process, as bakeoff_cli runs are
        return start_cli(*command, env=environ, cwd=work)
    return subprocess.Popen(
        [*inside, sys.executable, "-m", "bakeoff", *command], cwd=work, env=environ, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _docs(*processes: subprocess.Popen | ForkedCLI, said: list[str] | None = None) -> list[dict]:
    found = []
    try:
        for process in processes:
            out, err = process.communicate(timeout=300)
            assert process.returncode == 0 and out.strip(), err
            found.append(json.loads(out))
            if said is not None:
                said.append(err)
    finally:  # a machine that failed leaves no other running
        for process in processes:
            process.kill()
            process.wait()
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
    said: list[str] = []
    (found["alone"],) = _docs(_node(tmp, 0, 2, port, _ROUNDS, "--reference", "emu", "--timeout", "8"), said=said)
    found["alone_said"], found["alone_port"] = said[0], port
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
    # the call it waits in, not bakeoff's wrapper of it
    assert ", in init_process_group (this machine's ranks only: 1 of 2; another machine's may not have come" in message
    said = " ".join(runs["alone_said"].split())  # told while it waits, not only after --timeout
    assert (f"node 0 of 2: this machine's 1 rank(s) of each run meet the other machines' at "
            f"127.0.0.1:{runs['alone_port']}, waiting for them up to --timeout (8 s)") in said, said  # fmt: skip


@pytest.fixture(scope="module")
def two_machines():
    """Two network namespaces joined by a veth pair (10.77.0.1 and 10.77.0.2), each with a
    loopback of its own: two machines' network stacks, where one reaches the other only through
    its interface. Skipped where namespaces cannot be made (no ``ip``, no CAP_NET_ADMIN)."""
    tag = uuid.uuid4().hex[:6]
    spaces, ends = (f"bkA{tag}", f"bkB{tag}"), (f"va{tag}", f"vb{tag}")
    steps = [["ip", "netns", "add", spaces[0]], ["ip", "netns", "add", spaces[1]],
             ["ip", "link", "add", ends[0], "type", "veth", "peer", "name", ends[1]]]  # fmt: skip
    for space, end, address in zip(spaces, ends, ("10.77.0.1/24", "10.77.0.2/24"), strict=True):
        steps += [["ip", "link", "set", end, "netns", space],
                  ["ip", "-n", space, "addr", "add", address, "dev", end],
                  ["ip", "-n", space, "link", "set", end, "up"],
                  ["ip", "-n", space, "link", "set", "lo", "up"]]  # fmt: skip
    try:
        for step in steps:
            subprocess.run(step, check=True, capture_output=True, text=True)
        yield tuple(zip(spaces, ends, strict=True))
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"no network namespaces here: {getattr(exc, 'stderr', '') or exc}")
    finally:
        for space in spaces:  # its end of the pair goes with it
            subprocess.run(["ip", "netns", "del", space], capture_output=True)


def test_two_network_stacks_meet_through_their_interface_and_the_control_passes(two_machines, tmp_path):
    """Each machine's hostname resolves to the loopback here (``/etc/hosts``), which gloo would
    give the other machine: bakeoff sets ``GLOO_SOCKET_IFNAME`` to the interface that reaches node
    0, says so, and the job meets; a user's own setting is kept."""
    port, said = _free_ports(_JOBS), []
    nodes = [
        _node(tmp_path, node, 2, port, _ROUNDS, "--timeout", "90", host="10.77.0.1", inside=("ip", "netns", "exec", ns))
        for node, (ns, _end) in enumerate(two_machines)
    ]
    docs = _docs(*nodes, said=said)
    for node, (doc, err, (_space, end)) in enumerate(zip(docs, said, two_machines, strict=True)):
        reference, emu = doc["results"]
        assert reference["status"] == "ok", reference.get("error")
        assert emu["correctness"]["verdict"] == "pass", emu["correctness"]["reason"]
        assert f"rank{node}/loss[2]" in {o["name"] for o in emu["correctness"]["outputs"]}
        assert f"the ranks get GLOO_SOCKET_IFNAME={end}: " in err, err
    probe = "from bakeoff.runner.script_ranks import gloo_interface as g; import os; print(g('10.77.0.1', os.environ))"
    space, end = two_machines[1]
    for env, printed in (({}, f"('{end}', "), ({"GLOO_SOCKET_IFNAME": end}, "None")):
        command = ["ip", "netns", "exec", space, sys.executable, "-c", probe]
        ran = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **env}, timeout=60)
        assert ran.stdout.startswith(printed), ran.stdout + ran.stderr
