"""Where a service's work ran: ``bakeoff serve``'s placement audit, on a start of its own.

The tests' service (tests/fixtures/serve_app.py) computes each answer with torch on ``cuda`` (as
a team's service names it, remapped to the target) in a worker thread, as a plain ``def``
endpoint runs: the remap and the audit must both reach that thread. One run, two targets of the
same device: on ``emu`` the service is clean (the control: on the device); on ``emu:0`` it keeps
its weight table on the host and copies it to the device on every request (the seeded fault:
the same answers, work left on the host). The reference runs on the host: nothing to place.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.conftest import FIXTURES

from bakeoff import api
from bakeoff.verdicts.standing import standing_of

APP = (
    f"{{python}} {FIXTURES / 'serve_app.py'} --port {{port}} --device {{device}} --service-ms 1 "
    "--torch-device cuda --in-thread"
)


@pytest.fixture(autouse=True)
def _emu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BAKEOFF_EMU", "1")


def test_work_left_on_the_host_in_a_handler_thread_is_caught_and_the_clean_service_is_on_device(
    tmp_path: Path,
) -> None:
    traffic = tmp_path / "requests.jsonl"
    traffic.write_text("".join(json.dumps({"i": k}) + "\n" for k in range(20)))
    run = api.serve_service(
        APP + " --fault-on emu:0 --host-table",
        on="emu,emu:0",
        db=tmp_path / "b.db",
        traffic=str(traffic),
        rate=20.0,
        duration_s=1.0,
        warmup=4,
        path="/tensor",
        start_timeout_s=60.0,
        cold_s=0.0,
    )
    reference, clean, faulty = run.results
    assert [r.status for r in run.results] == ["ok", "ok", "ok"], [r.error for r in run.results]
    # the remap reached the worker thread: every answer came back, the same as the reference's
    assert clean.correctness.verdict == "pass" and faulty.correctness.verdict == "pass", faulty.correctness.reason
    assert reference.placement.verdict == "not_applicable"
    assert clean.placement.verdict == "on_device", clean.placement.explanation
    assert clean.placement.ops_on_device > 0 and not clean.placement.host_state_copies
    assert faulty.placement.verdict == "left_on_host", faulty.placement.explanation
    (copied,) = faulty.placement.host_state_copies
    assert copied["count"] >= 3 and copied["bytes"] == copied["count"] * 64 * 4  # 64 floats, each request
    assert "serve_app.py" in copied["module"] and "repeated copies" in faulty.placement.explanation
    assert "audited start's" not in clean.placement.scope and "warm-up requests" in clean.placement.scope
    assert any("placement audited on a start of its own over 4 of 4" in note for note in clean.notes), clean.notes
    # the decision reads it: the fault is a miss, the control's placement raises no doubt
    assert any("work left the device" in miss for miss in standing_of(faulty).misses)
    assert not any("placement" in doubt for doubt in standing_of(clean).doubts), standing_of(clean).doubts
