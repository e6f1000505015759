"""Temporary directories named after their maker: a killed process's are removed later, a live one's kept."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from bakeoff.launch import tempdirs
from bakeoff.launch.tempdirs import owned_tempdir, remove_stale_tempdirs


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.mark.parametrize("kind", ["exec", "worker", "cell", "capture", "inductor"])
def test_a_killed_process_s_directory_is_removed_and_a_live_one_s_kept(tmp_path: Path, kind: str) -> None:
    dead, mine, host = _dead_pid(), os.getpid(), tempdirs.host_tag()
    other_host = "0123abcd" if host != "0123abcd" else "fedc9876"
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stale = tmp_path / f"bakeoff-{kind}-{dead}-{host}-ab_cd123"
        kept = [
            tmp_path / f"bakeoff-{kind}-{mine}-{host}-ab_cd123",  # this process's
            tmp_path / f"bakeoff-{kind}-{live.pid}-{host}-xyz78901",  # another live process's
            tmp_path / f"bakeoff-{kind}-{dead}-{other_host}-ab_cd123",  # made under another host's name
            tmp_path / f"bakeoff-{kind}-{host}-ab_cd123",  # no pid in the name
            tmp_path / f"bakeoff-{kind}-{dead}-ab_cd123",  # no host in the name
            tmp_path / f"bakeoff-{kind}-{dead}-{host}-ab_cd123-mine",  # not the exact pattern
            tmp_path / f"bakeoff-sweep-{dead}-{host}-ab_cd123",  # not a kind that names its maker
            tmp_path / f"other-{dead}-{host}-ab_cd123",
        ]
        for directory in [stale, *kept]:
            (directory / "work").mkdir(parents=True)
        (tmp_path / f"bakeoff-{kind}-{dead}-{host}-file0000").write_text("a file, not a directory")
        assert remove_stale_tempdirs(tmp_path) == [stale]
        assert not stale.exists() and all(d.is_dir() for d in kept)
        assert (tmp_path / f"bakeoff-{kind}-{dead}-{host}-file0000").is_file()
    finally:
        live.kill()
        live.wait()


def test_a_new_directory_names_this_process_and_first_removes_the_stale_ones(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    stale = tmp_path / f"bakeoff-worker-{_dead_pid()}-{tempdirs.host_tag()}-ab_cd123"
    stale.mkdir()
    made = owned_tempdir("cell")
    assert made.parent == tmp_path and made.is_dir()
    assert made.name.startswith(f"bakeoff-cell-{os.getpid()}-{tempdirs.host_tag()}-")
    assert not stale.exists()
    assert remove_stale_tempdirs(tmp_path) == [] and made.is_dir()  # this process's own is kept
    with pytest.raises(ValueError):
        owned_tempdir("sweep")
    assert "sweep" not in tempdirs.KINDS
