"""An output path that is the knowledge base (or a file SQLite keeps beside it) is refused before
anything runs, with one line and exit code 2, and the database is left as it was; an output is
written whole or not at all. The controls: an ordinary path is written, and the database reads
as before."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tests.revisit_data import environment, make_run, target_result

from bakeoff.cli.main import main
from bakeoff.errors import SpecError
from bakeoff.outfiles import check_writable, write_text
from bakeoff.store import Store

RUN_ID = "aaaa00000001"


@pytest.fixture
def stored(tmp_path: Path) -> Path:
    """A knowledge base holding one run."""
    db = tmp_path / "kb.db"
    run = make_run(RUN_ID, "2025-01-01T10:00:00+00:00", environment(), (target_result("cpu", 2.0),))
    Store.open(db).save_run(run)
    return db


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """``bakeoff ARGS`` in this process: the exit code and the lines on stderr."""
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


def _intact(db: Path) -> None:
    assert db.read_bytes().startswith(b"SQLite format 3\x00")
    assert Store.open(db, create=False).get_run(RUN_ID).run_id == RUN_ID


def _spellings(db: Path) -> dict[str, str]:
    """The database and its SQLite files, spelled as a user might: relative, with ``..``, through
    a symbolic link."""
    link = db.parent / "link.db"
    link.symlink_to(db)
    return {
        "absolute": str(db),
        "dotted": str(db.parent / "sub" / ".." / db.name),
        "link": str(link),
        "wal": f"{db}-wal",
        "shm": f"{db}-shm",
        "journal": f"{db}-journal",
    }


@pytest.mark.parametrize("flag", ["--html", "--markdown", "--json"])
@pytest.mark.parametrize("spelling", ["absolute", "dotted", "link", "wal", "shm", "journal"])
def test_report_refuses_to_write_over_the_database(stored, flag, spelling, capsys, monkeypatch):
    (stored.parent / "sub").mkdir()
    path = _spellings(stored)[spelling]
    monkeypatch.chdir(stored.parent)
    code, err = _cli(capsys, "report", RUN_ID, flag, path, "--db", str(stored))
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"bakeoff: error: cannot write {path}: it is "), err
    assert "destroy" in lines[0]
    _intact(stored)
    assert not Path(f"{stored}-journal").exists() or spelling == "journal"


def test_report_refuses_a_relative_path_to_the_database(stored, capsys, monkeypatch):
    monkeypatch.chdir(stored.parent)
    code, err = _cli(capsys, "report", RUN_ID, "--html", "out.html", "--markdown", "kb.db", "--db", "kb.db")
    assert code == 2 and err.startswith("bakeoff: error: cannot write kb.db: it is "), err
    assert not (stored.parent / "out.html").exists()  # refused before anything was written
    _intact(stored)


def test_report_to_an_ordinary_path_is_written(stored, capsys, tmp_path):
    out = tmp_path / "report.md"
    code, err = _cli(
        capsys, "report", RUN_ID, "--markdown", str(out), "--json", str(tmp_path / "r.json"), "--db", str(stored)
    )
    assert code == 0, err
    assert RUN_ID in out.read_text() and (tmp_path / "r.json").read_text().startswith("{")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporary left
    _intact(stored)


@pytest.mark.parametrize("flag", ["--html", "--markdown"])
def test_coverage_refuses_the_database_before_reading_the_sweep(stored, flag, capsys):
    code, err = _cli(capsys, "coverage", "nosuchsweep", flag, f"{stored}-wal", "--db", str(stored))
    assert code == 2 and err.startswith(f"bakeoff: error: cannot write {stored}-wal: it is a file SQLite keeps"), err
    _intact(stored)


def test_coverage_to_an_ordinary_path_gets_as_far_as_the_sweep(stored, capsys, tmp_path):
    code, err = _cli(capsys, "coverage", "nosuchsweep", "--html", str(tmp_path / "c.html"), "--db", str(stored))
    assert code == 2 and "cannot write" not in err and "nosuchsweep" in err, err


def test_sweep_write_expect_refuses_a_database_not_created_yet(tmp_path, capsys):
    db = tmp_path / "new.db"
    code, err = _cli(capsys, "sweep", "arch:all", "--expect", str(db), "--write-expect", "--db", str(db))
    assert code == 2 and err.startswith(f"bakeoff: error: cannot write {db}: it is the knowledge base"), err
    assert not db.exists()  # refused before the sweep opened (and created) it


def test_sweep_write_expect_refuses_the_default_database(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BAKEOFF_DB", raising=False)
    code, err = _cli(capsys, "sweep", "arch:all", "--expect", "bakeoff.db", "--write-expect")
    assert code == 2 and "it is the knowledge base" in err, err
    assert not (tmp_path / "bakeoff.db").exists()


def test_any_sqlite_database_is_refused_without_knowing_which_is_in_use(stored, tmp_path):
    """The report API checks its outputs before it knows the database: the content tells."""
    with pytest.raises(SpecError, match="it is a SQLite database"):
        check_writable(stored)
    with pytest.raises(SpecError, match="a file SQLite keeps beside a SQLite database"):
        check_writable(f"{stored}-shm")
    with pytest.raises(SpecError, match="it is a SQLite database"):
        write_text(stored, "<html>")
    _intact(stored)
    check_writable(tmp_path / "kb.db.html")  # a name that merely starts like it
    check_writable(tmp_path / "other-wal")  # the -wal of no database


def test_a_fifo_output_is_not_read_to_find_a_database(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    check_writable(fifo)  # returns: a FIFO is never opened by the check


def test_write_replaces_the_file_keeps_its_mode_and_writes_through_a_link(tmp_path):
    out = tmp_path / "report.md"
    out.write_text("old")
    out.chmod(0o640)
    link = tmp_path / "latest.md"
    link.symlink_to(out)
    write_text(link, "new")
    assert out.read_text() == "new" and link.is_symlink()
    assert out.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.md", "report.md"]


def test_an_interrupted_write_leaves_the_old_file(tmp_path, monkeypatch):
    out = tmp_path / "report.md"
    out.write_text("the old report\n")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_text(out, "the new report\n" * 1000)
    assert out.read_text() == "the old report\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]


@pytest.mark.isolated
def test_a_write_past_the_disk_limit_leaves_the_old_file_whole(tmp_path):
    """A write that fails part-way (the file-size limit stands in for a full disk) is one line,
    and the file is the old one, not the first part of the new one."""
    out = tmp_path / "report.md"
    out.write_text("the old report\n")
    code = textwrap.dedent(
        f"""
        import resource, signal, sys
        from bakeoff.errors import SpecError
        from bakeoff.outfiles import write_text
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
        try:
            write_text({str(out)!r}, "x" * 100_000)
        except SpecError as exc:
            print(exc.one_line())
        """
    )
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith(f"cannot write {out}: File too large"), ran.stdout
    assert out.read_text() == "the old report\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]


def test_export_refuses_to_write_over_the_database_and_writes_whole(tmp_path):
    from bakeoff.store.transfer import export

    db = tmp_path / "kb.db"
    store = Store.open(db)
    run = make_run("r1", "2025-01-01T00:00:00+00:00", environment(), [target_result("cpu")])
    store.save_run(run)
    before = db.read_bytes()
    for path in (db, tmp_path / "kb.db-wal"):
        with pytest.raises(SpecError, match="writing there would destroy it"):
            export(store, path)
    assert db.read_bytes() == before and Store.open(db, create=False).get_run("r1").run_id == "r1"
    out = tmp_path / "runs.jsonl"  # the control: an ordinary path gets the whole export, and nothing beside it
    assert export(store, out).runs == 1 and out.read_text().count("\n") >= 2
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("kb.db")) == ["runs.jsonl"]
