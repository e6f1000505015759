"""Faults a hostile user provokes: chatty and exiting workloads, kill -9, Ctrl-C, SIGTERM, hangs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from tests.conftest import bakeoff_cli

import bakeoff
from bakeoff.store.db import Store

HOSTILE = Path(__file__).parent / "fixtures" / "hostile_models.py"


def spec(function: str, **options: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in options.items())
    return f"py:{HOSTILE}:{function}" + (f"?{query}" if query else "")


@pytest.mark.isolated
@pytest.mark.parametrize("isolation", [[], ["--in-process"]])
def test_a_chatty_model_cannot_corrupt_json_output(isolation, tmp_path):
    result = bakeoff_cli(
        "trial", spec("chatty"), "--on", "cpu", "--samples", "3", "--min-time", "0", "--format", "json",
        "--db", str(tmp_path / "b.db"), *isolation,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)  # nothing but bakeoff's JSON on stdout
    assert doc["results"][0]["correctness"]["verdict"] == "pass"
    # what it prints is kept in the run's log, counted, not sprayed over the terminal
    assert "forward called with" not in result.stderr and "raw write to fd 1" not in result.stderr
    log = doc["results"][0]["log"]
    assert any(line["text"] == "raw write to fd 1" and line["count"] > 1 for line in log), log
    assert any(line["text"] == "building the chatty model" for line in log), log


def test_a_factory_that_calls_sys_exit_is_a_workload_error(tmp_path):
    db = tmp_path / "b.db"
    result = bakeoff_cli("trial", spec("exits", code="7"), "--on", "cpu", "--db", str(db))
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("bakeoff: error: ")
    assert "SystemExit: 7" in result.stderr and "Traceback" not in result.stderr
    assert not db.exists()  # refused before a new knowledge base was created


def _descendants_of_session(sid: int) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getsid(proc.pid) == sid and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (ProcessLookupError, psutil.Error, PermissionError):
            continue
    return found


def _start_hanging_trial(tmp_path: Path) -> subprocess.Popen[str]:
    """A trial whose worker for ``cpu?threads=1`` hangs in its first call; returns once it is stuck
    there (the fixture touches a marker file as it enters its endless loop)."""
    marker = tmp_path / "hung"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bakeoff", "trial", spec("hangs_in_worker"), "--on", "cpu?threads=1",
         "--timeout", "300", "--samples", "3", "--min-time", "0", "--db", str(tmp_path / "b.db")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "HOSTILE_HUNG_MARKER": str(marker)},
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:  # until a worker is stuck in the forward
        if marker.exists():
            return proc
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("no worker of the trial got stuck in the forward: " + proc.communicate()[1])


def _alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    found = []
    for proc in processes:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _gone_within(sid: int, seconds: float, known: list[psutil.Process] = ()) -> list[psutil.Process]:
    """What is left of the session ``sid`` (and of the ``known`` workers) after ``seconds``; kills it."""
    deadline = time.monotonic() + seconds

    def left_now() -> list[psutil.Process]:
        seen = {p.pid: p for p in [*_descendants_of_session(sid), *_alive(list(known))]}
        return list(seen.values())

    left = left_now()
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = left_now()
    for stray in left:  # never leave one running, whatever the assertion then says
        try:
            stray.kill()
        except psutil.Error:
            pass
    return left


@pytest.mark.isolated
def test_kill_9_of_bakeoff_takes_its_hung_workers_with_it(tmp_path):
    proc = _start_hanging_trial(tmp_path)
    workers = psutil.Process(proc.pid).children(recursive=True)
    assert workers
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    left = _gone_within(proc.pid, 5, workers)
    assert not left, [p.pid for p in left]


@pytest.mark.isolated
@pytest.mark.parametrize(
    ("sig", "code", "line"), [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")]
)
def test_ctrl_c_and_sigterm_stop_quietly_with_one_line(sig, code, line, tmp_path):
    proc = _start_hanging_trial(tmp_path)
    workers = psutil.Process(proc.pid).children(recursive=True)
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)  # as a terminal does: the whole foreground process group
    else:
        os.kill(proc.pid, sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr
    said = [row for row in stderr.strip().splitlines() if row.strip() and not row.startswith("·")]
    assert said == [f"bakeoff: {line}"], stderr
    left = _gone_within(proc.pid, 5, workers)
    assert not left, [p.pid for p in left]
    db = tmp_path / "b.db"
    assert not db.exists() or Store.open(str(db)).list_runs() == []  # nothing half-stored


@pytest.mark.isolated
def test_a_timeout_stores_where_the_worker_hung(tmp_path):
    run = bakeoff.trial(
        spec("hangs_in_worker", threads="3"),  # the reference's worker (one thread) does not hang
        on="cpu?threads=3",
        db=tmp_path / "b.db",
        timeout_s=10,  # a healthy step (a worker's start: spawn, import torch, build, first call) takes ~3 s
        min_samples=3,
        min_seconds=0,
    )
    assert run.result("cpu").status == "ok"
    hung = run.result("cpu?threads=3")
    assert hung.status == "error" and hung.error.category == "timeout"
    assert hung.error.phase == "first call"
    assert "stuck_in_the_forward" in hung.error.traceback and "hostile_models.py" in hung.error.traceback


@pytest.mark.parametrize("command", ["trial", "baseline"])
@pytest.mark.parametrize("function", ["fails_eagerly", "exits"])
def test_a_refused_workload_creates_no_knowledge_base(command, function, tmp_path):
    result = bakeoff_cli(command, spec(function), cwd=tmp_path, timeout=300)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("bakeoff: error: ")
    assert list(tmp_path.iterdir()) == []  # no bakeoff.db, no artifacts folder


def test_an_existing_knowledge_base_is_left_as_it_was_by_a_refused_workload(tmp_path):
    db = tmp_path / "b.db"
    Store.open(str(db))
    before = db.read_bytes()
    result = bakeoff_cli("trial", spec("fails_eagerly"), "--db", str(db))
    assert result.returncode == 2 and "fails eagerly on the CPU" in result.stderr
    assert db.read_bytes() == before


@pytest.mark.isolated
@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"how": "crash"}, "did not finish its first eager run on the CPU: reference run died from signal SIGSEGV"),
        (
            {"how": "crash", "dtype": "float64"},
            "did not finish its baseline's eager runs (float64 and each dtype) on the CPU: reference run died from "
            "signal SIGSEGV during 'baseline'",
        ),
        (
            {"how": "hang", "dtype": "float64"},
            "did not finish its baseline's eager runs (float64 and each dtype) on the CPU: no reply to 'baseline' "
            "within 4 s",
        ),
    ],
)
def test_a_reference_run_that_crashes_or_hangs_ends_the_trial_with_one_line(options, said, tmp_path):
    # the eager runs ran in bakeoff's own process: a segfault killed it (exit 139, no line) and a
    # float64 hang outlived --timeout
    result = bakeoff_cli(
        "trial", spec("dies_in_its_forward", **options), "--on", "cpu", "--timeout", "4",
        "--db", str(tmp_path / "b.db"), timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("bakeoff: error: py:") and said in last, last
    assert "Traceback" not in result.stderr
