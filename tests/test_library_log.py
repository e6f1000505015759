"""What libraries say while a trial runs stays off the terminal and is kept in the run's log.

The seeded case is a workload whose forward pass does what backend libraries do: a Python
warning, a warning from a library's logger and a line written from C to file descriptor 2 (as
ONNX Runtime's logger does). Run through the CLI in worker processes and in-process, none of
that text may reach the terminal; each must be in the stored result's log with its count, and
``bakeoff show`` says so in one fact. The control, a quiet model, has an empty log and no fact.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from tests.conftest import bakeoff_cli, cli_trial, py_workload

SAID = {
    "warnings": "fixture-lib: this op is deprecated",
    "logging": "fixture-lib: engine fell back to a slow kernel",
    "stderr": "fixture-lib: [W:engine] Evaluation failed",
}


def _bakeoff(*args: str) -> subprocess.CompletedProcess[str]:
    return bakeoff_cli(*args, timeout=300)


def _trial(factory: str, on: str, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    db = str(tmp_path / "b.db")
    common = ("--samples", "3", "--min-time", "0", "--format", "json", "--db", db)
    return _bakeoff("trial", py_workload(factory), "--on", on, *common, *extra)


def _lines(result: dict, source: str) -> list[dict]:
    return [line for line in result["log"] if line["source"] == source and SAID[source] in line["text"]]


@pytest.mark.isolated
@pytest.mark.parametrize("isolation", ["workers", "in-process"])
def test_library_output_is_kept_in_the_log_and_never_reaches_the_terminal(isolation, tmp_path: Path):
    on = "cpu,cpu+aot_eager" if isolation == "workers" else "cpu"
    ran = _trial("talks_like_a_library", on, tmp_path, *(["--in-process"] if isolation == "in-process" else []))
    assert ran.returncode == 0, ran.stderr
    for text in SAID.values():
        assert text not in ran.stderr
    assert "· building workload" in ran.stderr  # bakeoff's own progress still shows
    doc = json.loads(ran.stdout)  # stdout holds the document alone: the text is only in its logs
    timed = [r for r in doc["results"] if r["status"] == "ok"]
    assert len(timed) == (2 if isolation == "workers" else 1)
    for result in timed:
        for source in SAID:
            assert _lines(result, source), (source, result["log"])
        # said on every call: counted, not repeated
        timing = [line for line in _lines(result, "stderr") if line["phase"] == "timing"]
        assert timing and timing[0]["count"] >= 3
        assert len({(line["phase"], line["source"], line["text"]) for line in result["log"]}) == len(result["log"])
    reference = next(r for r in timed if r["is_reference"])
    assert {line["phase"] for line in _lines(reference, "stderr")} >= {"eager run", "baseline", "timing"}

    db = str(tmp_path / "b.db")
    shown = _bakeoff("show", doc["run_id"], "--db", db)
    assert shown.returncode == 0, shown.stderr
    flat = " ".join(shown.stdout.split())  # the summary: one fact with the count
    assert " library messages from " in flat and f"`bakeoff show {doc['run_id']} --log`" in flat
    detail = " ".join(_bakeoff("show", doc["run_id"], "--verbose", "--db", db).stdout.split())
    assert "library messages (3 distinct:" in detail
    listed = _bakeoff("show", doc["run_id"], "--log", "--db", db)
    assert listed.returncode == 0, listed.stderr
    for text in SAID.values():
        assert text in listed.stdout
    assert "timing" in listed.stdout and "stderr" in listed.stdout
    as_json = json.loads(_bakeoff("show", doc["run_id"], "--log", "--format", "json", "--db", db).stdout)
    assert [r["log"] for r in as_json["results"]] == [r["log"] for r in doc["results"]]


@pytest.mark.isolated
def test_a_quiet_model_has_an_empty_log_and_no_fact(tmp_path: Path):
    ran = cli_trial(py_workload("mlp"), "cpu", tmp_path)
    assert ran.returncode == 0, ran.stderr
    doc = json.loads(ran.stdout)
    assert [r["log"] for r in doc["results"]] == [[]]
    shown = _bakeoff("show", doc["run_id"], "--db", str(tmp_path / "b.db"))
    assert shown.returncode == 0 and "library message" not in shown.stdout
    listed = _bakeoff("show", doc["run_id"], "--log", "--db", str(tmp_path / "b.db"))
    assert "no library messages were captured" in listed.stdout


@pytest.mark.isolated
def test_a_failing_target_is_still_reported_and_a_crashed_worker_leaves_its_output(tmp_path: Path):
    db = tmp_path / "b.db"
    ran = _trial("talks_then_crashes_when_compiled", "cpu,cpu+aot_eager", tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert "about to crash" not in ran.stderr
    crashed = json.loads(ran.stdout)["results"][1]
    assert crashed["status"] == "error" and crashed["error"]["type"] == "SIGSEGV"
    # what the worker wrote before it died was read back by the parent, under the phase it died in
    (line,) = [line for line in crashed["log"] if "about to crash" in line["text"]]
    assert line["source"] == "stderr" and line["phase"] == "compile and first call"
    shown = _bakeoff("show", json.loads(ran.stdout)["run_id"], "--db", str(db))
    assert "crash during compile and first call: SIGSEGV" in " ".join(shown.stdout.split())
