"""An imported or tampered baseline never becomes a reference: tensors are looked for only inside
the store's own artifacts, under a name derived from the baseline's id, and verified by content hash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file
from tests.conftest import py_workload

import bakeoff
from bakeoff.errors import StoreError
from bakeoff.store.db import Store

FAST = {"isolate": False, "min_samples": 3, "min_seconds": 0.0}


def _doubled(source: Path, target: Path) -> None:
    tensors = load_file(str(source))
    save_file({k: v * 2 for k, v in tensors.items()}, str(target))


def _notes(run) -> list[str]:
    return run.workload["notes"]


def test_an_imported_baseline_path_is_never_read(tmp_path):
    laptop, team = tmp_path / "laptop.db", tmp_path / "team.db"
    first = bakeoff.trial(py_workload("mlp"), on="cpu", db=laptop, **FAST)
    info = Store.open(str(laptop)).latest_baseline(first.workload["spec"])
    exported = tmp_path / "out.jsonl"
    bakeoff.export_runs(exported, db=laptop)
    text = exported.read_text()
    assert str(tmp_path) not in text  # no path of the machine that wrote it
    # a crafted export: the baseline record points at a planted file with wrong references
    planted = tmp_path / "planted.safetensors"
    _doubled(Store.open(str(laptop)).baseline_file(info), planted)
    lines = [json.loads(line) for line in text.splitlines()]
    for record in lines:
        if record.get("kind") == "baseline":
            record["baseline"]["path"] = str(planted)
    exported.write_text("".join(json.dumps(r) + "\n" for r in lines))
    bakeoff.import_runs(exported, db=team)
    again = bakeoff.trial(py_workload("mlp"), on="cpu", db=team, **FAST)
    assert any("has no tensor file here; recomputed" in note for note in _notes(again))
    assert again.result("cpu").verdict == "pass"  # the planted (doubled) references were not used


def test_a_tampered_tensor_file_is_recomputed(tmp_path):
    db = tmp_path / "b.db"
    first = bakeoff.trial(py_workload("mlp"), on="cpu", db=db, **FAST)
    store = Store.open(str(db))
    info = store.latest_baseline(first.workload["spec"])
    assert len(info.sha256) == 64
    kept = bakeoff.trial(py_workload("mlp"), on="cpu", db=db, **FAST)
    assert kept.baseline_id == first.baseline_id and not any("recomputed" in n for n in _notes(kept))
    path = store.baseline_file(info)
    _doubled(path, tmp_path / "doubled.safetensors")
    path.write_bytes((tmp_path / "doubled.safetensors").read_bytes())
    again = bakeoff.trial(py_workload("mlp"), on="cpu", db=db, **FAST)
    assert f"stored baseline {info.id} tensor file does not match its content hash; recomputed" in _notes(again)
    assert again.baseline_id != first.baseline_id and again.result("cpu").verdict == "pass"


@pytest.mark.parametrize("crafted", ["../../../etc", "a/b", "x" * 65, ""])
def test_an_import_naming_a_baseline_outside_the_store_is_refused_whole(crafted, tmp_path):
    laptop, team = tmp_path / "laptop.db", tmp_path / "team.db"
    bakeoff.trial(py_workload("mlp"), on="cpu", db=laptop, **FAST)
    exported = tmp_path / "out.jsonl"
    bakeoff.export_runs(exported, db=laptop)
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    number = next(i for i, r in enumerate(lines, 1) if r.get("kind") == "baseline")
    lines[number - 1]["baseline"]["id"] = crafted
    exported.write_text("".join(json.dumps(r) + "\n" for r in lines))
    with pytest.raises(StoreError, match=rf"out.jsonl, line {number}: baseline id .* is not a bakeoff id"):
        bakeoff.import_runs(exported, db=team)
    assert not team.exists()  # the file was refused before a new knowledge base was created


def test_a_tensor_file_that_links_outside_the_store_is_not_used(tmp_path):
    db = tmp_path / "b.db"
    first = bakeoff.trial(py_workload("mlp"), on="cpu", db=db, **FAST)
    store = Store.open(str(db))
    info = store.latest_baseline(first.workload["spec"])
    path = store.baseline_file(info)
    outside = tmp_path / "outside.safetensors"
    outside.write_bytes(path.read_bytes())  # even the same content: the store must not reach out of itself
    path.unlink()
    path.symlink_to(outside)
    again = bakeoff.trial(py_workload("mlp"), on="cpu", db=db, **FAST)
    assert f"stored baseline {info.id} tensor file links outside the artifact store; recomputed" in _notes(again)
