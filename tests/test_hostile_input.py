"""Bad input a hostile or careless user gives: one line, exit 2, nothing stored, nothing left running."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def bakeoff(*args: str, cwd: Path | None = None, timeout: float = 300, env: dict | None = None):
    return subprocess.run(
        [sys.executable, "-m", "bakeoff", *args], capture_output=True, text=True, cwd=cwd, timeout=timeout, env=env
    )


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--on", "cpu?threads=100000", "--in-process"],
            "bakeoff: error: threads=100000 in target 'cpu?threads=100000' is more than 1024",
        ),
        (
            ["--min-time", "nan"],
            "bakeoff: error: minimum timing seconds must be a finite number >= 0, got nan (e.g. --min-time 0.5)",
        ),
        (
            ["--min-time", "inf"],
            "bakeoff: error: minimum timing seconds must be a finite number >= 0, got inf (e.g. --min-time 0.5)",
        ),
        (
            ["--timeout", "nan"],
            "bakeoff: error: timeout must be a positive number of seconds, got nan (e.g. --timeout 900)",
        ),
        (
            ["--scenario", ""],
            "bakeoff: error: empty scenario in '' (name one: offline, server?rate=20, generation or training "
            "(or drop --scenario))",
        ),
        (
            ["--scenario", "offline,"],
            "bakeoff: error: empty scenario in 'offline,' (name one: offline, server?rate=20, generation or training "
            "(or drop --scenario))",
        ),
    ],
)
def test_bad_numbers_and_empty_options_are_refused(args, line, tmp_path):
    db = tmp_path / "b.db"
    result = bakeoff("trial", "arch:llama", *args, "--db", str(db), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(line)
    assert "Traceback" not in result.stderr
    assert not db.exists()
