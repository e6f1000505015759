"""The execution spine: every way a job ends comes back as an outcome with the right category,
whichever launcher ran it; a command's whole process group is stopped at its timeout.

Each fault is seeded in a job of its own (a raise, an exit, a signal, SIGKILL, a hang, a job
that does not pickle); the control is a job that finishes, run by the same launcher. A fresh
process is either spawned or forked from a fork server (as ``bakeoff dist``'s ranks are): each
way a job ends reads the same from both.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.conftest import FIXTURES

from bakeoff.launch.command import run_command
from bakeoff.launch.deaths import died
from bakeoff.launch.forkserver import ForkServer, server_pid
from bakeoff.launch.job import Outcome
from bakeoff.launch.launchers import FreshProcess, Inline, Pooled
from bakeoff.launch.pool import WorkerPool

pytestmark = pytest.mark.isolated


@dataclass(frozen=True)
class Seeded:
    """A job that does ``what``: ``value`` (the control), ``raise``, ``exit``, ``segv``, ``kill``,
    ``hang``."""

    what: str
    phase: str = "seeded"

    def run(self) -> object:
        if self.what == "value":
            return {"pid": os.getpid(), "answer": 42, "forked_from": server_pid()}
        if self.what == "memory":
            return {"rss_file_kb": _rss_file_kb(os.getpid()), "name": multiprocessing.current_process().name}
        if self.what == "raise":
            raise ValueError("the seeded fault")
        if self.what == "exit":
            os._exit(3)
        if self.what == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        if self.what == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.what == "hang":
            _stuck_here()
        raise AssertionError(self.what)


@dataclass(frozen=True)
class LeavesBehind:
    """A job whose code starts a process in a session of its own, which sleeps: ``once`` forked
    (its parent is the worker), or ``twice`` (a daemon: its parent ends at once, so it is an
    orphan); each one's pid is returned. ``then_crash``: forked once, then the worker exits 3."""

    how: str
    phase: str = "leaves"

    def run(self) -> object:
        read, write = os.pipe()
        child = os.fork()
        if child == 0:
            os.close(read)
            os.setsid()
            if self.how == "twice" and os.fork() != 0:
                os._exit(0)
            os.write(write, str(os.getpid()).encode())
            os.close(write)
            time.sleep(30 if self.how == "then_crash" else 600)  # the first: nothing will end it
            os._exit(0)
        os.close(write)
        pid = int(os.read(read, 32))
        os.close(read)
        if self.how == "twice":
            os.waitpid(child, 0)
        if self.how == "then_crash":  # the worker dies; its child still holds the worker's pipe
            os._exit(3)
        return {"left": pid}


def _stuck_here() -> None:
    time.sleep(600)


def _rss_file_kb(pid: int) -> int:
    """The resident size of process ``pid``'s file-backed pages (its libraries' code), in KiB."""
    status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
    return int(status.split("RssFile:")[1].split()[0])


@dataclass(frozen=True)
class Unpicklable:
    phase: str = "unpicklable"
    held: object = None

    def run(self) -> object:
        return None


@pytest.fixture(scope="module")
def fork_server():
    with ForkServer(("torch", "bakeoff.launch.process"), dict(os.environ)) as server:
        yield server


@pytest.fixture(params=["spawned", "forked"])
def fresh(request: pytest.FixtureRequest) -> FreshProcess:
    """A fresh process per job, spawned or forked from the module's fork server."""
    return FreshProcess(server=request.getfixturevalue("fork_server") if request.param == "forked" else None)


def test_a_job_that_finishes_returns_its_value_in_a_fresh_process(fresh):
    outcome = fresh.run(Seeded("value"), timeout_s=60)
    assert outcome.ok and outcome.value["answer"] == 42
    assert outcome.value["pid"] != os.getpid()
    # forked from the server where one was given, a spawned interpreter where not
    assert outcome.value["forked_from"] == (fresh.server.pid if fresh.server else None)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forked workers are Linux's")
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the worker is its jobs' subreaper on Linux")
@pytest.mark.parametrize("how", ["once", "twice"])
def test_what_a_job_started_in_a_session_of_its_own_does_not_outlive_its_worker(fresh, how):
    """A fit's workload forked a child that called setsid() and slept: it outlived bakeoff."""
    import psutil

    outcome = fresh.run(LeavesBehind(how), timeout_s=60)
    assert outcome.ok, outcome.reason()
    left = outcome.value["left"]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if psutil.Process(left).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    else:
        os.kill(left, signal.SIGKILL)
        raise AssertionError(f"process {left}, started by the job in a session of its own, still runs")


