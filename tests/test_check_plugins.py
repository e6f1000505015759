"""Checks and scenarios from third parties: a plugin package installed beside bakeoff adds them
through the ``bakeoff.checks`` and ``bakeoff.scenarios`` entry points, without touching bakeoff.

``tests/plugin_site`` is an installed distribution (a package and its ``.dist-info`` with the
entry points), as ``pip install`` leaves one; putting it on ``PYTHONPATH`` installs it for the
processes started here and for their workers. Its check says whether the outputs are finite, its
scenario times back-to-back calls (with a metric requirements can use); a third entry point
names a class that does not exist (a broken plugin).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import py_workload

ROOT = Path(__file__).resolve().parents[1]
PLUGIN_SITE = ROOT / "tests" / "plugin_site"
FAST = ["--samples", "3", "--min-time", "0"]


def bakeoff(*args: str, plugin: bool) -> subprocess.CompletedProcess[str]:
    paths = [str(PLUGIN_SITE)] if plugin else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*paths, str(ROOT / "src"), str(ROOT)])}
    return subprocess.run(
        [sys.executable, "-m", "bakeoff", *args], capture_output=True, text=True, timeout=600, env=env, cwd=ROOT
    )


def test_plugin_checks_and_scenarios_run_in_the_workers_are_stored_and_survive_uninstalling(tmp_path):
    db = str(tmp_path / "kb.db")
    targets = "cpu,cpu?dtype=fp16"
    plugin_scenario = ["--scenario", "repeat?calls=4", "--require", "repeat.p90<=60s"]
    plugin_options = ["--check", "finite_outputs?limit=1e30"]
    ran = bakeoff("trial", py_workload("overflows_in_half"), "--on", targets, "--db", db, *FAST, *plugin_scenario,
                  *plugin_options, "--format", "json", plugin=True)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    # the broken entry point is left out with one line; the trial goes on
    left_out = "bakeoff: check plugin 'broken' (bakeoff_finite_check:NoSuchCheck) left out: AttributeError"
    assert ran.stderr.count(left_out) == 1  # once, not again by each worker
    run = json.loads(ran.stdout)
    by_target = {r["target"]: r for r in run["results"]}
    # the seeded fault: float16 overflows to inf; the float32 reference is the clean control
    # the plugin's option reached the workers (the value says which limit it judged by)
    assert by_target["cpu?dtype=float16"]["finite_outputs"] == {
        "verdict": "nonfinite",
        "nonfinite": ["output.logits"],
        "limit": 1e30,
    }
    assert by_target["cpu"]["finite_outputs"] == {"verdict": "finite", "nonfinite": [], "limit": 1e30}
    assert run["settings"]["checks"] == ["finite_outputs?limit=1e+30"]
    assert by_target["cpu"]["correctness"]["verdict"] == "pass"  # bakeoff's own checks still run
    # the plugin scenario ran in every worker, and a requirement on its metric was judged from its samples
    for result in by_target.values():
        (repeat,) = [s for s in result["scenarios"] if s["name"] == "repeat"]
        assert repeat["status"] == "ok" and len(repeat["series"]["call"]) == 4
        (requirement,) = result["requirements"]
        assert requirement["text"] == "repeat.p90<=60s" and requirement["verdict"] == "met"
        assert requirement["samples"] == 4 and requirement["scenario"] == "repeat"

    summary = bakeoff("show", run["run_id"], "--db", db, plugin=True)
    assert summary.returncode == 0, summary.stderr
    assert "non-finite values in output.logits" in summary.stdout  # a plugin's facts are in the summary
    shown = bakeoff("show", run["run_id"], "--db", db, "--verbose", plugin=True)
    assert "non-finite values in output.logits" in shown.stdout
    assert "call p50" in shown.stdout and "4 calls" in shown.stdout  # the scenario's own figures
    assert "check options finite_outputs?limit=1e+30" in " ".join(shown.stdout.split())
    table = tmp_path / "runs.csv"
    assert bakeoff("export", "--format", "csv", "-o", str(table), "--db", db, plugin=True).returncode == 0
    with table.open(newline="") as handle:
        verdicts = {row["target"]: row["finite_outputs"] for row in csv.DictReader(handle)}
    assert verdicts == {"cpu": "finite", "cpu?dtype=float16": "nonfinite"}  # the plugin's verdict has a column

    # the plugin uninstalled: its values are kept, named, and written back unchanged
    without = bakeoff("show", run["run_id"], "--db", db, plugin=False)
    assert without.returncode == 0, without.stderr
    assert "written by a newer bakeoff or an absent plugin: finite_outputs" in " ".join(without.stdout.split())
    # how it was measured is still shown, with the options of the absent plugin's check as stored
    assert "check options finite_outputs?limit=1e+30" in " ".join(without.stdout.split())
    exported = bakeoff("show", run["run_id"], "--db", db, "--format", "json", plugin=False)
    kept = {r["target"]: r for r in json.loads(exported.stdout)["results"]}
    assert kept["cpu?dtype=float16"]["finite_outputs"] == by_target["cpu?dtype=float16"]["finite_outputs"]
    assert kept["cpu"]["scenarios"] == by_target["cpu"]["scenarios"]  # its scenario's samples too
    # without the plugin its scenario is unknown input, refused with one line
    refused = bakeoff("trial", py_workload("mlp"), "--on", "cpu", "--db", db, "--scenario", "repeat", plugin=False)
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
        "bakeoff: error: unknown scenario 'repeat' (use one of single-stream, offline, server, generation, training)"
    ]


def test_plugin_checks_are_listed_with_their_options_and_a_bad_option_is_one_line(tmp_path):
    listed = bakeoff("checks", "--format", "json", plugin=True)
    assert listed.returncode == 0, listed.stderr
    by_name = {c["name"]: c for c in json.loads(listed.stdout)}
    assert by_name["finite_outputs"]["source"] == "plugin bakeoff_finite_check"
    assert by_name["finite_outputs"]["options"]["limit"]["type"] == "float"
    assert by_name["determinism"]["source"] == "bakeoff"
    assert by_name["determinism"]["options"]["repeats"] == {
        "type": "int",
        "default": 2,
        "minimum": 1,
        "help": "calls per input after the timed one",
    }
    assert list(by_name)[:4] == ["correctness", "placement", "compilation", "determinism"]  # the order they run
    db = tmp_path / "kb.db"
    bad = bakeoff("trial", py_workload("mlp"), "--db", str(db), "--check", "finite_outputs?limit=high", plugin=True)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1] == (
        "bakeoff: error: check option limit='high' in 'finite_outputs?limit=high' is not a number "
        "(e.g. finite_outputs?limit=16)"
    )
    assert not db.exists()


def test_a_plugin_check_reports_on_a_script_run_by_exec(tmp_path):
    """exec asks every registered check for its value over a target's script run: the plugin's
    check sees the run's captured values (here the model's output, compared by default)."""
    work = tmp_path / "work"
    work.mkdir()
    script = work / "overflows_off_cpu.py"
    script.write_text((ROOT / "tests" / "fixtures" / "scripts" / "overflows_off_cpu.py").read_text())
    env = {
        **os.environ,
        "BAKEOFF_EMU": "1",
        "PYTHONPATH": os.pathsep.join([str(PLUGIN_SITE), str(ROOT / "src"), str(ROOT)]),
    }
    ran = subprocess.run(
        [sys.executable, "-m", "bakeoff", "exec", "--on", "emu,cpu?threads=1", "--db", str(tmp_path / "kb.db"),
         "--format", "json", script.name],
        capture_output=True, text=True, timeout=600, env=env, cwd=work,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    by_target = {r["target"]: r for r in json.loads(ran.stdout)["results"]}
    # the seeded fault: the model's float16 output overflows off the CPU; the CPU target is the control
    assert by_target["emu"]["finite_outputs"] == {"verdict": "nonfinite", "nonfinite": ["module:Net[0]"], "limit": None}
    assert by_target["cpu?threads=1"]["finite_outputs"] == {"verdict": "finite", "nonfinite": [], "limit": None}
    assert by_target["emu"]["correctness"]["verdict"] == "fail"  # bakeoff's own checks, through the same registry
    assert by_target["cpu?threads=1"]["correctness"]["verdict"] == "pass"
    assert by_target["cpu"]["finite_outputs"] is None  # the reference is not judged
