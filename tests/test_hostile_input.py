"""Bad input a hostile or careless user gives: one line, exit 2, nothing stored, nothing left running."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.conftest import bakeoff_cli

import bakeoff as bakeoff_api


def bakeoff(*args: str, cwd: Path | None = None, timeout: float = 300, env: dict | None = None):
    return bakeoff_cli(*args, cwd=cwd, timeout=timeout, env=env)


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


@pytest.mark.parametrize(
    "statements",
    [
        ["create table runs (id text primary key, note text)", "insert into runs values ('a', 'mine')"],
        ["create table meta (key text, value text)", "insert into meta values ('owner', 'someone else')"],
        ["create table meta (k text)", "create table environments (x int)"],
    ],
)
@pytest.mark.parametrize("command", [["history"], ["show", "abc"], ["trial", "arch:llama", "--on", "cpu"]])
def test_a_foreign_sqlite_file_is_refused_and_stays_byte_identical(statements, command, tmp_path):
    import sqlite3

    foreign = tmp_path / "theirs.db"
    with sqlite3.connect(foreign) as conn:
        for statement in statements:
            conn.execute(statement)
    before = foreign.read_bytes()
    result = bakeoff(*command, "--db", str(foreign), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("bakeoff: error: ") and ("not a bakeoff one" in line or "cannot open database" in line)
    assert foreign.read_bytes() == before
    assert not (tmp_path / "theirs.db.artifacts").exists()


def test_report_checks_its_output_path_before_reading_anything(tmp_path):
    # the database does not exist either: the unwritable path is found first, before any rendering
    result = bakeoff("report", "--html", str(tmp_path / "no" / "such" / "r.html"), "--db", str(tmp_path / "none.db"))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"bakeoff: error: cannot write {tmp_path}/no/such/r.html: directory {tmp_path}/no/such does not exist "
        "(choose another path)"
    )
    with pytest.raises(bakeoff_api.BakeoffError, match="it is a directory"):
        bakeoff_api.report(json=tmp_path, db=tmp_path / "none.db")


@pytest.mark.parametrize("command", [["history"], ["show", "abc"], ["report", "--markdown", "r.md"]])
def test_a_command_that_only_reads_leaves_an_empty_file_given_as_its_db_empty(command, tmp_path):
    empty = tmp_path / "e.db"
    empty.touch()
    result = bakeoff(*command, "--db", str(empty), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"bakeoff: error: no database at {empty} (an empty file) (check --db / BAKEOFF_DB, or run a trial first)"
    )
    assert empty.stat().st_size == 0 and sorted(p.name for p in tmp_path.iterdir()) == ["e.db"]


def test_an_artifacts_directory_that_cannot_be_made_is_one_line_and_stores_no_run(tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the baselines would go")
    env = {**os.environ, "BAKEOFF_ARTIFACTS": str(blocker)}
    result = bakeoff("trial", "arch:llama?layers=1", "--on", "cpu", "--db", str(tmp_path / "b.db"), env=env)
    assert result.returncode == 2, result.stderr[-2000:]
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(f"bakeoff: error: cannot write the baseline to {blocker}/baselines/") and line.endswith(
        ": Not a directory (make that directory writable, or choose another --db path or BAKEOFF_ARTIFACTS)"
    ), line
    assert "Traceback" not in result.stderr
    assert bakeoff("history", "--db", str(tmp_path / "b.db")).stdout.count("arch:llama") == 0


@pytest.mark.parametrize("command", [["history"], ["trial", "arch:llama"]])
def test_an_empty_db_option_is_refused(command, tmp_path):
    result = bakeoff(*command, "--db", "", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "bakeoff: error: --db is empty (give a file path or a postgresql:// URL, or leave --db out for ./bakeoff.db)"
    )
    assert list(tmp_path.iterdir()) == []


def test_rerun_refuses_stored_switches_that_load_code_and_shows_the_others(tmp_path):
    from tests.conftest import cli_trial, py_workload

    db = tmp_path / "b.db"
    first = cli_trial(py_workload("mlp"), "cpu", tmp_path, "--env", "PYTHONWARNINGS=ignore", "--env", "MY_FLAG=1")
    assert first.returncode == 0, first.stderr
    stored = bakeoff_api.history(db=db)
    refused = bakeoff("rerun", stored[0].run_id, "--in-process", "--db", str(db))
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        "bakeoff: error: the stored run would set PYTHONWARNINGS=ignore, which can load code into bakeoff's "
        "processes (check where the run came from; pass --allow-code-env to apply it anyway)"
    )
    assert len(bakeoff_api.history(db=db)) == 1  # nothing ran
    allowed = bakeoff("rerun", stored[0].run_id, "--in-process", "--allow-code-env", "--db", str(db))
    assert allowed.returncode == 0, allowed.stderr
    assert "applying the stored environment switches: PYTHONWARNINGS=ignore, MY_FLAG=1" in allowed.stderr
    assert len(bakeoff_api.history(db=db)) == 2


@pytest.mark.parametrize(
    ("name", "loads"),
    [("LD_PRELOAD", True), ("PYTHONPATH", True), ("DYLD_INSERT_LIBRARIES", True), ("BAKEOFF_PLUGINS", True),
     ("GCONV_PATH", True), ("TORCHINDUCTOR_CACHE_DIR", True), ("TRITON_CACHE_DIR", True),
     ("TORCHINDUCTOR_FREEZING", False), ("OMP_NUM_THREADS", False), ("MY_FLAG", False)],
)  # fmt: skip
def test_which_switches_load_code(name, loads):
    from bakeoff.runner.switches import loads_code

    assert loads_code(name) is loads


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["trial"], "bakeoff: error: Missing argument 'WORKLOAD'. (see `bakeoff trial --help`)"),
        (["trial", "arch:llama", "--zzz"], "bakeoff: error: No such option '--zzz'. (see `bakeoff trial --help`)"),
        (["nosuch"], "bakeoff: error: No such command 'nosuch'. (see `bakeoff --help`)"),
    ],
)
def test_usage_errors_are_one_line_too(args, line, tmp_path):
    result = bakeoff(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == line


def test_a_report_path_that_is_a_directory_is_one_line(tmp_path):
    result = bakeoff("report", "--html", str(tmp_path), "--db", str(tmp_path / "none.db"))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"bakeoff: error: Invalid value for '--html': File '{tmp_path}' is a directory. (see `bakeoff report --help`)"
    )


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--budget", "soon"], "bakeoff: error: budget 'soon' is not a duration (e.g. --budget 10min, 90s or 1h)"),
        (["--budget", "20s"], "bakeoff: error: budget '20s' is under a minute (give a plan at least --budget 1min)"),
        (
            ["--price", "cpu=1"],
            "bakeoff: error: price 'cpu=1' is not NAME=AMOUNT/UNIT "
            "(e.g. --price cpu=0.34/h or --price 'neuron=$1.34/h')",
        ),
        (
            ["--price", "cpu=0.34/h@0cores"],
            "bakeoff: error: price 'cpu=0.34/h@0cores': @0cores is not a positive whole number of cores "
            "(e.g. --price 'cpu=0.34/h@4cores' or --price 'neuron=$1.34/h@1device')",
        ),
    ],
)
def test_bad_plan_input_is_one_line_and_stores_nothing(args, line, tmp_path):
    db = tmp_path / "b.db"
    result = bakeoff("plan", "arch:llama", *args, "--db", str(db), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [line]
    assert not db.exists()


def test_rich_markup_in_what_a_user_names_is_printed_as_written(tmp_path):
    # '[/x]' closed a tag never opened: rich raised MarkupError with a traceback; '[bold red]' styled
    from tests.conftest import py_workload

    db = str(tmp_path / "b.db")
    ran = bakeoff("trial", py_workload("mlp"), "--on", "cpu", "--samples", "2", "--min-time", "0", "--db", db)
    assert ran.returncode == 0, ran.stderr
    listed = bakeoff("history", "--workload", "[/x]", "--db", db)
    assert listed.returncode == 0, listed.stderr
    assert "Traceback" not in listed.stderr and "[/x]" in listed.stdout
    tagged = bakeoff("history", "--tag", "[bold]none", "--db", db)
    assert "no runs tagged [bold]none" in tagged.stdout  # was "no runs yet; try `bakeoff demo`"

    spec = py_workload("labelled", label="[/x][bold red]")
    tried = bakeoff("trial", spec, "--on", "cpu", "--samples", "2", "--min-time", "0", "--db", db)
    assert tried.returncode == 0, tried.stderr
    assert "Traceback" not in tried.stderr
    assert f"· computing baseline for {spec}\n" in tried.stderr  # as written, no tag taken from it


@pytest.mark.parametrize("command", ["exec", "serve"])
def test_a_reference_device_this_machine_lacks_is_refused_in_one_line(command, tmp_path):
    # exec stored the run with its reference as an error (an AssertionError) and exit 0; serve
    # skipped the reference and measured every target against nothing
    (tmp_path / "hello.py").write_text("print('hi')\n")
    db = tmp_path / "b.db"
    what = ["hello.py"] if command == "exec" else ["python -m http.server {port}"]
    ran = bakeoff(command, "--reference", "mps", "--on", "cpu", "--db", str(db), *what, cwd=tmp_path)
    assert ran.returncode == 2, ran.stderr
    (line,) = ran.stderr.strip().splitlines()
    assert line.startswith("bakeoff: error: --reference mps cannot run here: no Apple GPU (MPS) here")
    assert line.endswith("(give a device this machine has (`bakeoff targets` lists them), or leave --reference out)")
    assert not db.exists()
