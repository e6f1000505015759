"""A script or service whose work never reached the device is not "on device".

The script audit counts host-only op calls as the script's own host work (its preprocessing, its
metrics): that is fair while the device did the work. A service that builds its tensors on the
host whatever device it is given did no work on the device at all, and was called "on device"
with "0 op calls" in its own explanation."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

CASES = textwrap.dedent("""
    import json, sys, tempfile
    from pathlib import Path
    import torch
    from bakeoff import emu
    emu.enable()
    from bakeoff.checks.script_audit import AUDIT, ScriptAudit

    def audited(work):
        with tempfile.TemporaryDirectory() as here:
            with ScriptAudit("emu", Path(here), what="the service"):
                work()
            return json.loads((Path(here) / AUDIT).read_text())["placement"]

    def host_only():  # told emu, builds everything on the host
        w, x = torch.randn(64, 64), torch.randn(8, 64)
        for _ in range(3):
            (x @ w).sin()

    def on_device():  # the control: the model on the device, a little host work beside it
        w = torch.randn(64, 64, device="emu")
        for i in range(3):
            x = torch.full((8, 64), float(i)) * 2  # each request's host preprocessing
            (x.to("emu") @ w).sin().sum().item()

    def mostly_host():  # one token op on the device, the arithmetic on the host
        torch.ones(2, device="emu").add_(1)
        w, x = torch.randn(256, 256), torch.randn(64, 256)
        for _ in range(3):
            x @ w

    def makes_and_moves():  # a parent whose work is in its child processes: it only moves a tensor
        torch.zeros(1).to("emu")

    def nothing():
        pass

    print(json.dumps({name: audited(work) for name, work in
                      [("host_only", host_only), ("on_device", on_device), ("mostly_host", mostly_host),
                       ("makes_and_moves", makes_and_moves), ("nothing", nothing)]}))
""")


@pytest.fixture(scope="module")
def placements() -> dict:
    ran = subprocess.run([sys.executable, "-c", CASES], capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout.splitlines()[-1])


@pytest.mark.emu
def test_work_that_never_reached_the_device_is_left_on_the_host_and_the_control_is_on_the_device(placements):
    host = placements["host_only"]
    assert host["verdict"] == "left_on_host" and host["ops_on_device"] == 0
    assert host["explanation"].startswith("the work ran on host data: 8 op call(s) on the host (aten::mm x3")
    assert "against 0 on the device" in host["explanation"] and "given the target's device?" in host["explanation"]
    # most of the arithmetic on the host, though a token op reached the device
    mostly = placements["mostly_host"]
    assert mostly["verdict"] == "left_on_host" and mostly["ops_on_device"] >= 1
    assert "aten::mm x3" in mostly["explanation"]
    # the control: the service's own host work beside a device that did the arithmetic
    control = placements["on_device"]
    assert control["verdict"] == "on_device", control["explanation"]
    assert "(the service's own host work: " in control["explanation"]
    moved = placements["makes_and_moves"]  # making a tensor on the host to move it is no host work
    assert moved["verdict"] == "on_device", moved["explanation"]


@pytest.mark.emu
def test_a_service_that_ran_no_op_has_no_placement_to_claim(placements):
    nothing = placements["nothing"]
    assert nothing["verdict"] == "unknown" and nothing["ops_total"] == 0
    said = "no PyTorch op ran in the service while it was audited: where its work ran is not known"
    assert nothing["explanation"] == said


def test_an_unknown_placement_of_a_finished_run_is_a_doubt_and_a_host_one_a_miss():
    from tests.revisit_data import target_result

    from bakeoff.checks.placement import Placement
    from bakeoff.verdicts.standing import standing_of

    said = "no PyTorch op ran in the service while it was audited: where its work ran is not known"
    unknown = standing_of(target_result("cuda", 1.0, placement=Placement("unknown", said)))
    assert unknown.misses == () and unknown.doubts == (f"placement unknown: {said}",)
    host = standing_of(target_result("cuda", 1.0, placement=Placement("left_on_host", "x")))
    assert host.misses == ("work left the device: placement left_on_host",)


def test_the_reports_answer_an_unknown_placement_as_unknown():
    from tests.revisit_data import target_result

    from bakeoff.checks.placement import Placement
    from bakeoff.report.evidence import answers_for

    said = "no PyTorch op ran in the service while it was audited: where its work ran is not known"
    answer = answers_for(target_result("cuda", 1.0, placement=Placement("unknown", said))).placement
    assert (answer.state, answer.text) == ("unknown", said)
    host = answers_for(target_result("cuda", 1.0, placement=Placement("left_on_host", "x"))).placement
    assert host.state == "no"  # the control
