"""The files a script wrote: found by what changed since the run began, read without unpickling
(safetensors, npy, npz, JSON), a malformed or refused file listed with why (never a crash); a
target's files compared with the reference's, per file and tensor; and a killed run's temporary
directory removed by the next run."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from bakeoff.checks.script_outputs import compare_captures
from bakeoff.runner.script import ScriptRun
from bakeoff.script.outputs import PICKLE, Outputs, read_output, read_outputs, stamp, written


class Trap:
    """An object whose unpickling creates the directory ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.mkdir, (self.path,))


def test_new_and_changed_files_are_found_and_unchanged_or_skipped_ones_are_not(tmp_path: Path) -> None:
    (tmp_path / "inputs.json").write_text('{"scale": 2}')
    (tmp_path / "kept.txt").write_text("same")
    (tmp_path / "rewritten.json").write_text("[1, 2]")
    (tmp_path / "__pycache__").mkdir()
    before = stamp(tmp_path, {"__pycache__"})
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "new.npy").write_bytes(b"x")
    (tmp_path / "__pycache__" / "mod.pyc").write_bytes(b"x")
    (tmp_path / "bakeoff.db").write_bytes(b"x")
    info = (tmp_path / "rewritten.json").stat()
    (tmp_path / "rewritten.json").write_text("[1, 3]")  # same size, and the same time put back:
    os.utime(tmp_path / "rewritten.json", ns=(info.st_atime_ns, info.st_mtime_ns))  # its hash differs
    found = written(tmp_path, before, {"__pycache__"}, exclude={"bakeoff.db"})
    assert found == ["out/new.npy", "rewritten.json"]


def test_each_format_is_read_as_plain_values(tmp_path: Path) -> None:
    save_file(
        {"w": torch.arange(6, dtype=torch.bfloat16).reshape(2, 3), "b": torch.ones(2)}, tmp_path / "m.safetensors"
    )
    np.save(tmp_path / "p.npy", np.array([[1.5, 2.5]], dtype=">f4"))  # big-endian: read as it is
    np.savez(tmp_path / "a.npz", x=np.arange(3), c=np.array([1 + 2j]), flags=np.array([True, False]))
    (tmp_path / "m.json").write_text(
        json.dumps({"loss": 0.5, "hist": [[1, 2.5], [3, 4]], "ragged": [[1], [2, 3]], "tag": "t"})
    )
    weights = read_output(tmp_path / "m.safetensors")
    assert weights["w"].dtype == torch.bfloat16 and weights["w"].shape == (2, 3) and weights["b"].tolist() == [1.0, 1.0]
    preds = read_output(tmp_path / "p.npy")
    assert preds.dtype == torch.float32 and preds.tolist() == [[1.5, 2.5]]
    arrays = read_output(tmp_path / "a.npz")
    assert arrays["x"].tolist() == [0, 1, 2] and arrays["c"].tolist() == [[1.0, 2.0]]
    assert arrays["flags"].dtype == torch.bool
    doc = read_output(tmp_path / "m.json")
    assert doc["loss"] == 0.5 and doc["tag"] == "t"
    assert doc["hist"].dtype == torch.float32 and doc["hist"].tolist() == [[1.0, 2.5], [3.0, 4.0]]
    assert doc["ragged"][0].tolist() == [1] and doc["ragged"][1].dtype == torch.int64


def test_malformed_and_refused_files_are_listed_with_why_never_a_crash(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text('{"loss": 0.5,')
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    np.savez(tmp_path / "mixed.npz", ok=np.ones(2), objects=np.array([None], dtype=object))
    save_file({"w": torch.ones(64)}, tmp_path / "whole.safetensors")
    data = (tmp_path / "whole.safetensors").read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(data[: len(data) - 40])
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "big.npy").write_bytes(b"\x93NUMPY" + b"0" * 2000)
    os.symlink(tmp_path / "whole.safetensors", tmp_path / "link.safetensors")
    os.mkfifo(tmp_path / "pipe.json")  # opening it would block
    names = [p.name for p in tmp_path.iterdir()]
    read = read_outputs(tmp_path, names, max_file_bytes=1000)
    assert set(read.values) == {"whole.safetensors"} and read.paths() == set(names)
    why = read.skipped
    assert why["bad.json"].startswith("unreadable: not valid JSON")
    assert why["objects.npy"] == "unreadable: an array of Python objects (a pickle) is never loaded"
    assert why["mixed.npz"] == "unreadable: objects is an array of Python objects (a pickle), never loaded"
    assert why["cut.safetensors"].startswith("unreadable: ")
    assert why["notes.txt"] == "not a format bakeoff reads"
    assert why["big.npy"] == f"over {1000 / 2**20:g} MiB, not read"
    assert why["link.safetensors"] == "a symbolic link, not followed"
    assert why["pipe.json"] == "not a regular file"
    # the total cap: files past it, in path order, are listed
    capped = read_outputs(tmp_path, ["whole.safetensors", "bad.json"], max_total_bytes=len(data))
    assert "past the" in capped.skipped["whole.safetensors"] and "bad.json" in capped.skipped


