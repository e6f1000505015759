"""The fork server (bakeoff.launch.forkserver): a run forked from a warm process behaves as a
fresh process started by run_command would: its own session, environment, directory and
streams, its exit code, a timeout that stops what it started, and nothing left after a kill -9
of the process that started the server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tests.conftest import gone as _gone

from bakeoff.launch.forkserver import ForkServer

ENTRY = textwrap.dedent(
    """
    import json, os, subprocess, sys, threading, time

    def report(argv):
        print(json.dumps({"cwd": os.getcwd(), "mark": os.environ.get("MARK"), "pid": os.getpid(),
                          "pgid": os.getpgid(0), "sid": os.getsid(0), "argv": argv}))
        print("to stderr", file=sys.stderr)
        return int(argv[0])

    def hang(argv):
        child = subprocess.Popen(["sleep", "600"])
        print(json.dumps({"pid": os.getpid(), "child": child.pid}), flush=True)
        time.sleep(600)

    def raises(argv):
        raise ValueError("boom in the run")

    def exits(argv):
        sys.exit(argv[0])

    def imported(argv):
        print(json.dumps(argv[0] in sys.modules))
        return 0

    def frozen(argv):
        import gc
        print(gc.get_freeze_count())
        return 0

    def thread(argv):
        def late():
            time.sleep(0.3)
            open(argv[0], "w").write("joined")
        threading.Thread(target=late).start()
        return 0
    """
)


@pytest.fixture
def server(tmp_path: Path):
    (tmp_path / "fsentry.py").write_text(ENTRY)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    with ForkServer(["fsentry"], env) as started:
        yield started


def _run(server: ForkServer, tmp_path: Path, entry: str, argv: list[str], timeout_s: float = 30.0, **env: str):
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    ran = server.run(
        f"fsentry:{entry}",
        argv,
        {**server.env, **env},
        work,
        tmp_path / "out.txt",
        tmp_path / "err.txt",
        timeout_s,
        1.0,
    )
    return ran, (tmp_path / "out.txt").read_text(), (tmp_path / "err.txt").read_text()


def _text(path: Path) -> str:
    return path.read_text().strip() if path.exists() else ""


def test_a_run_gets_its_own_session_environment_directory_streams_and_exit_code(server, tmp_path):
    first, out, err = _run(server, tmp_path, "report", ["3"], MARK="one")
    seen = json.loads(out)
    assert first is not None and first.code == 3
    assert seen["cwd"] == str(tmp_path / "work") and seen["mark"] == "one" and seen["argv"] == ["3"]
    assert seen["pgid"] == seen["pid"] == seen["sid"] != server.pid  # a group of its own
    assert err.strip() == "to stderr"
    second, out, _ = _run(server, tmp_path, "report", ["0"], MARK="two")
    assert second.code == 0 and json.loads(out)["mark"] == "two"  # streams truncated, env replaced
    assert json.loads(out)["pid"] != seen["pid"]


def test_what_the_server_imported_is_out_of_the_collectors_reach_in_every_run(server, tmp_path):
    """Frozen after the preload and after each later import: a run's full collection would
    otherwise write to, and so copy, every page the imports filled."""
    _, out, _ = _run(server, tmp_path, "frozen", [])
    after_preload = int(out)
    assert after_preload > 0
    assert server.preload("xml.dom.minidom") is not None
    _, out, _ = _run(server, tmp_path, "frozen", [])
    assert int(out) > after_preload


def test_exceptions_exits_and_threads_end_as_an_interpreter_would(server, tmp_path):
    raised, _, err = _run(server, tmp_path, "raises", [])
    assert raised.code == 1 and "ValueError: boom in the run" in err
    assert _run(server, tmp_path, "exits", ["a message"])[0].code == 1
    marker = tmp_path / "joined.txt"
    assert _run(server, tmp_path, "thread", [str(marker)])[0].code == 0
    assert marker.read_text() == "joined"  # the non-daemon thread ran to its end before the exit


def test_a_module_imported_later_is_in_the_runs_after_it_and_one_that_fails_leaves_runs_fresh(server, tmp_path):
    assert _run(server, tmp_path, "imported", ["colorsys"])[1].strip() == "false"
    assert server.preload("colorsys") is not None
    assert _run(server, tmp_path, "imported", ["colorsys"])[1].strip() == "true"
    assert server.preload("no_such_module_anywhere") is None
    assert "no_such_module_anywhere" in server.broken
    assert _run(server, tmp_path, "imported", ["colorsys"])[0] is None  # the caller starts a fresh one


def test_a_run_past_its_timeout_is_stopped_with_what_it_started(server, tmp_path):
    started = time.monotonic()
    ran, out, _ = _run(server, tmp_path, "hang", [], timeout_s=1.5)
    assert ran is not None and ran.timed_out
    assert time.monotonic() - started < 10
    pids = json.loads(out)
    assert _gone(pids["pid"]) and _gone(pids["child"])
    control, _, _ = _run(server, tmp_path, "report", ["0"])  # the server goes on
    assert control.code == 0


def test_runs_forked_together_end_as_a_group_the_first_failure_stopping_the_others(server, tmp_path):
    from bakeoff.launch.group import forked_member, run_group, stop

    work = tmp_path / "work"
    work.mkdir()

    def fork(i: int, entry: str, argv: list[str]):
        return forked_member(server, f"fsentry:{entry}", argv, server.env, work, tmp_path / f"{i}.out",
                             tmp_path / f"{i}.err")  # fmt: skip

    members = [fork(0, "hang", [])]
    deadline = time.monotonic() + 60
    while not _text(tmp_path / "0.out") and time.monotonic() < deadline:  # it has started its child
        time.sleep(0.05)
    members += [fork(1, "report", ["0"]), fork(2, "exits", ["7"])]
    assert all(m is not None for m in members)
    end = run_group(members, timeout_s=60, grace_s=0.5, linger_s=0.3)
    assert end.failed_first == 2 and end.stopped == (0,)  # the run that exited 7; the hung one stopped
    assert end.ran[1].code == 0 and end.ran[2].code == 1 and end.ran[0].code is not None
    hung = json.loads(_text(tmp_path / "0.out"))
    assert _gone(hung["pid"]) and _gone(hung["child"])  # what it started went with it
    began = time.monotonic()
    assert stop(members) == [r.code for r in end.ran]  # stopping ended runs again (Ctrl-C) waits for nothing
    assert time.monotonic() - began < 5
    control, _, _ = _run(server, tmp_path, "report", ["0"])  # the server goes on
    assert control.code == 0


def test_a_server_that_cannot_import_its_modules_refuses_runs_so_the_caller_starts_fresh_ones(tmp_path):
    with ForkServer(["bakeoff_no_such_module"], dict(os.environ)) as broken:
        assert broken.run("os:getpid", [], dict(os.environ), tmp_path, tmp_path / "o", tmp_path / "e", 5.0) is None
        assert "bakeoff_no_such_module" in broken.broken


def test_a_kill_9_of_the_client_leaves_neither_the_server_nor_its_run(tmp_path):
    (tmp_path / "fsentry.py").write_text(ENTRY)
    client = textwrap.dedent(
        f"""
        import json, os, sys, threading
        from pathlib import Path
        from bakeoff.launch.forkserver import ForkServer
        tmp = Path({str(tmp_path)!r})
        server = ForkServer(["fsentry"], {{**os.environ, "PYTHONPATH": str(tmp)}})
        print(server.pid, flush=True)
        server.run("fsentry:hang", [], server.env, tmp, tmp / "out.txt", tmp / "err.txt", 600.0)
        """
    )
    process = subprocess.Popen([sys.executable, "-c", client], stdout=subprocess.PIPE, text=True)
    server_pid = int(process.stdout.readline())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not _text(tmp_path / "out.txt"):
        time.sleep(0.05)
    run = json.loads((tmp_path / "out.txt").read_text())
    assert not _gone(run["pid"], within_s=0.2)  # the control: it runs while the client lives
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert _gone(server_pid) and _gone(run["pid"])
