"""``bakeoff serve`` end to end on the tests' service (tests/fixtures/serve_app.py, no torch): the
reference on cpu and the target on emu, each started, warmed up, sent the same traffic, stopped,
and the run stored as a ``service:`` workload.

Seeded faults on the target only (the fixture's ``--fault-on emu``): every value 1% off and
every 25th answer a 500 (the responses fail, naming the requests; the error rate and goodput
show it), and a crash two seconds into the traffic (the target is an error with its fault, its
figures up to then kept). The clean control: the same service on both sides passes and is judged.

Whether the client kept its schedule depends on this machine's load: a run whose dispatch lag
was too large is not judged. The assertions hold either way, each branch checked for what it
must say: never a met objective from a run that could not be judged.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from tests.conftest import FIXTURES, cli_in_process

from bakeoff import api
from bakeoff.analysis.requirements import requirement_state
from bakeoff.store.db import Store

APP = f"{{python}} {FIXTURES / 'serve_app.py'} --port {{port}} --device {{device}} --service-ms 5"
RATE, SECONDS = 25.0, 5.0


@pytest.fixture(autouse=True)
def _emu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BAKEOFF_EMU", "1")


def _serve(tmp_path: Path, extra: str = "", **settings):
    traffic = tmp_path / "requests.jsonl"
    traffic.write_text("".join(json.dumps({"i": k}) + "\n" for k in range(40)))
    options = {"traffic": str(traffic), "rate": RATE, "duration_s": SECONDS, "warmup": 3, "min_duration_s": 4.0,
               "path": "/value", "slo": ("p90<=500ms",), "start_timeout_s": 60.0, "cold_s": 1.0,
               **settings}  # fmt: skip
    return api.serve_service(APP + extra, on="emu", db=tmp_path / "b.db", **options)


def _judged_consistently(result) -> dict:
    """The service facts of ``result``, after checking its verdicts agree with its validity."""
    (scenario,) = result.scenarios
    judgement = scenario.facts["judgement"]
    states = [requirement_state(r) for r in result.requirements]
    if not judgement["valid"]:  # too much dispatch lag on a loaded machine: nothing may be met
        assert states == ["not measured"] * len(states), states
        assert all("not judged" in r["reason"] for r in result.requirements)
        assert any("did not keep its schedule" in why for why in judgement["invalid_reasons"]), judgement
    return scenario.facts


def test_the_same_service_on_both_sides_passes_and_is_judged_from_the_schedule(tmp_path: Path, capsys) -> None:
    run = _serve(tmp_path)
    reference, emu = run.results
    assert run.workload["kind"] == "service" and run.workload["spec"].startswith("service:{python} ")
    assert reference.is_reference and reference.status == "ok" and emu.status == "ok", (reference.error, emu.error)
    facts = _judged_consistently(emu)
    count = int(RATE * SECONDS)
    assert facts["requests"] == count and facts["warmed"] == 3 and facts["lifecycle"]["ready_s"] > 0
    assert len(emu.load_average) == 2  # one-minute load before and after the traffic, as a trial keeps it
    assert emu.correctness.verdict == "pass", emu.correctness.reason
    assert f"all {count} responses match the reference's" in emu.correctness.reason
    assert len(emu.latency.samples_ms) == count and min(emu.latency.samples_ms) >= 5.0  # the service's own 5 ms
    (objective,) = emu.requirements  # p90 of ~10 ms against 500 ms: never "not met"
    assert requirement_state(objective) != "not met", objective
    if facts["judgement"]["valid"] and objective["high"] is not None:  # bounded: its whole interval is under
        assert requirement_state(objective) == "met", objective
    # stored, and shown from the store as a user reads it
    stored = Store.open(tmp_path / "b.db").get_run(run.run_id)
    assert stored.results[1].scenarios[0].facts["requests"] == count
    code, out, _ = cli_in_process(capsys, "show", run.run_id, "--db", str(tmp_path / "b.db"), "--verbose")
    assert code == 0 and "the service started once per target" in out and "from the schedule" in out


def test_a_target_whose_values_are_one_percent_off_and_some_answers_fail_is_caught(tmp_path: Path) -> None:
    run = _serve(tmp_path, " --fault-on emu --fault-fail-every 25", slo=("p90<=500ms", "error_rate<=1%"))
    reference, emu = run.results
    assert reference.status == "ok" and emu.status == "ok"
    assert emu.correctness.verdict == "fail"
    assert "responses differ from the reference's" in emu.correctness.reason
    assert "$.value" in emu.correctness.reason and "1.0% off" in emu.correctness.reason, emu.correctness.reason
    target, control = _judged_consistently(emu)["judgement"], _judged_consistently(reference)["judgement"]
    assert target["errors"] == {"http": 5} and control["errors"] == {}  # 125 answers, every 25th a 500
    assert abs(target["error_rate"] - 0.04) < 1e-9 and target["goodput"] < control["goodput"]
    if target["valid"]:
        states = {r["text"]: requirement_state(r) for r in emu.requirements}
        assert states["error_rate<=1%"] in ("not met", "not conclusive"), states  # 4%: never met


def test_a_target_that_crashes_under_load_is_an_error_with_its_figures_kept(tmp_path: Path) -> None:
    run = _serve(tmp_path, " --fault-on emu --fault-crash-after-s 2", duration_s=4.0, min_duration_s=2.0, cold_s=0.0)
    reference, emu = run.results
    assert reference.status == "ok", reference.error  # the control: the same command, clean
    assert emu.status == "error" and emu.error.category == "crash" and emu.error.phase == "serve", emu.error
    assert "seeded crash while serving" in emu.error.traceback
    facts = emu.scenarios[0].facts
    assert facts["judgement"]["errors"].get("connection", 0) > 0  # the requests after the crash
    assert 0 < len(emu.latency.samples_ms) < int(RATE * 4.0)  # those answered before it are kept
    assert any("figures up to the fault are kept" in note for note in emu.notes)
    # rerun repeats the stored command and settings: the same crash, the same workload
    (again,) = api.rerun(run.run_id, db=tmp_path / "b.db")
    assert again.workload["fingerprint"] == run.workload["fingerprint"] and again.settings == run.settings
    assert [r.status for r in again.results] == ["ok", "error"] and again.results[1].error.category == "crash"


def test_the_search_brackets_a_single_servers_capacity_and_the_decision_costs_it_at_that_rate(
    tmp_path: Path, capsys
) -> None:
    # one request at a time, 10 ms each: at most 100/s, whatever the machine; 25/s is a light load,
    # long enough (150 requests) to decide, so the measured run is the search's first step
    run = _serve(
        tmp_path, " --serial --service-ms 10", rate=25.0, duration_s=6.0, min_duration_s=2.0, slo=("p90<=200ms",),
        search_steps=3, peak=100.0, headroom=0.25, prices=("emu=$2/h", "cpu=$1/h"), audit=False,
    )  # fmt: skip
    reference, emu = run.results
    # the control: every step's answers are compared with the reference's, and the same service passes
    stepped = emu.scenarios[0].facts["responses_elsewhere"]
    assert emu.correctness.verdict == "pass" and all(e["differing"] == 0 for e in stepped), emu.correctness.reason
    assert sum(e["traffic"].startswith("the search's step at ") for e in stepped) == len(stepped) - 1  # and cold
    for result in (reference, emu):
        assert result.status == "ok", result.error
        search = result.scenarios[0].facts["search"]
        steps = search["steps"]
        assert steps and steps[0]["rate"] == 25.0 and len(steps) <= 3
        for step in steps:  # every decided step on the right side of the capacity
            if step["verdict"] == "met":
                assert step["rate"] < 100.0, step
            if step["verdict"] == "not_met":
                assert step["rate"] > 25.0, step
        low, high = search["low"], search["high"]
        capacity = result.scenarios[0].facts["capacity"]
        if low is None:
            assert capacity is None and any("no replica count is known" in n for n in result.notes)
            continue
        assert low < 100.0 and (high is None or high > low)
        assert capacity["most"] == math.ceil(125.0 / low)  # 100/s with 25% headroom
        assert any(note.startswith("highest rate within the objectives: ") for note in result.notes)
        assert any(note.startswith("capacity for a peak of 100/s with 25% headroom") for note in result.notes)
    code, out, _ = cli_in_process(capsys, "show", run.run_id, "--db", str(tmp_path / "b.db"))
    assert code == 0 and "highest rate within the objectives" in out
    if reference.scenarios[0].facts["search"]["low"] is not None:  # priced at the searched rate
        assert "searched service rate x 1" in out


def test_wrong_answers_of_a_fresh_replica_and_of_a_later_search_step_fail_the_target(tmp_path: Path) -> None:
    # on emu only: the first 5 answers (the cold replica's 25) and every answer from the 154th
    # (after 25 cold, 3 warm-up and 125 measured requests: the search's next step) are 1% off
    run = _serve(tmp_path, " --fault-on emu --fault-wrong-first 5 --fault-wrong-from 154", search=True, search_steps=2,
                 audit=False)  # fmt: skip
    reference, emu = run.results
    assert reference.status == "ok" and emu.status == "ok", (reference.error, emu.error)
    facts = emu.scenarios[0].facts
    assert facts["responses"]["differing"] == 0  # the measured traffic alone would pass
    elsewhere = {entry["traffic"]: entry for entry in facts["responses_elsewhere"]}
    cold = elsewhere.pop("the cold replica's traffic")
    assert (cold["compared"], cold["differing"]) == (25, 4)  # the first of the 5 is sin(0): 0, however scaled
    # every answer of a search step is off but sin(0)'s (one body in the traffic's 40)
    assert elsewhere and all(e["differing"] >= 0.9 * e["compared"] > 0 for e in elsewhere.values()), [
        (k, e["compared"], e["differing"], e["not_compared_reference"], e["not_compared_target"])
        for k, e in elsewhere.items()
    ]
    assert emu.correctness.verdict == "fail"
    assert "in the cold replica's traffic, 4 of 25 responses differ from the reference's: request 1 at $.value" in (
        emu.correctness.reason
    )
    assert "in the search's step at " in emu.correctness.reason
    assert reference.scenarios[0].facts["responses_elsewhere"] == []  # the reference is what they are compared with


def test_a_service_that_compiles_each_new_shape_shows_it_in_its_cold_replica_and_not_once_warm(tmp_path: Path) -> None:
    # on emu only: the first request of each of 8 shapes blocks the process 300 ms; p90 <= 100 ms
    run = _serve(tmp_path, " --fault-on emu --fault-compile-ms 300", duration_s=4.0, cold_s=2.0, slo=("p90<=100ms",),
                 audit=False)  # fmt: skip
    reference, emu = run.results
    control, fault = (r.scenarios[0].facts["cold"] for r in (reference, emu))
    assert control["requests"] == fault["requests"] == int(RATE * 2.0)
    assert fault["first_ms"] >= 300.0 and fault["attainment"] < control["attainment"], (fault, control)
    assert fault["high"] < 1.0  # requests stuck behind a compile: shown to miss, with its interval
    # the clean control has no stall. Its own figures are this machine's: in a full suite on two
    # busy cores its fresh replica's first request took 486 ms and 72% of its first 2 s met p90
    # (9.5 ms and 100% on a quiet machine), so it is judged against the fault, whose replica has
    # the same cold start and eight 300 ms stalls on top (2.4 s to its first answer, 0% met here)
    assert control["first_ms"] < fault["first_ms"] and control["attainment"] >= fault["attainment"] + 0.3, (
        control,
        fault,
    )
    # once warm, every shape has compiled: the measured traffic is as the reference's
    warm = [r.scenarios[0].facts["judgement"]["goodput_share"] for r in (reference, emu)]
    assert warm[1] >= min(0.9, warm[0] - 0.1), warm
    (said,) = [n for n in emu.notes if n.startswith("cold replica: ")]
    assert f"{fault['attainment'] * 100:.1f}% of the 50 requests of its first 2 s within every objective" in said
    assert "once warm" in said and "its first request took" in said
    # its responses are 1% off too (the fixture's --fault-on): the remedy names no trial-only command
    from bakeoff.verdicts.remedies import what_it_takes

    (wrong,) = [item for item in what_it_takes(run)["emu"] if item.kind == "wrong"]
    assert "bakeoff localize" not in wrong.change and wrong.change.startswith("find where the target diverges")


def test_a_streamed_answers_slow_first_token_is_judged_and_its_per_token_time_measured(tmp_path: Path) -> None:
    # 8 events each: the first after 20 ms (emu: 220 ms, a slow prefill), then one every 10 ms
    run = _serve(tmp_path, " --fault-on emu --fault-first-ms 200", path="/stream", slo=("ttft_p90<=100ms",))
    reference, emu = run.results
    assert emu.correctness.verdict == "pass", emu.correctness.reason  # the same events, later
    for result, first in ((reference, 20.0), (emu, 220.0)):
        (scenario,) = result.scenarios
        ttft, tpot = sorted(scenario.series["ttft"]), sorted(scenario.series["tpot"])
        assert len(ttft) == len(tpot) == int(RATE * SECONDS)
        assert first <= ttft[len(ttft) // 2] < first + 150.0, (result.target.spec, ttft[len(ttft) // 2])
        assert 9.0 <= tpot[len(tpot) // 2] < 60.0  # asyncio.sleep(10 ms) per event, and the client's reading
        # the whole answer takes the first token and 7 more after it
        assert min(scenario.series["latency"]) >= first + 7 * 10.0 - 1.0
        judged = {q["anchor"] for q in scenario.facts["judgement"]["latency"]}
        assert {"ttft", "tpot"} <= judged
    facts = _judged_consistently(emu)
    (objective,) = emu.requirements
    if facts["judgement"]["valid"]:
        assert requirement_state(objective) == "not met", objective  # p90 about 220 ms against 100 ms
    assert requirement_state(reference.requirements[0]) != "not met", reference.requirements[0]
