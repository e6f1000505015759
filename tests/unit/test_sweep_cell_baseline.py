"""A sweep cell reuses the baseline the driver already keeps for its workload instead of computing
another, and judges the targets against it; a kept baseline whose bytes are not the ones recorded,
or that is stale for the workload the cell builds, is not used: the cell computes its own.

The cells run in this process (targets in-process, one call each), the driver's knowledge base is
a real SQLite file.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from bakeoff.hashing import file_sha256
from bakeoff.results.values import BaselineInfo, RunResult
from bakeoff.store.db import Store
from bakeoff.sweep.cell import kept_baseline, run_cell, store_baseline

SPEC = f"py:{Path(__file__).parents[1] / 'fixtures' / 'sweep_models.py'}:fine"
OPTIONS = {"isolate": False, "min_samples": 1, "min_seconds": 0.0, "timeout_s": 600.0}


def _cell(kept: dict[str, Any] | None) -> dict[str, Any]:
    cell = run_cell(SPEC, ["cpu?threads=1"], OPTIONS, [], {"cwd": os.getcwd(), "env": {}}, kept=kept)
    next(cell)  # where it runs
    return next(cell)


def _verdict(out: dict[str, Any]) -> str:
    run = RunResult.from_dict(out["run"])
    (target,) = [r for r in run.results if not r.is_reference]
    return target.correctness.verdict


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, BaselineInfo]:
    store = Store.open(tmp_path_factory.mktemp("driver") / "kb.db")
    first = _cell(None)  # nothing kept yet: the cell computes the baseline and sends it back
    assert first["error"] is None and first["baseline"] is not None
    assert store_baseline(store, first) is None
    return store, store.latest_baseline(SPEC)


def test_a_cell_reuses_the_drivers_baseline_and_stores_no_other(driver) -> None:
    store, kept = driver
    again = _cell(kept_baseline(store, SPEC))
    assert again["error"] is None and again["baseline"] is None  # nothing new to store
    assert RunResult.from_dict(again["run"]).baseline_id == kept.id
    assert store_baseline(store, again) is None and store.latest_baseline(SPEC) == kept
    assert _verdict(again) == "pass"  # the honest target, judged against the driver's references


def test_the_drivers_references_are_what_the_cell_judges_against(driver, tmp_path) -> None:
    """Seeded fault: the kept references are off by a visible amount (recorded with their own
    hash, as a baseline of other weights would be): the same honest target now fails."""
    store, kept = driver
    path = tmp_path / "off.safetensors"
    with safe_open(store.baseline_file(kept), "pt") as kept_file:
        metadata, tensors = kept_file.metadata(), {name: kept_file.get_tensor(name) for name in kept_file.keys()}
    save_file({name: t + 0.5 if t.is_floating_point() else t for name, t in tensors.items()}, path, metadata=metadata)
    off = dataclasses.replace(kept, sha256=file_sha256(path))
    out = _cell({"baseline": off.to_dict(), "tensors": path.read_bytes()})
    assert out["baseline"] is None and RunResult.from_dict(out["run"]).baseline_id == kept.id
    assert _verdict(out) == "fail"


@pytest.mark.parametrize(
    "fault", ["bytes changed in transit", "stale: another fingerprint", "another workload's baseline"]
)
def test_a_kept_baseline_the_cell_cannot_trust_is_replaced_by_its_own(driver, fault) -> None:
    store, kept = driver
    given = kept_baseline(store, SPEC)
    if fault == "bytes changed in transit":
        given["tensors"] = given["tensors"][:-8] + b"\0" * 8
    elif fault == "stale: another fingerprint":
        given["baseline"] = {**given["baseline"], "fingerprint": "0" * 16}
    else:
        given["baseline"] = {**given["baseline"], "workload_spec": SPEC + "?width=4"}
    out = _cell(given)
    assert out["error"] is None and out["baseline"] is not None and out["baseline"]["id"] != kept.id
    assert RunResult.from_dict(out["run"]).baseline_id == out["baseline"]["id"]
    assert _verdict(out) == "pass"
    assert torch.is_tensor(next(iter(load_file(store.baseline_file(kept)).values())))  # the kept one is untouched
