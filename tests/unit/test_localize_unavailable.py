"""``bakeoff localize`` of a stored target whose device this process cannot run is refused in
one line before anything runs or is stored: a record of the failure to run would stand in front
of the localisations that found the origin. The control, a target that can run here, is
localised (its worker is reached)."""

from __future__ import annotations

import pytest
from tests.revisit_data import environment, make_run, target_result

import bakeoff
from bakeoff import api
from bakeoff.errors import SpecError
from bakeoff.results.values import Correctness


@pytest.fixture
def stored(tmp_path, monkeypatch):
    from bakeoff.runner import localize
    from bakeoff.store import Store

    reached: list[str] = []

    def worker(job, *_args, **_kwargs):
        reached.append(job.target.spec)
        return None  # nothing to localise: nothing stored

    monkeypatch.setattr(localize, "_in_worker", worker)
    wrong = Correctness("fail", "logits: rms error too large")
    results = (target_result("cpu", 2.0), target_result("xpu", 1.0, correctness=wrong),
               target_result("cpu+aot_eager", 1.0, correctness=wrong))  # fmt: skip
    run = make_run("10ca11000002", "2025-01-01T10:00:00+00:00", environment(), results)
    db = str(tmp_path / "b.db")
    Store.open(db).save_run(run)
    return db, run.run_id, reached


def test_a_target_whose_device_is_not_here_is_refused_and_nothing_is_stored(stored):
    db, run_id, reached = stored
    for named in (f"{run_id}:xpu", run_id):  # named, or among every failed target
        with pytest.raises(SpecError, match=r"target xpu of run 10ca11000002 cannot run here: no xpu device") as caught:
            api.localize(named, db=db)
        assert "localise it where its device is" in caught.value.hint
    assert "name another" in caught.value.hint  # cpu+aot_eager could be localised here
    assert reached == []
    assert bakeoff.show(run_id, db=db).result("xpu").checks.get("localization") is None
    api.localize(f"{run_id}:cpu+aot_eager", db=db)  # the control runs
    assert reached == ["cpu+aot_eager"]


def test_a_localisation_after_the_run_that_finds_nothing_says_so_in_its_reason(stored, monkeypatch):
    from bakeoff.checks.localization import Localization
    from bakeoff.runner import localize

    db, run_id, _ = stored
    monkeypatch.setattr(localize, "_in_worker", lambda *_a, **_k: Localization("not_found", method="hooks").to_dict())
    api.localize(f"{run_id}:cpu+aot_eager", db=db)
    kept = bakeoff.show(run_id, db=db).result("cpu+aot_eager").checks["localization"]
    assert kept.reason == "no module call diverged (localised after the run, here)"
