"""Captured values of a script: a no-op outside a recording; inside, snapshots per name and call,
every ``backward()``'s loss, and a safetensors round trip that keeps tensors, numbers and structure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from bakeoff.errors import BakeoffError
from bakeoff.script.capture import LOSS, Captures, active, capture, recording


def test_capture_outside_a_recording_returns_its_value_and_keeps_nothing() -> None:
    value = torch.ones(2)
    assert capture("out", value) is value
    with recording() as captured:
        assert active() is captured
    assert len(captured) == 0 and active() is None


def test_captures_are_host_snapshots_per_name_and_call() -> None:
    weight = torch.ones(3, requires_grad=True)
    with recording() as captured:
        for step in range(3):
            capture("out", weight * step)
        capture("metrics", {"loss": 0.5, "steps": 3, "ok": True, "tag": "train", "none": None})
        capture("pair", (torch.zeros(2, dtype=torch.bfloat16), [1, 2.5]))
        weight.data.fill_(9.0)  # a later change does not reach the snapshot
    assert captured.names() == ("out", "metrics", "pair")
    outs = captured["out"]
    assert [o.tolist() for o in outs] == [[0.0] * 3, [1.0] * 3, [2.0] * 3]
    assert not outs[1].requires_grad and outs[1].device.type == "cpu"
    assert captured["metrics"] == [{"loss": 0.5, "steps": 3, "ok": True, "tag": "train", "none": None}]
    (pair,) = captured["pair"]
    assert isinstance(pair, tuple) and pair[0].dtype == torch.bfloat16 and pair[1] == [1, 2.5]
    assert capture("after", 1) == 1 and "after" not in captured


def test_a_value_that_cannot_be_stored_is_refused_with_its_path() -> None:
    with recording(), pytest.raises(TypeError, match=r"cannot capture batch\['ids'\]\[1\]: a object"):
        capture("batch", {"ids": [1, object()]})
    with recording(), pytest.raises(TypeError, match="key"):
        capture("batch", {(1, 2): 3})


def test_every_backward_loss_is_captured_and_backward_is_restored() -> None:
    original = torch.Tensor.backward
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    inputs, target = torch.randn(8, 4), torch.randn(8, 1)
    losses = []
    with recording(losses=True) as captured:
        for _ in range(3):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(inputs), target)
            losses.append(loss.item())
            loss.backward()
            optimizer.step()
    assert [v.item() for v in captured[LOSS]] == losses
    assert losses[2] < losses[0]  # the wrapped backward still trains
    assert torch.Tensor.backward is original
    with pytest.raises(ValueError), recording(losses=True):
        raise ValueError("the script failed")
    assert torch.Tensor.backward is original and active() is None


def test_a_loss_is_captured_once_under_a_device_remap() -> None:
    """The remap's function mode dispatches ``backward`` back to the wrapper: still one loss per call."""
    from bakeoff.script import Remapper

    torch.manual_seed(0)
    with Remapper({"cuda": "cpu"}), recording(losses=True) as captured:
        model = torch.nn.Linear(4, 1).cuda()
        for _ in range(3):
            model(torch.randn(8, 4, device="cuda")).pow(2).mean().backward()
        (torch.ones(1, requires_grad=True) * 2).sum().backward()  # another tensor: its own loss
    assert len(captured[LOSS]) == 4


def test_recordings_do_not_nest() -> None:
    with recording(), pytest.raises(BakeoffError, match="already active"), recording():
        pass


def test_a_captured_set_round_trips_through_safetensors(tmp_path: Path) -> None:
    with recording() as captured:
        capture("logits", torch.arange(6.0).reshape(2, 3).T)  # not contiguous
        capture("logits", torch.zeros(0, dtype=torch.float16))
        capture("state", {"step": 7, "lr": 1e-3, "nan": float("nan"), "done": False, "ids": (1, [2, None], "x")})
        capture("loss", 0.25)
    path = tmp_path / "captures.safetensors"
    captured.to_safetensors(path)
    loaded = Captures.from_safetensors(path)
    assert loaded.names() == ("logits", "state", "loss")
    assert torch.equal(loaded["logits"][0], torch.arange(6.0).reshape(2, 3).T)
    assert loaded["logits"][1].dtype == torch.float16 and loaded["logits"][1].shape == (0,)
    (state,) = loaded["state"]
    assert state["nan"] != state["nan"]  # NaN survives
    del state["nan"]
    assert state == {"step": 7, "lr": 1e-3, "done": False, "ids": (1, [2, None], "x")}
    assert type(state["step"]) is int and type(state["done"]) is bool
    assert loaded["loss"] == [0.25]
    with safe_open(str(path), framework="pt") as handle:  # a plain safetensors file: no pickle
        assert json.loads(handle.metadata()["bakeoff.captures"])["version"] == 1
        assert len(list(handle.keys())) == 9  # 2 tensors and 7 numbers


def test_a_reader_refuses_a_newer_format_and_a_file_without_captures(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    newer = tmp_path / "newer.safetensors"
    save_file({}, str(newer), metadata={"bakeoff.captures": json.dumps({"version": 99, "values": {}})})
    with pytest.raises(BakeoffError, match="format 99; this bakeoff reads up to 1"):
        Captures.from_safetensors(newer)
    plain = tmp_path / "plain.safetensors"
    save_file({"w": torch.ones(1)}, str(plain))
    with pytest.raises(BakeoffError, match="holds no captured values"):
        Captures.from_safetensors(plain)
