"""A single trial starts its workers before it builds the workload, and ends every one of them.

Where workers are forked (Linux), the trial's fork server is what starts before the build, and
each session's worker is forked from it on demand; where they are spawned (elsewhere, or when the
server cannot start: the ``spawned`` fixture), the first wave of workers starts before the build.
The workload here records, when the trial's own process (or a worker) builds it, which spawned
workers and fork servers are already running; the rounds of each result record the pid of the
worker that timed them.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import psutil
import pytest

import bakeoff
from bakeoff.launch.process import Worker

pytestmark = pytest.mark.isolated

FAST = {"min_samples": 5, "min_seconds": 0.0}

FACTORY = textwrap.dedent("""
    import json
    import os

    import psutil
    import torch
    from torch import nn


    def _record():  # the trial process's workers alive as this process (the trial's, or a worker) builds
        from bakeoff.launch.forkserver import server_pid

        parent = int(os.environ["BAKEOFF_TEST_PARENT"])
        workers, servers = [], []
        for child in psutil.Process(parent).children(recursive=True):  # a clone is a template's child
            try:
                line = " ".join(child.cmdline())
                if child.status() == psutil.STATUS_ZOMBIE:
                    continue
                if "spawn_main" in line and child.ppid() == parent:
                    workers.append(child.pid)
                elif "bakeoff.launch.forkserver" in line and not (child.ppid() == parent and "--clones" in line):
                    servers.append(child.pid)  # a server started fresh or cloned (not a template itself)
            except psutil.NoSuchProcess:
                pass
        where = "trial" if os.getpid() == parent else "worker"
        row = {"in": where, "workers": workers, "servers": servers, "pid": os.getpid(), "forked_from": server_pid()}
        with open(os.environ["BAKEOFF_TEST_RECORD"], "a", encoding="utf-8") as handle:
            handle.write(json.dumps(row) + "\\n")


    def watched():
        _record()
        return nn.Linear(8, 4), (torch.randn(2, 8),)


    def broken():
        _record()
        raise ValueError("seeded: this factory cannot build its model")
""")


def _workers_alive() -> list[int]:
    """This process's spawned workers still running (or not yet reaped)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "spawn_main" in " ".join(child.cmdline()):
                found.append(child.pid)
        except psutil.NoSuchProcess:
            pass
    return found


@pytest.fixture
def watched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    factory = tmp_path / "factory.py"
    factory.write_text(FACTORY, encoding="utf-8")
    record = tmp_path / "record.jsonl"
    monkeypatch.setenv("BAKEOFF_TEST_PARENT", str(os.getpid()))
    monkeypatch.setenv("BAKEOFF_TEST_RECORD", str(record))

    def at_build(where: str = "trial", what: str = "workers") -> list:
        """The spawned workers alive at each build in the trial's process (or in a worker), in
        order; ``what``: another field of the record (``servers``, ``pid``, ``forked_from``)."""
        if not record.exists():
            return []
        rows = [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines()]
        return [row[what] for row in rows if row["in"] == where]

    return f"py:{factory}", at_build


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch):
    """As where workers cannot be forked (not Linux, or no fork server): each one is spawned."""
    import bakeoff.launch.warm

    monkeypatch.setattr(bakeoff.launch.warm, "forkable", lambda: False)


@pytest.fixture
def cores(monkeypatch: pytest.MonkeyPatch):
    """As if this machine had 5 cores: up to 4 workers may be started early beside the trial."""
    import bakeoff.runner.workers

    monkeypatch.setattr(bakeoff.runner.workers, "_parallel_imports", lambda: 4)


def _pids(result) -> set[int]:
    return {r["pid"] for r in result.conditions["rounds"]}


def test_the_reference_worker_is_running_before_the_workload_is_built(spawned, watched, db):
    spec, at_build = watched
    assert not _workers_alive()
    run = bakeoff.trial(f"{spec}:watched", on="cpu", db=db, **FAST)
    (ref,) = run.results
    assert ref.status == "ok" and ref.verdict == "pass"
    (alive,) = at_build()  # built once in this process
    assert len(alive) == 1
    assert _pids(ref) == set(alive)  # the worker started early is the one that timed the reference
    assert not _workers_alive()


def test_a_worker_started_for_a_target_skipped_as_unavailable_is_stopped_before_timing(spawned, watched, cores, db):
    spec, at_build = watched
    run = bakeoff.trial(f"{spec}:watched", on="cpu,neuron", db=db, **FAST)
    ref, skipped = run.results
    assert skipped.status == "skipped" and ref.verdict == "pass"
    (alive,) = at_build()
    assert len(alive) == 2  # one per session timed in turns, before anyone knew neuron is missing
    assert _pids(ref) < set(alive)
    (in_session,) = at_build("worker")  # as the reference's worker built the model: itself alone
    assert in_session == sorted(_pids(ref))
    assert not _workers_alive()


def test_each_replicate_has_a_process_of_its_own_in_turns_or_one_after_another(spawned, watched, cores, db):
    spec, at_build = watched
    turns = bakeoff.trial(f"{spec}:watched", on="cpu", db=db, replicates=2, **FAST)
    assert len(_pids(turns.results[0])) == 2
    (alive,) = at_build()
    assert set(alive) == _pids(turns.results[0])  # both started before the build, and both used
    after = bakeoff.trial(f"{spec}:watched", on="cpu", db=db, replicates=2, interleave=False, **FAST)
    assert len(_pids(after.results[0])) == 2  # never a worker reused for the second replicate
    _, alive = at_build()
    assert len(alive) == 1  # the first only: a second would import while the first is timed
    assert not _workers_alive()


