"""The suite's per-test CPU accounting (tests/cpu_accounting.py): the summary adds what was
recorded, and on a machine with a writable cpuacct hierarchy a test whose child process burns
CPU is charged for it while an idle one is not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.cpu_accounting import _CPUACCT, busy, summary


def test_the_summary_adds_cpu_and_wall_by_file_and_lists_the_costliest_tests_first() -> None:
    lines = [
        json.dumps(["tests/a.py::one", 2.0, 3.0, 0]),
        json.dumps(["tests/a.py::two", 1.5, 1.0, 0]),
        json.dumps(["tests/b.py::three", 4.0, 9.0, 0]),
    ]
    text = summary(lines).splitlines()
    assert text[0] == "CPU 8 s, wall 13 s over 3 tests"
    assert text[2:4] == ["    4.0     9.0  tests/b.py", "    3.5     4.0  tests/a.py"]
    assert [row.split()[-1] for row in text[-3:]] == ["tests/b.py::three", "tests/a.py::one", "tests/a.py::two"]


def test_the_cores_busy_spread_each_tests_cpu_over_its_wall_time() -> None:
    """Two cores, 30 s steps: a test over both steps puts half its CPU in each (spread on its
    start alone, the first step would read 100% and the second 75%)."""
    lines = [
        json.dumps(["tests/a.py::first_half", 30.0, 30.0, 100.0]),
        json.dumps(["tests/a.py::across", 30.0, 60.0, 100.0]),
        json.dumps(["tests/b.py::second_half", 45.0, 30.0, 130.0]),
        json.dumps(["tests/b.py::instant", 0.0, 0.0, 131.0]),
    ]
    assert busy(lines, cores=2).splitlines() == ["cores busy (2), every 30 s", "     0 s    75%", "    30 s   100%"]


@pytest.mark.skipif(not os.access(_CPUACCT, os.W_OK), reason="needs a writable cgroup v1 cpuacct hierarchy")
def test_a_childs_cpu_is_charged_to_its_test_and_an_idle_test_gets_none(tmp_path: Path) -> None:
    (tmp_path / "test_burn.py").write_text(
        "import subprocess, sys, time\n"
        "def test_burns():  # the seeded cost: a child that spins for a second of CPU\n"
        "    subprocess.run([sys.executable, '-c', 'import time\\nt = time.process_time()\\n"
        "while time.process_time() - t < 1: pass'], check=True)\n"
        "def test_sleeps():  # the control: a second of wall time, no CPU\n"
        "    time.sleep(1)\n"
    )
    log = tmp_path / "cpu"
    env = {**os.environ, "BAKEOFF_TEST_CPU_LOG": str(log), "PYTHONPATH": str(Path(__file__).parents[2])}
    env.pop("PYTEST_XDIST_WORKER", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n0", "-p", "no:cacheprovider", "-p", "tests.cpu_accounting",
         "-o", "addopts=", str(tmp_path / "test_burn.py")],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    recorded = {row[0].split("::")[1]: row for row in map(json.loads, (log / "main.jsonl").read_text().splitlines())}
    assert recorded["test_burns"][1] >= 0.9, recorded
    assert recorded["test_sleeps"][1] < 0.3 and recorded["test_sleeps"][2] >= 1.0, recorded
