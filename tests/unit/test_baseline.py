"""Baseline references: computing them on the CPU and keeping them as safetensors."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import pytest
import torch

from bakeoff.checks.baseline import compute_references, load_references, repeat_error, save_references
from bakeoff.workload import build_workload
from bakeoff.workload.base import BuiltWorkload, WorkloadSpec


class Affine(torch.nn.Module):
    """Deterministic: two outputs, one of them nested."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, ids: torch.Tensor | None = None) -> dict:
        y = self.lin(x)
        out = {"y": y, "pair": (y.sum(-1), x.mean())}
        if ids is not None:
            out["ids"] = ids * 2
        return out


class Noisy(torch.nn.Module):
    """Nondeterministic: adds fresh random noise on every call."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) + torch.rand(x.shape[0], 3, dtype=x.dtype)


class NoDouble(torch.nn.Module):
    """Fails in float64, like an op without a double kernel."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float64:
            raise RuntimeError("no float64 kernel for this op\nsecond line")
        return self.lin(x)


def _workload(model: torch.nn.Module, **kwargs: torch.Tensor) -> BuiltWorkload:
    torch.manual_seed(0)
    model = model.eval()
    for p in model.parameters():
        torch.nn.init.normal_(p)
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(1))
    return BuiltWorkload(spec=WorkloadSpec("py", "test:model"), model=model, args=(x,), kwargs=kwargs)


def test_reference_names_and_dtypes() -> None:
    w = _workload(Affine())
    refs, notes = compute_references(w)
    assert notes == []
    assert list(refs) == ["eager:float32", "repeat:float32", "golden", "honest:float32"]
    names = ["output.y", "output.pair.0", "output.pair.1"]
    for ref in refs.values():
        assert list(ref) == names
    assert all(t.dtype == torch.float64 for t in refs["golden"].values())
    assert all(t.dtype == torch.float32 for t in refs["eager:float32"].values())
    assert all(t.dtype == torch.float32 for t in refs["repeat:float32"].values())
    assert all(t.dtype == torch.float32 for t in refs["honest:float32"].values())


def test_the_honest_run_differs_from_eager_by_a_few_units_of_roundoff_and_is_reproducible() -> None:
    w = _workload(Affine())
    refs, _ = compute_references(w, dtypes=["bfloat16"])
    again, _ = compute_references(w, dtypes=["bfloat16"])
    for dtype, unit in (("float32", 2.0**-24), ("bfloat16", 2.0**-8)):
        changed = []
        for name, eager in refs[f"eager:{dtype}"].items():
            honest = refs[f"honest:{dtype}"][name]
            assert torch.equal(honest, again[f"honest:{dtype}"][name])  # seeded: a baseline is reproducible
            relative = ((honest.double() - eager.double()).abs() / eager.double().abs().clamp_min(1e-6)).max()
            assert float(relative) < 64 * unit, (dtype, name)  # a few units per op
            changed.append(float(relative) > 0)
        assert any(changed), dtype  # but not nothing (bfloat16 rounds many perturbations away)


def test_references_are_the_model_outputs() -> None:
    w = _workload(Affine())
    refs, _ = compute_references(w)
    x = w.args[0]
    with torch.no_grad():
        expected32 = w.model.lin(x)
        lin64 = torch.nn.Linear(4, 3).double()
        lin64.load_state_dict({k: v.double() for k, v in w.model.lin.state_dict().items()})
        expected64 = lin64(x.double())
    assert torch.equal(refs["eager:float32"]["output.y"], expected32)
    assert torch.equal(refs["golden"]["output.y"], expected64)
    # the golden is more precise, not different: float32 agrees to float32 rounding
    torch.testing.assert_close(refs["golden"]["output.y"].float(), expected32, rtol=1e-5, atol=1e-5)
    assert not refs["eager:float32"]["output.y"].requires_grad


def test_workload_is_left_unchanged() -> None:
    w = _workload(Affine())
    before = {k: v.clone() for k, v in w.model.state_dict().items()}
    compute_references(w, ["bfloat16", "float16"])
    assert all(p.dtype == torch.float32 for p in w.model.parameters())
    assert w.args[0].dtype == torch.float32
    for k, v in w.model.state_dict().items():
        assert torch.equal(v, before[k])


