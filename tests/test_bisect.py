"""``bakeoff regressions --bisect``: which environment change causes a regression, found by
repeating the trial with each change put back alone, in fresh processes.

The seeded fault is an environment variable that slows the model (3 ms a call while it is set)
and arrives together with one that changes nothing: bisection must name the first and clear the
second. The honest control is a regression that no longer reproduces here (the slow switch is
gone again): no change may be named as its cause.
"""

from __future__ import annotations

import json

import pytest
from tests.conftest import py_workload

from bakeoff import api
from bakeoff.cli.main import main

pytestmark = pytest.mark.isolated  # every bisection trial is a fresh process

SLOW, NOTE = "TORCH_BISECT_PROBE_SLOW", "TORCH_BISECT_PROBE_NOTE"
QUICK = {"isolate": False, "min_samples": 15, "min_seconds": 0.0}


@pytest.fixture
def regressed(tmp_path, monkeypatch):
    """A knowledge base with a quick run, then a slow one after both variables changed."""
    db = tmp_path / "bakeoff.db"
    workload = py_workload("slow_when_switched")
    monkeypatch.setenv(NOTE, "first")
    monkeypatch.delenv(SLOW, raising=False)
    api.trial(workload, "cpu", db=db, **QUICK)
    monkeypatch.setenv(NOTE, "second")
    monkeypatch.setenv(SLOW, "1")
    api.trial(workload, "cpu", db=db, **QUICK)
    (comparison,) = api.regressions(db=db)
    assert comparison.metric("p50_ms").change > 5  # a slowdown many times the threshold
    return db


def test_bisect_names_the_switch_that_slows_the_model_and_clears_the_one_that_does_not(regressed, capsys):
    try:
        main(["regressions", "--bisect", "--db", str(regressed), "--format", "json"])
    except SystemExit as exc:
        assert not exc.code
    (bisection,) = json.loads(capsys.readouterr().out)["bisections"]
    assert bisection["reproduced"] == "yes"
    steps = {s["key"]: s for s in bisection["steps"]}
    assert set(steps) == {f"env.{SLOW}", f"env.{NOTE}"}  # the only differences between the two runs
    assert steps[f"env.{SLOW}"]["verdict"] == "moves it back"
    assert steps[f"env.{SLOW}"]["speedup"]["low"] > 2  # the sleep is most of a call
    assert steps[f"env.{NOTE}"]["verdict"] in ("no effect", "not conclusive")  # never named as a cause
    assert bisection["conclusion"].startswith(f"the cause: putting back env.{SLOW} 1 -> unset alone gives ")
    assert NOTE not in bisection["conclusion"]


def test_a_regression_that_no_longer_reproduces_names_no_cause(regressed, monkeypatch, capsys):
    monkeypatch.delenv(SLOW)  # the machine is back as it was: the trial as it is runs fast again
    found, (bisection,) = api.bisect(db=regressed)
    assert found[0].metric("p50_ms").change > 5  # regressed, or not conclusive when the machine is busy
    assert bisection.reproduced == "no"
    assert not any(s.verdict == "moves it back" for s in bisection.steps)
    assert bisection.conclusion.startswith("the regression does not reproduce here now")
    slow = next(s for s in bisection.steps if s.key == f"env.{SLOW}")
    assert slow.verdict == "not tested" and "not the after run's 1" in slow.why


def test_a_bisection_killed_with_kill_9_leaves_no_trial_running(regressed):
    import contextlib
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    bisecting = subprocess.Popen(
        [sys.executable, "-m", "bakeoff", "regressions", "--bisect", "--db", str(regressed)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=dict(os.environ),
    )
    deadline, trials = time.monotonic() + 120, []
    while not trials and time.monotonic() < deadline:  # wait for a trial of the bisection to start
        time.sleep(0.2)
        trials = [p for p in psutil.Process(bisecting.pid).children() if "bisect_trial" in " ".join(p.cmdline())]
    assert trials, "no bisection trial started"
    os.kill(bisecting.pid, signal.SIGKILL)
    bisecting.wait()
    _, alive = psutil.wait_procs(trials, timeout=2)  # a trial alone takes seconds more: it must not finish
    running = []
    for process in alive:  # a zombie has ended: only whoever adopted it has not reaped it yet
        with contextlib.suppress(psutil.NoSuchProcess):
            if process.status() != psutil.STATUS_ZOMBIE:
                running.append(process)
    assert not running  # the trial dies with the bisection
