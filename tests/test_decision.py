"""The decision a trial ends with, end to end: a wrong target is never recommended, however it
is priced; a requirement nobody meets leaves no recommendation; prices change the basis."""

from __future__ import annotations

import json
import subprocess

from tests.conftest import bakeoff_cli, cli_trial, py_workload

import bakeoff


def show(*args: str, tmp_path) -> subprocess.CompletedProcess[str]:
    return bakeoff_cli("show", *args, "--db", str(tmp_path / "b.db"), timeout=300, cwd=tmp_path)


def test_a_wrong_target_is_ruled_out_and_the_correct_one_recommended_by_cost(tmp_path):
    """float16 overflows to inf on this model (the seeded fault): eager float16 does too, so the
    backend's correctness against its own dtype passes, but the outputs are not what the
    float32 service computes. The float32 reference is the control. Both run on the CPU, so
    one device price prices both."""
    ran = cli_trial(py_workload("overflows_in_half"), "cpu,cpu?dtype=fp16", tmp_path, "--price", "cpu=0.36/h")
    assert ran.returncode == 0, ran.stderr
    run = json.loads(ran.stdout)
    decision = run["decision"]
    assert (decision["outcome"], decision["target"], decision["basis"]) == ("recommended", "cpu", "cost")
    assert run["settings"]["prices"] == ["cpu=0.36/h"]
    assert "cpu?dtype=float16 ruled out by outputs not finite in float16 where eager:float32 is finite" in " ".join(
        decision["lines"]
    )
    ref = next(s for s in decision["standings"] if s["target"] == "cpu")
    p50_ms = next(r for r in run["results"] if r["target"] == "cpu")["latency"]["p50_ms"]
    # 0.36/h is 1e-4 per second; at one request per p50 that is 1e-4 * p50_ms / 1000 per request
    assert abs(ref["cost"]["value"] - 0.36 / 3600 * 1e6 * p50_ms / 1000) < 1e-9 * ref["cost"]["value"] + 1e-12

    shown = show(run["run_id"], tmp_path=tmp_path)
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    assert "decision (by cost) recommended: cpu " in text and "rule: the fastest (with prices, the cheapest)" in text
    # other prices, after the fact: the basis stays cost, the wrong target stays out
    repriced = show(run["run_id"], "--price", "cpu=1/h", "--format", "json", tmp_path=tmp_path)
    again = json.loads(repriced.stdout)["decision"]
    assert again["target"] == "cpu" and again["standings"][0]["cost"]["price"]["per_hour"] == 1.0


def test_a_requirement_nobody_meets_leaves_no_recommendation(tmp_path):
    ran = cli_trial(py_workload("mlp"), "cpu", tmp_path, "--require", "p50<=1ns")
    assert ran.returncode == 0, ran.stderr
    decision = json.loads(ran.stdout)["decision"]
    assert (decision["outcome"], decision["target"], decision["basis"]) == ("none", "cpu", "speed")
    assert decision["lines"][0].startswith("closest: cpu, ruled out by p50<=1ns not met: ")


def test_the_api_decides_a_stored_run_and_the_reports_show_it(tmp_path):
    db = tmp_path / "b.db"
    run = bakeoff.trial(py_workload("mlp"), on="cpu", db=db, isolate=False, min_samples=3, min_seconds=0.0)
    decision = bakeoff.decide(run.run_id, db=db)
    assert (decision.outcome, decision.target, decision.basis) == ("recommended", "cpu", "speed")
    priced = bakeoff.decide(run, prices=["cpu=$2/h"])
    assert priced.basis == "cost" and priced.lines[0].startswith("cpu: $")
    bakeoff.report(db=db, markdown=tmp_path / "r.md", json=tmp_path / "r.json", prices=["cpu=$2/h"])
    assert "**Decision** (by cost): recommended: **cpu**" in (tmp_path / "r.md").read_text()
    assert bakeoff.remedies(run.run_id, db=db) == {}  # the reference alone takes nothing
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["runs"][0]["decision"]["basis"] == "cost"
