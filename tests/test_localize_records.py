"""Localisation is a diagnostic that keeps its evidence: every localisation of a target is a
dated record of its own (a later one that times out or no longer finds the fault never replaces
an earlier origin), a timeout that cannot bound anything is refused before anything runs, and a
localisation that hangs during a trial is the localisation's failure, never the target's.
"""

from __future__ import annotations

import math

import pytest
from tests.conftest import py_workload
from tests.revisit_data import environment, make_run, target_result

import bakeoff
from bakeoff import api
from bakeoff.checks.localization import LocalizationCheck
from bakeoff.errors import SpecError
from bakeoff.results.values import Correctness

#: Its output is 0.05 off with 3 intra-op threads (target ``cpu?threads=3``, an eager target
#: that computes wrong) and when traced by torch.compile (a compiler that computes wrong).
#: With 3 threads it never returns while localisation records it (float64, every module hooked).
HANGS_WHEN_LOCALISED = """
import time

import torch
from torch import nn


class WrongAndHangsWhenRecorded(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        three = torch.get_num_threads() == 3
        if three and self._forward_pre_hooks and self.fc1.weight.dtype == torch.float64:
            while True:
                time.sleep(1)
        out = self.fc2(torch.relu(self.fc1(x)))
        return out + 0.05 if three or torch.compiler.is_compiling() else out


def model():
    return WrongAndHangsWhenRecorded(), (torch.randn(2, 16),)
"""


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> tuple[str, str]:
    """A stored run whose compiled target failed its correctness check: (db, run id)."""
    from bakeoff.store import Store
    from bakeoff.workload.registry import build_workload

    db = str(tmp_path_factory.mktemp("records") / "b.db")
    spec = py_workload("perturbed_when_compiled")
    failed = target_result("cpu+aot_eager", 1.0, correctness=Correctness("fail", "logits: rms error too large"))
    run = make_run(
        "10ca11000001", "2025-01-01T10:00:00+00:00", environment(), (target_result("cpu", 2.0), failed),
        spec=spec, fingerprint=build_workload(spec).fingerprint,
    )  # fmt: skip
    Store.open(db).save_run(run)
    return db, run.run_id


@pytest.mark.parametrize("timeout_s", [0, -1, math.nan, math.inf])
def test_a_timeout_that_bounds_nothing_is_refused_before_anything_runs(stored, monkeypatch, timeout_s):
    from bakeoff.runner import localize

    def ran(*_args, **_kwargs):
        raise AssertionError("a localisation ran")

    monkeypatch.setattr(localize, "_in_worker", ran)
    db, run_id = stored
    with pytest.raises(SpecError, match="positive, finite number of seconds"):
        api.localize(f"{run_id}:cpu+aot_eager", db=db, timeout_s=timeout_s)
    assert bakeoff.show(run_id, db=db).result("cpu+aot_eager").checks.get("localization") is None


@pytest.mark.compile
def test_a_later_localisation_that_does_not_finish_keeps_the_earlier_origin_on_record(stored):
    db, run_id = stored
    ((_, found),) = api.localize(run_id, db=db, timeout_s=300)
    assert found.verdict == "localized", found.reason  # the honest control: a good localisation
    ((_, later),) = api.localize(run_id, db=db, timeout_s=0.001)
    assert later.verdict == "not_comparable" and later.reason == "the localisation did not finish within 0.001 s"

    value = bakeoff.show(run_id, db=db).result("cpu+aot_eager").checks["localization"]
    assert value.reason == later.reason  # the latest is shown ...
    (earlier,) = value.earlier  # ... and the earlier one is still there, whole and dated
    assert (earlier.verdict, earlier.origins) == ("localized", found.origins)
    assert earlier.at < value.at and earlier.earlier == ()
    facts = LocalizationCheck().facts(value, None)
    assert facts[0].startswith("localisation not_comparable: the localisation did not finish within 0.001 s")
    assert facts[-1] == (
        f"earlier localisations (latest first): {earlier.at}: localized, diverges first in "
        f"{found.first.module} ({found.first.cls}, call 0)"
    )


@pytest.mark.isolated
@pytest.mark.compile
def test_a_localisation_that_hangs_in_a_trial_is_its_own_failure_and_the_target_keeps_its_verdict(tmp_path):
    workload = tmp_path / "hangs_when_localised.py"
    workload.write_text(HANGS_WHEN_LOCALISED, encoding="utf-8")
    run = bakeoff.trial(
        f"py:{workload}:model", on="cpu?threads=3,cpu+aot_eager", db=tmp_path / "b.db", timeout_s=20,
        checks=["localization"], min_samples=5, min_seconds=0.0,
    )  # fmt: skip
    hung, compiled = run.result("cpu?threads=3"), run.result("cpu+aot_eager")
    assert hung.status == "ok" and hung.verdict == "fail", hung.error
    assert len(hung.latency.samples_ms) >= 5 and hung.speedup is not None
    assert {"correctness", "placement"} <= set(hung.checks)
    localised = hung.checks["localization"]
    assert (localised.verdict, localised.reason) == (
        "not_comparable", "the localisation did not finish within 20 s"
    )  # fmt: skip
    assert compiled.status == "ok" and compiled.verdict == "fail"  # the control: localised as before
    assert compiled.checks["localization"].verdict == "localized", compiled.checks["localization"].reason
    assert compiled.checks["localization"].first.module == "WrongAndHangsWhenRecorded"
    assert "localization" in run.result("cpu").skipped_checks
    stored = bakeoff.show(run.run_id, db=tmp_path / "b.db").result("cpu?threads=3")
    assert stored.checks["localization"].reason == localised.reason and stored.latency == hung.latency