def test_a_worker_that_dies_while_its_jobs_child_holds_its_pipe_is_a_crash_not_a_timeout(fresh):
    """The child inherited the worker's end of the pipe, which then never closed: the death was
    seen only at the job's timeout, and recorded as one."""
    began = time.monotonic()
    outcome = fresh.run(LeavesBehind("then_crash"), timeout_s=120)
    assert outcome.error is not None and outcome.error.category == "crash", outcome.reason()
    assert "exited with code 3" in outcome.reason(), outcome.reason()
    # seen by the exit status within a second or so, not when the child ends 30 s later and
    # the pipe closes (nor at the timeout; a worker that died takes its jobs' children only when
    # they are its own when it is closed: this one is left to end by itself)
    assert time.monotonic() - began < 20


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forked workers are Linux's")
def test_a_forked_workers_resident_memory_starts_where_its_servers_is(fork_server):
    """The kernel gives a forked child none of its parent's library pages until it touches them:
    without map_like, a forked worker's peak memory would read tens of MiB below a spawned one's."""
    from bakeoff.launch.residency import map_like

    outcome = FreshProcess(server=fork_server).run(Seeded("memory"), timeout_s=60)
    server = _rss_file_kb(fork_server.pid)
    assert outcome.ok and outcome.value["name"] == "bakeoff-worker"  # named as a spawned worker is
    assert outcome.value["rss_file_kb"] >= 0.9 * server
    parent, (read, write) = os.getpid(), os.pipe()
    child = os.fork()  # the control: a plain fork of this process, before and after map_like
    if child == 0:
        before = _rss_file_kb(os.getpid())
        mapped = map_like(parent)
        os.write(write, f"{before} {_rss_file_kb(os.getpid())} {mapped}".encode())
        os._exit(0)
    os.close(write)
    before, after, mapped = (int(v) for v in os.read(read, 100).split())
    os.waitpid(child, 0)
    os.close(read)
    here = _rss_file_kb(parent)
    assert before < 0.5 * here  # what a forked worker's figures would start from
    assert after >= 0.9 * here and mapped > (after - before) * 1024 * 0.5


def test_a_server_that_cannot_fork_leaves_the_worker_spawned():
    with ForkServer(("no_such_module_anywhere",), dict(os.environ)) as broken:
        outcome = FreshProcess(server=broken).run(Seeded("value"), timeout_s=60)
        assert broken.broken and "no_such_module_anywhere" in broken.broken
    assert outcome.ok and outcome.value["answer"] == 42 and outcome.value["forked_from"] is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forked workers are Linux's")