def test_a_pickle_is_listed_and_never_loaded(tmp_path: Path) -> None:
    loaded = tmp_path / "loaded"
    trap = pickle.dumps(Trap(str(loaded)))
    for name in ("state.pkl", "model.pt", "weights.pth", "shard.bin"):
        (tmp_path / name).write_bytes(trap)
    (tmp_path / "disguised.npy").write_bytes(trap)  # a pickle under a name bakeoff reads
    read = read_outputs(tmp_path, ["state.pkl", "model.pt", "weights.pth", "shard.bin", "disguised.npy"])
    assert not read.values and all(read.skipped[n] == PICKLE for n in ("state.pkl", "model.pt", "shard.bin"))
    assert read.skipped["disguised.npy"] == "unreadable: not a .npy file"
    assert not loaded.exists()
    pickle.loads(trap)  # the control: loading it has the side effect
    assert loaded.is_dir()


def _run(captures: dict | None = None, values: dict | None = None, skipped: dict | None = None) -> ScriptRun:
    return ScriptRun("ok", 1.0, {}, captures or {}, outputs=Outputs(values or {}, skipped or {}))


def test_files_are_compared_per_file_and_tensor_and_a_missing_or_unreadable_one_fails() -> None:
    weights = {"weight": torch.ones(2, 3), "bias": torch.zeros(3)}
    reference = _run(values={"out/w.safetensors": weights, "out/m.json": {"loss": 0.5, "tag": "a"}})
    same = _run(
        values={
            "out/w.safetensors": {k: v.clone() for k, v in weights.items()},
            "out/m.json": {"loss": 0.5, "tag": "a"},
        }
    )
    judged = compare_captures(same, reference, "ref")
    assert judged.verdict == "pass", judged.reason
    assert {o.name for o in judged.outputs} == {
        "file:out/w.safetensors:weight",
        "file:out/w.safetensors:bias",
        "file:out/m.json:loss",
    }
    # the seeded fault: one value of one tensor of one file
    bad = {"weight": torch.ones(2, 3), "bias": torch.zeros(3)}
    bad["weight"][1, 2] += 0.01
    wrong = compare_captures(
        _run(values={"out/w.safetensors": bad, "out/m.json": {"loss": 0.5, "tag": "a"}}), reference, "ref"
    )
    assert wrong.verdict == "fail" and [o.name for o in wrong.outputs if not o.passed] == [
        "file:out/w.safetensors:weight"
    ]
    assert "file:out/w.safetensors:weight: max abs error 0.01" in wrong.reason
    # a string differs
    tag = compare_captures(
        _run(values={"out/w.safetensors": weights, "out/m.json": {"loss": 0.5, "tag": "b"}}), reference, "ref"
    )
    assert tag.verdict == "fail" and "file:out/m.json:tag" in tag.reason
    # a file the target did not write; one it wrote unreadable
    gone = compare_captures(_run(values={"out/m.json": {"loss": 0.5, "tag": "a"}}), reference, "ref")
    assert gone.verdict == "fail" and "missing output file out/w.safetensors" in gone.reason
    cut = _run(values={"out/m.json": {"loss": 0.5, "tag": "a"}}, skipped={"out/w.safetensors": "unreadable: truncated"})
    broken = compare_captures(cut, reference, "ref")
    assert broken.verdict == "fail" and "output file out/w.safetensors unreadable: truncated" in broken.reason
    # a pickle both wrote is not compared, and fails nothing
    pickles = {"out/state.pkl": PICKLE}
    both = compare_captures(
        _run(values=same.outputs.values, skipped=pickles), _run(values=reference.outputs.values, skipped=pickles), "ref"
    )
    assert both.verdict == "pass"
    # nothing to compare
    nothing = compare_captures(_run(skipped=pickles), _run(skipped=pickles), "ref")
    assert nothing.verdict == "not_comparable" and "wrote no file it reads" in nothing.reason


def test_no_output_files_are_counted_when_the_run_wrote_none(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text("[1]")
    before = stamp(tmp_path)
    assert written(tmp_path, before) == [] and read_outputs(tmp_path, []) == Outputs()


@pytest.mark.parametrize("text", ["[1, 2", "\xff", ""])
def test_a_malformed_json_is_a_value_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "m.json"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(ValueError, match=r"not valid JSON|not UTF-8"):
        read_output(path)