def test_extra_dtypes() -> None:
    w = _workload(Affine(), ids=torch.tensor([1, 2]))
    refs, notes = compute_references(w, ["bfloat16", "float32"])
    assert notes == []
    assert set(refs) == {
        "eager:float32",
        "repeat:float32",
        "golden",
        "eager:bfloat16",
        "honest:float32",
        "honest:bfloat16",
    }
    bf16 = refs["eager:bfloat16"]
    assert bf16["output.y"].dtype == torch.bfloat16
    # integer inputs are not cast: the integer output stays integral and exact
    assert bf16["output.ids"].dtype == torch.int64
    assert torch.equal(bf16["output.ids"], torch.tensor([2, 4]))
    assert refs["golden"]["output.ids"].dtype == torch.int64
    # bf16 is close to, but not the same as, the float32 result
    diff = (bf16["output.y"].float() - refs["eager:float32"]["output.y"]).abs().max()
    assert 0 < float(diff) < 0.5


def test_failing_dtype_becomes_a_note() -> None:
    w = _workload(NoDouble())
    refs, notes = compute_references(w)
    assert "golden" not in refs
    assert set(refs) == {"eager:float32", "repeat:float32"}
    assert notes == ["no golden reference: RuntimeError: no float64 kernel for this op"]


def test_repeat_error_zero_for_deterministic_model() -> None:
    refs, _ = compute_references(_workload(Affine()))
    assert repeat_error(refs, "float32") == 0.0


def test_repeat_error_positive_for_random_model() -> None:
    refs, _ = compute_references(_workload(Noisy()))
    err = repeat_error(refs, "float32")
    assert 0.0 < err < 1.0  # torch.rand draws from [0, 1)
    expected = float((refs["eager:float32"]["output"] - refs["repeat:float32"]["output"]).abs().max())
    assert err == pytest.approx(expected)


def test_repeat_error_known_answers() -> None:
    a = {"o.x": torch.tensor([1.0, 2.0]), "o.y": torch.tensor([0.5])}
    b = {"o.x": torch.tensor([1.0, 2.25]), "o.y": torch.tensor([1.0])}
    assert repeat_error({"eager:float32": a, "repeat:float32": b}, "float32") == 0.5
    # another shape, or a missing output: the runs cannot be compared
    c = {"o.x": torch.tensor([1.0, 2.0, 3.0]), "o.y": torch.tensor([0.5])}
    assert math.isinf(repeat_error({"eager:float32": a, "repeat:float32": c}, "float32"))
    assert math.isinf(repeat_error({"eager:float32": a, "repeat:float32": {"o.x": a["o.x"]}}, "float32"))
    # a NaN that appears in one run only counts as infinitely different
    d = {"o.x": torch.tensor([1.0, float("nan")]), "o.y": torch.tensor([0.5])}
    assert math.isinf(repeat_error({"eager:float32": a, "repeat:float32": d}, "float32"))
    # no references in that dtype: nothing differs
    assert repeat_error({}, "bfloat16") == 0.0


