"""Module captures of a script: qualified names from the first call's subtree, the same for two
copies of a model; glob patterns on names and class names; the root calls recorded by default;
the per-module and byte caps."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from bakeoff.script.capture import Captures
from bakeoff.script.modules import (
    DEFAULT,
    NONE,
    ROOT_CALLS,
    ModuleCalls,
    ModuleNames,
    budget,
    check_patterns,
    matches,
)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 4)
        self.fc2 = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def test_a_module_first_seen_names_its_whole_subtree_after_its_class() -> None:
    names = ModuleNames()
    net = Net()
    assert names.name(net.layers[1].fc2) == "Linear"  # seen alone first: its own class is its root
    assert names.name(net) == "Net"
    assert names.name(net.layers[0].fc1) == "Net.layers.0.fc1"
    assert names.name(net.layers[1]) == "Net.layers.1"
    assert names.name(net.layers[1].fc2) == "Linear"  # a module keeps its first name
    assert names.name(Net()) == "Net"  # another copy: the same names, never an id


def _run(patterns: list[str], calls: int = 1, **caps: int) -> tuple[Captures, ModuleCalls]:
    captures = Captures()
    recorder = ModuleCalls(patterns, captures, **caps)
    torch.manual_seed(0)
    net = Net()
    recorder.install()
    try:
        for _ in range(calls):
            net(torch.randn(3, 4))
    finally:
        recorder.uninstall()
    net(torch.randn(3, 4))  # after uninstall: nothing more is recorded
    return captures, recorder


def test_module_outputs_are_recorded_by_name_or_class_pattern_call_by_call() -> None:
    captures, recorder = _run(["Net.layers.*.fc2", "Net", "nothing*"], calls=2)
    assert captures.names() == ("module:Net.layers.0.fc2", "module:Net.layers.1.fc2", "module:Net")
    assert [len(captures[n]) for n in captures.names()] == [2, 2, 2]
    assert captures["module:Net"][0].shape == (3, 2)
    assert recorder.unmatched == ("nothing*",) and recorder.capped == 0 and not recorder.errors
    by_class, _ = _run(["Block"])
    assert by_class.names() == ("module:Net.layers.0", "module:Net.layers.1")


def test_the_recorded_values_are_the_modules_outputs() -> None:
    torch.manual_seed(0)
    net = Net()
    x = torch.randn(3, 4)
    captures = Captures()
    recorder = ModuleCalls(["*"], captures)
    recorder.install()
    try:
        out = net(x)
    finally:
        recorder.uninstall()
    torch.testing.assert_close(captures["module:Net"][0], out.detach())
    torch.testing.assert_close(captures["module:Net.layers.0.fc1"][0], net.layers[0].fc1(x).detach())


def test_the_caps_stop_recording_at_the_same_call_and_count_the_rest() -> None:
    captures, recorder = _run(["Net.head"], calls=5, max_calls=3)
    assert len(captures["module:Net.head"]) == 3 and recorder.capped == 2
    # the byte cap: 3x2 float32 outputs are 24 bytes each; 60 bytes keep two calls, then nothing
    captures, recorder = _run(["Net.head", "Net"], calls=3, max_bytes=60)
    assert [len(captures[n]) for n in captures.names()] == [1, 1] and recorder.capped == 4


def test_the_root_calls_are_recorded_by_default_and_a_raise_leaves_the_next_call_a_root() -> None:
    """The default records the model the script calls (a root call), never the layers inside
    it; a call whose forward raised (its hooks still run) does not make later calls look nested."""
    torch.manual_seed(0)
    net = Net()
    loss = nn.MSELoss()
    captures = Captures()
    recorder = ModuleCalls(DEFAULT, captures)
    assert (recorder.max_calls, recorder.max_bytes) == budget(DEFAULT) and ROOT_CALLS == 4
    recorder.install()
    try:
        x = torch.randn(3, 4)
        out = net(x)
        loss(out, torch.zeros(3, 2))
        with pytest.raises(RuntimeError):
            net(torch.randn(3, 5))  # a shape the first layer refuses, caught by the script
        net.head(torch.randn(1, 4))  # a submodule called on its own is a root call too
        for _ in range(6):
            net(x)
    finally:
        recorder.uninstall()
    assert captures.names() == ("module:Net", "module:MSELoss", "module:Net.head"), captures.names()
    torch.testing.assert_close(captures["module:Net"][0], out.detach())
    assert len(captures["module:Net"]) == ROOT_CALLS and recorder.capped == 7 - ROOT_CALLS
    assert recorder.unmatched == () and not recorder.errors


def test_none_records_no_module_call_and_the_roots_join_other_patterns() -> None:
    captures, recorder = _run([NONE], calls=2)
    assert captures.names() == () and recorder.patterns == ()
    captures, recorder = _run(["@roots", "Net.head"], calls=2)
    assert captures.names() == ("module:Net.head", "module:Net") and budget(recorder.patterns)[0] == 8


def test_outputs_a_capture_cannot_hold_are_kept_as_their_type_name() -> None:
    class Odd(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple:
            return x * 2, object(), {"n": 1}

    captures = Captures()
    recorder = ModuleCalls(["Odd"], captures)
    recorder.install()
    try:
        Odd()(torch.ones(2))
    finally:
        recorder.uninstall()
    ((doubled, odd, extra),) = captures["module:Odd"]
    assert doubled.tolist() == [2.0, 2.0] and odd == "<object>" and extra == {"n": 1}
    assert not recorder.errors


@pytest.mark.parametrize("patterns", [[""], ["  "], [" Linear"], ["*.mlp", "none"]])
def test_a_malformed_pattern_is_refused_with_its_reason(patterns: list[str]) -> None:
    assert check_patterns(patterns) is not None
    assert check_patterns(["*.mlp", "@roots"]) is None and check_patterns(["none"]) is None
    assert matches(["Lin*"], "Net.head", "Linear") == ["Lin*"]