def test_a_target_with_environment_switches_gets_no_early_worker(spawned, watched, cores, db):
    spec, at_build = watched
    run = bakeoff.trial(f"{spec}:watched", on="cpu?threads=1", db=db, env=["BAKEOFF_FIXTURE_SCALE=1"], **FAST)
    assert [r.status for r in run.results] == ["ok", "ok"]
    (alive,) = at_build()
    assert len(alive) == 1  # the reference's: the other must import with the switch set
    assert _pids(run.results[0]) == set(alive)
    assert _pids(run.results[1]).isdisjoint(alive)
    assert not _workers_alive()


def test_no_more_workers_start_early_than_the_cores_allow_beside_the_trial(spawned, watched, db):
    from bakeoff.runner.workers import _parallel_imports

    spec, at_build = watched
    run = bakeoff.trial(f"{spec}:watched", on="cpu?threads=1,cpu?threads=2,cpu?threads=3", db=db, **FAST)
    assert [r.verdict for r in run.results] == ["pass"] * 4
    (alive,) = at_build()
    assert len(alive) == min(4, _parallel_imports())
    assert not _workers_alive()


def test_workers_started_early_end_when_the_workload_does_not_build(spawned, watched, db):
    spec, at_build = watched
    with pytest.raises(bakeoff.BakeoffError, match="seeded: this factory cannot build"):
        bakeoff.trial(f"{spec}:broken", on="cpu", db=db, **FAST)
    (alive,) = at_build()
    assert len(alive) == 1  # it had started
    assert not _workers_alive()
    assert not db.exists()  # bad input still creates no database


def test_a_worker_asked_to_leave_exits_cleanly():
    worker = Worker(preload=("torch",))
    worker.retire()  # asked, not waited for
    worker.close()
    assert worker.process.exitcode == 0
    assert not worker.crash_log.parent.exists()  # its files are gone


def test_a_worker_ignores_ctrl_c_from_its_first_instruction():
    """Started early, a worker is still importing when a user presses Ctrl-C at once: the
    terminal's SIGINT reaches it too, and must neither kill it nor print a traceback."""
    import signal
    import time

    worker = Worker(preload=("torch",))
    for _ in range(5):  # while the interpreter starts, then while it imports
        os.kill(worker.process.pid, signal.SIGINT)
        time.sleep(0.1)
    assert worker.process.is_alive()
    worker.close()
    assert worker.process.exitcode == 0


def _server_children(server: int) -> list[int]:
    try:
        return [c.pid for c in psutil.Process(server).children() if c.status() != psutil.STATUS_ZOMBIE]
    except psutil.NoSuchProcess:
        return []


def test_forked_each_session_has_a_process_of_its_own_from_the_server_started_before_the_build(watched, db):
    spec, at_build = watched
    run = bakeoff.trial(f"{spec}:watched", on="cpu,cpu?threads=2", db=db, replicates=2, **FAST)
    assert [r.verdict for r in run.results] == ["pass", "pass"]
    (servers,) = at_build(what="servers")  # this process's fork servers (other tests' kinds too)
    assert not at_build()[0]  # nothing spawned
    (server,) = set(at_build("worker", "forked_from"))  # every session's worker, forked from one server
    assert server in servers  # which was up as the trial built the workload
    pids = [_pids(r) for r in run.results]
    assert all(len(p) == 2 for p in pids) and pids[0].isdisjoint(pids[1])  # a process per session
    built_in = set(at_build("worker", "pid"))
    assert pids[0] | pids[1] < built_in
    # the others: the reference's eager runs (its first call, the baseline), each in a process forked for them
    assert len(built_in - (pids[0] | pids[1])) == 2
    assert not _server_children(server)  # every worker ended with the trial; the server stays for the next
    again = bakeoff.trial(f"{spec}:watched", on="cpu", db=db, **FAST)
    assert set(at_build("worker", "forked_from")) == {server}  # the next trial of this process reuses it
    assert _pids(again.results[0]).isdisjoint(pids[0] | pids[1])
    assert not _server_children(server)


def test_forked_a_target_with_environment_switches_is_spawned_and_sees_them(watched, db):
    spec, at_build = watched
    run = bakeoff.trial(f"{spec}:watched", on="cpu?threads=1", db=db, env=["BAKEOFF_FIXTURE_SCALE=1"], **FAST)
    assert [r.status for r in run.results] == ["ok", "ok"]
    forked = dict(zip(at_build("worker", "pid"), at_build("worker", "forked_from"), strict=True))
    (reference,) = _pids(run.results[0])
    (switched,) = _pids(run.results[1])
    assert forked[reference] is not None  # forked from the server
    assert forked[switched] is None  # spawned: it imports with the switch set
    assert not _workers_alive()


def test_forked_a_workload_that_does_not_build_leaves_no_worker(watched, db):
    spec, at_build = watched
    with pytest.raises(bakeoff.BakeoffError, match="seeded: this factory cannot build"):
        bakeoff.trial(f"{spec}:broken", on="cpu,cpu?threads=2", db=db, **FAST)
    (servers,) = at_build(what="servers")
    assert servers and all(not _server_children(s) for s in servers)
    assert not _workers_alive()
    assert not db.exists()