def test_a_worker_whose_directory_is_too_deep_for_a_socket_is_still_forked(
    fork_server, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep's cell runner keeps its target workers' directories inside its own: past a Unix
    socket's path limit, each of a cell's workers was spawned, paying an interpreter's start and
    PyTorch's import."""
    deep = tmp_path / ("d" * 64)  # the directory's own path is past the limit
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    short = tmp_path_factory.getbasetemp()
    monkeypatch.setenv("TMPDIR", str(short))
    outcome = FreshProcess(server=fork_server).run(Seeded("value"), timeout_s=60)
    assert outcome.ok and outcome.value["forked_from"] == fork_server.pid
    # the socket's directory went as the worker connected; the worker's own, with it
    assert not list(short.glob(f"bakeoff-worker-{os.getpid()}-*")) and not list(deep.iterdir())


@pytest.mark.parametrize(
    ("what", "category", "kind", "said"),
    [
        ("raise", "exception", "ValueError", "the seeded fault"),
        ("exit", "crash", "WorkerExit", "worker exited with code 3 without a result during 'seeded'"),
        ("segv", "crash", "SIGSEGV", "worker died from signal SIGSEGV during 'seeded'"),
        ("kill", "out_of_memory", "SIGKILL", "worker killed by SIGKILL (most likely the out-of-memory killer)"),
    ],
)
def test_each_way_a_job_dies_is_its_outcome_with_its_category(fresh, what, category, kind, said):
    outcome = fresh.run(Seeded(what), timeout_s=60)
    assert not outcome.ok and outcome.value is None
    error = outcome.error
    assert (error.category, error.type, error.phase) == (category, kind, "seeded"), error
    assert said in error.message
    if what == "raise":
        assert "the seeded fault" in error.traceback and "test_launch.py" in error.traceback
    if what == "segv":  # faulthandler's stack names the job's own line
        assert "test_launch.py" in error.traceback


def test_a_hung_job_times_out_with_the_stack_it_was_stuck_in(fresh):
    began = time.monotonic()
    outcome = fresh.run(Seeded("hang"), timeout_s=1.5)
    assert time.monotonic() - began < 60
    assert outcome.error.category == "timeout" and outcome.error.type == "Timeout"
    assert outcome.error.message == "no reply to 'seeded' within 1.5 s"
    assert "_stuck_here" in outcome.error.traceback  # dumped by faulthandler before the kill


def test_a_job_that_does_not_pickle_is_its_own_failure():
    outcome = FreshProcess().run(Unpicklable(held=lambda: None), timeout_s=60)
    assert outcome.error.category == "exception" and outcome.error.phase == "unpicklable"


def test_inline_returns_the_same_outcomes_and_lets_ctrl_c_through():
    assert Inline().run(Seeded("value"), 1).value["pid"] == os.getpid()
    raised = Inline().run(Seeded("raise"), 1)
    assert (raised.error.category, raised.error.type) == ("exception", "ValueError")

    @dataclass(frozen=True)
    class Interrupted:
        phase: str = "x"

        def run(self) -> None:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Inline().run(Interrupted(), 1)


def test_a_pooled_worker_is_reused_until_a_job_kills_it():
    with WorkerPool(preload=()) as pool:
        launcher = Pooled(pool, key="k")
        first, second = (launcher.run(Seeded("value"), 60) for _ in range(2))
        assert first.value["pid"] == second.value["pid"]  # warm: the same process
        assert launcher.run(Seeded("exit"), 60).error.category == "crash"
        after = launcher.run(Seeded("value"), 60)
        assert after.ok and after.value["pid"] != first.value["pid"]  # a dead worker is never reused


class _Interrupted(BaseException):
    """What a Ctrl-C is to the launcher: an exception it must not swallow."""


@pytest.mark.parametrize("pooled", [False, True])
def test_an_interrupted_launch_ends_its_worker_at_once_and_goes_through(pooled):
    import multiprocessing

    def interrupt(*_: object) -> None:
        raise _Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    pool = WorkerPool(preload=())
    launcher = Pooled(pool, key="k") if pooled else FreshProcess()
    began = time.monotonic()
    try:
        signal.setitimer(signal.ITIMER_REAL, 4.0)  # the worker has started and is in the hung job
        with pytest.raises(_Interrupted):
            launcher.run(Seeded("hang"), timeout_s=120)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        pool.close()
    assert time.monotonic() - began < 30  # not the job's 120 s, nor a 30 s wait for it to leave
    assert not [p for p in multiprocessing.active_children() if p.name == "bakeoff-worker"]


def test_outcome_reason_names_an_exception_by_its_type():
    assert Outcome(value=1).reason() == ""
    assert FreshProcess().run(Seeded("raise"), 60).reason() == "ValueError: the seeded fault"


_SPAWNS_A_CHILD = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(child.pid, flush=True)
time.sleep(600)
"""


def test_a_command_past_its_time_is_stopped_with_everything_it_started(tmp_path: Path):
    out = tmp_path / "out.txt"
    with open(out, "w") as stdout:
        ran = run_command([sys.executable, "-c", _SPAWNS_A_CHILD], os.environ, 3, stdout=stdout, grace_s=0.5)
    assert ran.timed_out and ran.code is None
    child = int(out.read_text().split()[0])
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child), "the command's child outlived its timeout"


def test_a_commands_death_by_signal_is_classified_and_a_clean_exit_is_not():
    killed = run_command(
        [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"], os.environ, 60
    )
    assert killed.code == -signal.SIGKILL
    assert died(killed.code, "", phase="script").category == "out_of_memory"
    clean = run_command([sys.executable, "-c", "print('fine')"], os.environ, 60)
    assert clean.code == 0 and clean.stdout.strip() == "fine"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "State:\tZ" in status.read_text())


def test_a_worker_killed_while_it_starts_is_a_death_not_a_start_that_never_came(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))  # the spawned interpreter imports from the same path
    started = time.monotonic()
    outcome = FreshProcess(preload=("dies_on_import",), who="the probe").run(Seeded("value"), 600)
    assert time.monotonic() - started < 60  # not the start-up allowance
    assert outcome.error is not None and outcome.error.category == "out_of_memory", outcome  # how SIGKILL reads
    assert "did not start" not in outcome.reason() and "SIGKILL" in outcome.reason(), outcome.reason()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forked workers are Linux's")
def test_the_shared_server_is_kept_until_an_import_time_variable_changes(monkeypatch, tmp_path):
    from bakeoff.launch.warm import shared_server

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)  # as in a process that never ran inductor
    first = shared_server(("json",))
    monkeypatch.setenv("BAKEOFF_SOMETHING_OF_ITS_OWN", "1")  # read again by every worker
    monkeypatch.setenv("TMPDIR", str(Path.cwd()))
    assert shared_server(("json",)) is first
    other = shared_server(("json", "csv"))  # another preload: a server of its own, the first kept
    assert other is not first and first.broken is None
    monkeypatch.setenv("TORCH_SHOW_CPP_STACKTRACES", "1")  # may be read when PyTorch is imported
    second = shared_server(("json",))
    assert second is not first and first.broken == "the fork server was closed" and first.process is None
    assert second.env["TORCH_SHOW_CPP_STACKTRACES"] == "1"
    outcome = FreshProcess(server=second).run(Seeded("value"), timeout_s=60)
    assert outcome.ok and outcome.value["forked_from"] == second.pid
    # inductor names its cache directory in the environment the first time anything asks (a
    # compile, a FLOP count), and reads it when it compiles, never when imported: kept
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    cache_dir()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] and shared_server(("json",)) is second
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    assert shared_server(("json",)) is second


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forked workers are Linux's")
def test_a_server_past_the_kept_number_is_ended_only_once_its_workers_have(monkeypatch):
    import bakeoff.launch.warm as warm
    from bakeoff.launch.process import Worker

    warm.close_servers()
    monkeypatch.setattr(warm, "KEPT", 1)
    busy = warm.shared_server(("json",))
    worker = Worker(server=busy)
    assert worker.started(60).ok and busy.process is not None
    second = warm.shared_server(("csv",))
    assert busy.broken is None and worker.alive  # its worker still runs: kept past the number
    worker.close()
    assert busy.idle
    third = warm.shared_server(("json", "csv"))
    assert busy.broken == "the fork server was closed" and second.broken == "the fork server was closed"
    assert third.broken is None
    warm.close_servers()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forked workers are Linux's")
def test_a_server_replaced_while_its_worker_runs_is_ended_only_after_it(monkeypatch):
    import bakeoff.launch.warm as warm
    from bakeoff.launch.process import Worker

    old = warm.shared_server(("json", "csv", "textwrap"))
    worker = Worker(server=old)
    assert worker.started(60).ok
    monkeypatch.setenv("TORCH_SHOW_CPP_STACKTRACES", "0")  # read at import: a new server for what follows
    new = warm.shared_server(("json", "csv", "textwrap"))
    assert new is not old and old.broken is None and worker.alive  # the running worker is not killed
    assert worker.request(Seeded("value"), 60).ok
    worker.close()
    warm.shared_server(("json", "csv", "textwrap"))  # the next request ends the old one, now idle
    assert old.broken == "the fork server was closed" and new.broken is None
