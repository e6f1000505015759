"""bakeoff's dispatch modes and the emu device leave ``torch._dynamo`` unimported until a script
compiles (the import is about a second, and it landed inside every audited script's timed run),
and a script that does compile still gets the emu backend and the audit inside its graph.
Each case runs in a fresh process: pytest's own has imported dynamo long ago."""

from __future__ import annotations

import pytest
from tests.conftest import fresh_process_json

pytestmark = [pytest.mark.emu, pytest.mark.compile]

_SCRIPT = r"""
import json, sys
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from bakeoff.target.lazy_dynamo import lazy_dynamo

case = json.loads(sys.argv[1])
seen = []

class Counting(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        seen.append(str(func))
        return func(*args, **(kwargs or {}))

mode = lazy_dynamo(Counting) if case["lazy"] else Counting
if case["emu"]:
    import bakeoff.emu as emu
    emu.enable()
device = "emu" if case["emu"] else "cpu"
with mode():
    x = torch.ones(4, device=device)
    (x * 2).sum().item()
ops_before = len(seen)
loaded_before = "torch._dynamo" in sys.modules
graph_ops = frames_under_mode = hooked_ops = 0
if case["compile"]:
    f = torch.compile(lambda t: torch.sin(t) * 3 + 1, backend=case["compile"])
    f(torch.ones(4, device=device))  # compiled outside the mode, then run under it
    before = len(seen)
    with mode():
        y = f(torch.ones(4, device=device))
    graph_ops = len(seen) - before
    assert torch.allclose(y.cpu(), torch.sin(torch.ones(4)) * 3 + 1)
    # a compiled module whose guards a hook breaks runs eagerly under the mode (the placement
    # audit's case): dynamo must not try to compile a frame of the mode's own for each op
    from torch._dynamo.utils import counters
    net = torch.nn.Linear(4, 4).to(device)
    g = torch.compile(net, backend=case["compile"])
    g(torch.ones(2, 4, device=device))
    net.register_forward_hook(lambda *args: None)
    before, ops = counters["frames"]["total"], len(seen)
    with mode():
        g(torch.ones(2, 4, device=device))
    frames_under_mode, hooked_ops = counters["frames"]["total"] - before, len(seen) - ops
compilations = 0
if case["emu"]:
    from bakeoff.emu.backend import COMPILATIONS
    compilations = len(COMPILATIONS)
print(json.dumps({"loaded_before": loaded_before, "ops_before": ops_before, "graph_ops": graph_ops,
                  "compilations": compilations, "frames_under_mode": frames_under_mode,
                  "hooked_ops": hooked_ops}))
"""


def test_a_lazy_mode_leaves_dynamo_unimported_and_a_plain_mode_does_not() -> None:
    lazy = fresh_process_json(_SCRIPT, {"lazy": True, "emu": True, "compile": ""})
    assert lazy["ops_before"] > 0 and not lazy["loaded_before"]  # emu enabled, ops seen, no dynamo
    # the control: PyTorch's own wrapper imports dynamo at the mode's first op
    plain = fresh_process_json(_SCRIPT, {"lazy": False, "emu": False, "compile": ""})
    assert plain["ops_before"] > 0 and plain["loaded_before"]


def test_a_script_that_compiles_gets_the_emu_backend_and_the_mode_sees_the_graphs_ops() -> None:
    ran = fresh_process_json(_SCRIPT, {"lazy": True, "emu": True, "compile": "emu"})
    assert not ran["loaded_before"] and ran["compilations"] == 2  # registered when dynamo came (f, g)
    assert ran["graph_ops"] >= 3  # sin, mul, add ran eagerly inside the emu graph, under the mode
    eager = fresh_process_json(_SCRIPT, {"lazy": True, "emu": False, "compile": "aot_eager"})
    assert eager["graph_ops"] >= 3
    # the hooked module's ops were all seen, and dynamo compiled none of the mode's frames
    # (before they were marked: one frame per op, up to dynamo's recompile limit)
    for run in (ran, eager):
        assert run["hooked_ops"] >= 2 and run["frames_under_mode"] == 0, run