class MaskedLogits(torch.nn.Module):
    """Deterministic, but some outputs are -inf (masked logits) and NaN, identically every call."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x * 2
        out[0, 0] = float("-inf")
        out[1, 1] = float("nan")
        return out


def test_repeat_error_zero_for_identical_non_finite_outputs() -> None:
    same = torch.tensor([float("-inf"), 1.0, float("nan")])
    assert repeat_error({"eager:float32": {"o": same}, "repeat:float32": {"o": same.clone()}}, "float32") == 0.0


def test_deterministic_model_with_masked_outputs_is_deterministic() -> None:
    w = _workload(MaskedLogits())
    refs, _ = compute_references(w)
    assert torch.equal(refs["eager:float32"]["output"].nan_to_num(), refs["repeat:float32"]["output"].nan_to_num())
    assert repeat_error(refs, "float32") == 0.0


def test_compute_references_on_an_arch_workload() -> None:
    w = build_workload("arch:llama?layers=1&hidden=32&seq=4&vocab=64")
    refs, notes = compute_references(w)
    assert notes == []
    assert list(refs["golden"]) == ["output.logits"]
    assert refs["golden"]["output.logits"].shape == (1, 4, 64)
    assert repeat_error(refs, "float32") == 0.0


# -- safetensors files ------------------------------------------------------------------


def _refs() -> dict[str, dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return {
        "eager:float32": {"output.z": torch.randn(2, 3, generator=g), "output.a": torch.randn(4, generator=g)},
        "golden": {
            "output.z": torch.randn(2, 3, generator=g).double(),
            "output.a": torch.randn(4, generator=g).double(),
        },
        "eager:bfloat16": {
            "output.z": torch.randn(2, 3, generator=g).bfloat16(),
            "output.a": torch.randn(4, generator=g).bfloat16(),
        },
        "eager:int": {"output.ids": torch.tensor([[3, 1, 2]]), "output.empty": torch.zeros(0, 5)},
    }


def test_save_load_round_trip(tmp_path: Path) -> None:
    refs = _refs()
    path = tmp_path / "nested" / "dir" / "refs.safetensors"
    save_references(path, refs)
    assert path.is_file()
    loaded = load_references(path)
    assert list(loaded) == list(refs)
    for ref, tensors in refs.items():
        assert list(loaded[ref]) == list(tensors)  # output order kept (not sorted)
        for name, tensor in tensors.items():
            got = loaded[ref][name]
            assert got.dtype == tensor.dtype
            assert got.shape == tensor.shape
            assert torch.equal(got, tensor)


def test_load_some_references(tmp_path: Path) -> None:
    path = tmp_path / "refs.safetensors"
    save_references(path, _refs())
    loaded = load_references(path, ["golden", "eager:bfloat16", "not-there"])
    assert set(loaded) == {"golden", "eager:bfloat16"}
    assert loaded["golden"]["output.z"].dtype == torch.float64
    assert load_references(path, []) == {}


def test_non_contiguous_tensors_saved(tmp_path: Path) -> None:
    t = torch.arange(12.0).reshape(3, 4).t()
    assert not t.is_contiguous()
    path = tmp_path / "refs.safetensors"
    save_references(path, {"eager:float32": {"output": t}})
    assert torch.equal(load_references(path)["eager:float32"]["output"], t)


def test_file_is_safetensors_not_pickle(tmp_path: Path) -> None:
    path = tmp_path / "refs.safetensors"
    refs = _refs()
    save_references(path, refs)
    raw = path.read_bytes()
    assert not raw.startswith(b"\x80")  # pickle protocol marker
    assert not raw.startswith(b"PK")  # torch.save zip archive
    # safetensors layout: u64 little-endian header size, then a JSON header
    (header_len,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + header_len])
    tensor_keys = {k for k in header if k != "__metadata__"}
    assert tensor_keys == {f"{ref}::{name}" for ref, tensors in refs.items() for name in tensors}
    assert header["golden::output.z"]["dtype"] == "F64"
    assert header["eager:bfloat16::output.a"]["dtype"] == "BF16"
    assert header["eager:int::output.ids"]["dtype"] == "I64"
    order = json.loads(header["__metadata__"]["bakeoff.order"])
    assert order == {ref: list(tensors) for ref, tensors in refs.items()}
    # and the official reader agrees
    from safetensors.torch import load_file

    assert torch.equal(load_file(str(path))["eager:float32::output.z"], refs["eager:float32"]["output.z"])


def test_computed_references_survive_a_file(tmp_path: Path) -> None:
    w = _workload(Affine())
    refs, _ = compute_references(w, ["bfloat16"])
    path = tmp_path / "b.safetensors"
    save_references(path, refs)
    loaded = load_references(path)
    assert list(loaded) == list(refs)
    assert repeat_error(loaded, "float32") == 0.0
    for ref in refs:
        for name in refs[ref]:
            assert torch.equal(loaded[ref][name], refs[ref][name])


# -- autocast references (amp targets) --------------------------------------------------


class RefusesAutocast(Affine):
    """Fails under CPU autocast, like a model whose op has no half-precision CPU kernel."""

    def forward(self, x: torch.Tensor, ids: torch.Tensor | None = None) -> dict:
        if torch.is_autocast_enabled("cpu"):
            raise RuntimeError("no bfloat16 CPU kernel for this op")
        return super().forward(x, ids)


def test_autocast_references_run_the_native_dtype_under_cpu_autocast() -> None:
    w = _workload(Affine())
    refs, notes = compute_references(w, amp_dtypes=["bfloat16"])
    assert notes == []
    assert list(refs) == [
        "eager:float32",
        "repeat:float32",
        "golden",
        "amp:bfloat16",
        "honest:float32",
        "honest-amp:bfloat16",
    ]
    amp = refs["amp:bfloat16"]
    assert amp["output.y"].dtype == torch.bfloat16  # the linear layer ran in bf16
    assert amp["output.pair.1"].dtype == torch.float32  # x.mean() is not cast: the input stays float32
    # the same as running it by hand, weights kept in float32
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
        by_hand = w.model(*w.args)["y"]
    assert torch.equal(amp["output.y"], by_hand)
    assert not torch.equal(amp["output.y"].float(), refs["eager:float32"]["output.y"])
    assert not torch.is_autocast_enabled("cpu")  # left off afterwards


def test_autocast_references_per_profile_shape() -> None:
    w = build_workload("arch:llama?layers=1&hidden=32&seq=4&vocab=64")
    refs, notes = compute_references(w, shapes=[(1, 8)], amp_dtypes=["bfloat16"])
    assert notes == []
    assert {"amp:bfloat16", "amp:bfloat16@1x8"} <= set(refs)
    assert refs["amp:bfloat16@1x8"]["output.logits"].shape == (1, 8, 64)


def test_an_autocast_reference_the_cpu_cannot_compute_is_a_note_and_not_comparable(tmp_path: Path) -> None:
    from bakeoff.checks.base import CheckContext
    from bakeoff.checks.correctness import judge
    from bakeoff.runner.job import TargetJob
    from bakeoff.target.spec import parse_target

    w = _workload(RefusesAutocast())
    refs, notes = compute_references(w, amp_dtypes=["bfloat16"])
    assert "amp:bfloat16" not in refs
    assert notes == ["no amp:bfloat16 reference: RuntimeError: no bfloat16 CPU kernel for this op"]
    path = tmp_path / "refs.safetensors"
    save_references(path, refs)
    target = parse_target("cpu?amp=bf16")
    job = TargetJob(workload_spec="py:test:model", target=target, fingerprint="f", baseline_path=str(path))
    outputs = {"": refs["eager:float32"]}
    value = judge(CheckContext(job, target, None, outputs, None, "float32", "float32", "f"))
    assert (value.verdict, value.reason) == ("not_comparable", "the baseline has no amp:bfloat16 reference")
    # the same outputs judged as a plain float32 target pass: the amp target is not judged against float32
    plain = parse_target("cpu")
    job = TargetJob(workload_spec="py:test:model", target=plain, fingerprint="f", baseline_path=str(path))
    assert judge(CheckContext(job, plain, None, outputs, outputs.get, "float32", "float32", "f")).verdict == "pass"


@pytest.mark.parametrize("golden", [True, False])
def test_a_baseline_without_honest_runs_is_extended_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, golden: bool
) -> None:
    # a baseline stored before the honest spread existed (or, without a golden, one that cannot
    # have it): the first is extended once and then reused; the second is reused as it is
    from tests.conftest import py_workload

    import bakeoff.runner.keeping as trial  # where the trial keeps its baseline
    from bakeoff.env import capture_environment
    from bakeoff.store.db import Store

    real = trial.compute_references

    def older(*args: object, **kwargs: object) -> tuple[dict, list]:
        refs, notes = real(*args, **kwargs)
        dropped = ("honest",) if golden else ("honest", "golden")
        return {k: v for k, v in refs.items() if not k.startswith(dropped)}, notes

    store, workload, env = Store.open(tmp_path / "b.db"), build_workload(py_workload("mlp")), capture_environment()
    monkeypatch.setattr(trial, "compute_references", older)
    first, _ = trial.ensure_baseline(store, workload, env, ["float32"])
    monkeypatch.setattr(trial, "compute_references", real)
    second, notes = trial.ensure_baseline(store, workload, env, ["float32"])
    if not golden:
        assert (second.id, notes) == (first.id, [])
        return
    assert notes == ["baseline extended with the honest-spread runs the correctness rule needs"]
    assert "honest:float32" in second.references and second.id != first.id
    third, notes = trial.ensure_baseline(store, workload, env, ["float32"])
    assert (third.id, notes) == (second.id, [])
