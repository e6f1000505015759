from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

# A suite started in the background (nohup, or `cmd &` without job control) inherits an ignored
# SIGINT, and so would every process it starts: the tests that press Ctrl-C need it heard.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Where the environment keeps Python from writing bytecode (PYTHONDONTWRITEBYTECODE, set in many
# images), each worker of the suite would rewrite and compile every test module again (8 s of CPU
# apiece on two cores), and every run forked from it each bakeoff module it imports. The suite's
# processes write it instead, to the __pycache__ folders git ignores.
sys.dont_write_bytecode = False

# Every process the suite starts hashes as a run of `bakeoff exec` does (its default --seed 0), so
# that the fork servers the runs start can be clones of this worker's template (see _forking_cli).
os.environ.setdefault("PYTHONHASHSEED", "0")

# PyTorch's OpenMP threads (libgomp) spin after each parallel region before they sleep. The suite
# runs a worker more than there are cores, each with processes of its own, so the spinning takes
# CPU from the others' work: test_localization.py and test_compilation.py on two workers used
# 134-142 CPU-s spinning and 119-120 sleeping at once, alternated on one machine. The tests that
# compare times seed differences far above a thread's wake-up. Set before any of the suite's
# processes imports torch; every process they start inherits it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

FIXTURES = Path(__file__).parent / "fixtures"
MODELS = FIXTURES / "models.py"

#: The test device's build, started in the background by the controller of a parallel run.
_EMU_BUILD: list[subprocess.Popen] = []


def pytest_configure(config: pytest.Config) -> None:
    """The controller of a parallel run starts building the test device's extension while its
    workers start and collect. Built inside the first test that needed it, on one core, the
    other workers' first tests waited on its lock: two workers for 19 of a clean clone's first
    30 s. Every loader takes that lock, so a test that comes first still waits for this build
    rather than making another; where the extension is built already, this only checks it."""
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", None) or config.option.collectonly:
        return
    build = "from bakeoff.emu.extension import load_extension; load_extension()"
    _EMU_BUILD.append(
        subprocess.Popen([sys.executable, "-c", build], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    """A build still running when the run ends (one that never needed the device) is stopped
    with every process it started, found before any is killed: ninja starts each compiler in a
    process group of its own, which a kill of the build's group left compiling. The next loader
    clears the lock it held."""
    import psutil

    from bakeoff.launch.reaping import descendants

    for build in _EMU_BUILD:
        if build.poll() is None:
            started = descendants(build.pid)
            build.kill()
            for process in started:
                with contextlib.suppress(psutil.Error):
                    process.kill()
        build.wait()


def py_workload(function: str, **options: str) -> str:
    """A ``py:`` spec for a factory in tests/fixtures/models.py."""
    query = "&".join(f"{k}={v}" for k, v in options.items())
    return f"py:{MODELS}:{function}" + (f"?{query}" if query else "")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "bakeoff.db"


EMU_ENV = {"BAKEOFF_EMU": "1"}
#: The environment variable a test marks the processes it starts with (their children inherit it).
MARK = "BAKEOFF_TEST_MARK"


def marked(marker: str) -> list[int]:
    """Processes whose environment carries ``MARK=marker``, by pid."""
    found = []
    needle = f"{MARK}={marker}".encode()
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if needle in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
        except (OSError, ValueError):
            continue
    return found


def kill_9_when_started(process: subprocess.Popen, marker: str, processes: int, settle_s: float) -> list[int]:
    """``kill -9`` of ``process`` once ``processes`` marked processes run (it among them) and
    ``settle_s`` more have passed; the pids of those it started that were running then."""
    import time

    try:
        deadline = time.monotonic() + 240
        while len(marked(marker)) < processes and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(settle_s)
        started = [pid for pid in marked(marker) if pid != process.pid]
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    return started


def gone(pid: int, within_s: float = 10.0) -> bool:
    """Whether process ``pid`` has ended (a zombie has) within ``within_s``."""
    import time

    import psutil

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def still_running(pids: list[int], within_s: float = 10.0) -> list[int]:
    """Those of ``pids`` still running after up to ``within_s`` for them to end."""
    import time

    deadline = time.monotonic() + within_s
    while any(Path(f"/proc/{pid}").exists() for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.5)
    return [pid for pid in pids if Path(f"/proc/{pid}").exists()]


_cli_server: dict = {}
#: What most CLI runs import once they start (the use cases behind the commands, the knowledge
#: base, numpy, rich): imported by the CLI runs' server too, 0.2 CPU-s less in each run. Nothing
#: here reads an installed plugin or the environment when imported.
_CLI_IMPORTS = (
    "bakeoff.api",
    "bakeoff.store",
    "bakeoff.runner.trial",
    "bakeoff.verdicts",
    "bakeoff.report.evidence",
    "sqlalchemy",
    "numpy",
    "rich.console",
    "psutil",
    "safetensors",
    "sqlite3",
)


def _forking_cli(env: dict[str, str]):
    """This worker's fork server for CLI runs in ``env``, or None: a fresh interpreter.

    A CLI run may change the variables a forked worker reads again (bakeoff's own, pytest's, the
    terminal's, the temporary directory: :func:`bakeoff.launch.clones.environment_key`); any
    other may be read when a module is imported, before the fork, so a run that changes one is a
    fresh interpreter. The server is a clone of this worker's template that imported PyTorch
    alone: so are the servers the CLI runs start themselves (an exec's, a dist check's, a trial's
    workers'), where their environment and preload allow, or of the template that imported
    transformers too, where they preload it (:mod:`bakeoff.launch.clones`).

    The servers are started in this worker's environment, and started again when it changed
    (libraries the tests run in this process set variables of their own, such as Ray's
    RAY_CLIENT_MODE, which every later run then inherits; inductor naming its cache directory
    does not count, :func:`bakeoff.launch.clones.environment_key`) or when the CLI's server broke."""
    import atexit

    from bakeoff.launch.clones import environment_key
    from bakeoff.launch.forkserver import ForkServer, forkable

    if not forkable() or os.environ.get("BAKEOFF_TEST_FRESH_CLI"):
        return None
    key = environment_key(env)
    if _cli_server.get("key") != key or _cli_server["servers"][-1].broken:
        if key != environment_key(os.environ):  # a test's own environment
            return None
        for server in _cli_server.pop("servers", ()):
            server.close()
        here = dict(os.environ)
        started = (
            ForkServer(("torch", "transformers", "transformers.models.auto.modeling_auto"), here, clones=True),
            ForkServer(("torch",), here, clones=True),  # handed the first: CLI runs reach both
            ForkServer(("torch", "bakeoff.cli.main", "tests.forked_cli", *_CLI_IMPORTS), here),
        )
        _cli_server.update(key=key, servers=started)
        if not _cli_server.get("registered"):
            atexit.register(lambda: [server.close() for server in _cli_server.get("servers", ())])
            _cli_server["registered"] = True
    server = _cli_server["servers"][-1]
    return None if server.broken else server


def bakeoff_cli(
    *args: str, env: dict | None = None, cwd: Path | str | None = None, timeout: float | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """``python -m bakeoff ARGS`` with its output captured, as ``subprocess.run(...,
    capture_output=True, text=True)`` gives it: forked from a warm process of this test worker
    that imported PyTorch and the CLI once (an interpreter's start-up is seconds on a loaded
    machine), in a session, directory and environment of its own, running what ``python -m
    bakeoff`` runs (tests/forked_cli.py). ``env`` is the whole environment (default: this
    process's). A run whose environment differs in what a module reads at import, or with
    ``BAKEOFF_TEST_FRESH_CLI`` set, is a fresh interpreter; a test that signals the process
    itself starts it with ``subprocess``."""
    return _python("main", ["-m", "bakeoff", *args], list(args), env, cwd, timeout, input)


class ForkedCLI:
    """A CLI run :func:`start_cli` forked, read as a ``subprocess.Popen`` with text pipes is
    (``communicate``, ``returncode``, ``kill``, ``wait``)."""

    def __init__(self, server, pid: int, here, command: list[str]) -> None:
        self._server, self.pid, self._here, self.args = server, pid, here, command
        self.returncode: int | None = None

    def _ended(self, timeout: float | None) -> int:
        if self.returncode is None:
            try:
                code = self._server.exit_code(self.pid, 3600.0 if timeout is None else timeout)
            except EOFError:  # the server ended, and its runs with it (SIGKILL, armed at their fork)
                code = -signal.SIGKILL
            if code is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 3600.0)
            self.returncode = code
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self._ended(timeout)
        out, err = (Path(self._here.name, f).read_text(errors="replace") for f in ("stdout", "stderr"))
        return out, err

    def kill(self) -> None:
        if self.returncode is None:
            self.returncode = self._server.stop(self.pid, 0.0)

    def wait(self, timeout: float | None = None) -> int:
        """Its exit code once it ended (as ``Popen.wait``); its output files go then."""
        code = self._ended(timeout)
        self._here.cleanup()
        return code


def start_cli(*args: str, env: dict | None = None, cwd: Path | str | None = None):
    """``python -m bakeoff ARGS`` started and not waited for, its output piped as text: forked
    as :func:`bakeoff_cli` forks a run where the environment allows (several may run at once,
    such as the machines of one job), else a fresh ``subprocess.Popen``."""
    import tempfile

    full = dict(os.environ if env is None else env)
    command = [sys.executable, "-m", "bakeoff", *args]
    server = _forking_cli(full)
    if server is not None:
        here = tempfile.TemporaryDirectory(prefix="bakeoff-cli-")
        stdout, stderr = (Path(here.name) / name for name in ("stdout", "stderr"))
        pid = server.fork("tests.forked_cli:main", [os.devnull, *args], full, str(cwd or os.getcwd()), stdout, stderr)
        if pid is not None:
            return ForkedCLI(server, pid, here, command)
        here.cleanup()
    return subprocess.Popen(command, cwd=cwd, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def python_script(
    script: Path, *args: str, env: dict | None = None, cwd: Path | str | None = None, timeout: float | None = None
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """``python SCRIPT ARGS`` as :func:`bakeoff_cli` runs the CLI: forked from this worker's warm
    process where the environment allows (what runs is what ``python SCRIPT`` runs: the script as
    ``__main__``, its directory first on the module path), else a fresh interpreter."""
    return _python("script", [str(script), *args], [str(script), *args], env, cwd, timeout, None)


def _python(
    entry: str, argv: list[str], forked_argv: list[str], env: dict | None, cwd: Path | str | None,
    timeout: float | None, input: str | None,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    import tempfile

    full = dict(os.environ if env is None else env)
    command = [sys.executable, *argv]
    server = _forking_cli(full)
    if server is not None:
        with tempfile.TemporaryDirectory(prefix="bakeoff-cli-") as here:
            stdin, stdout, stderr = (Path(here) / name for name in ("stdin", "stdout", "stderr"))
            if input is None:  # as this worker's own stdin is (pytest-xdist's)
                stdin = Path(os.devnull)
            else:
                stdin.write_text(input)
            ran = server.run(f"tests.forked_cli:{entry}", [str(stdin), *forked_argv], full, str(cwd or os.getcwd()),
                             stdout, stderr, timeout_s=timeout or 3600.0, grace_s=5.0)  # fmt: skip
            if ran is not None:
                out, err = (f.read_text(errors="replace") if f.exists() else "" for f in (stdout, stderr))
                if ran.code is None:
                    raise subprocess.TimeoutExpired(command, timeout or 3600.0, out, err)
                return subprocess.CompletedProcess(command, ran.code, out, err)
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=full, timeout=timeout, input=input)


def cli_trial(
    workload: str, on: str, tmp_path: Path, *extra: str, env: dict | None = None, command: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m bakeoff trial`` in a process of its own (:func:`bakeoff_cli`; ``command``: run
    that instead): targets in-process, 3 samples, JSON out.

    A process of its own keeps process-wide state (the emu device's PrivateUse1 name, OpenVINO's
    dynamo settings) out of pytest's own process.
    """
    args = ["trial", workload, "--on", on, "--db", str(tmp_path / "b.db"), "--in-process", "--samples", "3",
            "--min-time", "0", "--format", "json", *extra]  # fmt: skip
    if command is None:
        return bakeoff_cli(*args, env={**os.environ, **(env or {})}, timeout=600)
    return subprocess.run([*command, *args], capture_output=True, text=True, env={**os.environ, **(env or {})},
                          timeout=600)  # fmt: skip


def cli_result(workload: str, target: str, tmp_path: Path, *extra: str, **kwargs) -> dict:
    """The JSON result of ``target`` from :func:`cli_trial`, which must have exited 0."""
    result = cli_trial(workload, target, tmp_path, *extra, **kwargs)
    assert result.returncode == 0, result.stderr
    (found,) = [r for r in json.loads(result.stdout)["results"] if r["target"] == target]
    return found


def python_code(code: str, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """``python -c CODE ARGS`` as :func:`bakeoff_cli` runs the CLI: in a process of its own, so
    that process-wide state (such as the emu device's switches) stays out of pytest's process,
    forked from this worker's warm process (PyTorch and the CLI imported, nothing run) where the
    environment allows, else a fresh interpreter. A test of what a fresh interpreter imports
    starts one with ``subprocess``."""
    return _python("code", ["-c", code, *args], [code, *args], None, None, timeout, None)


def fresh_process_json(script: str, cases: list, timeout: int = 900) -> dict:
    """What ``script`` prints as JSON on its last line, run by :func:`python_code` with the
    JSON-encoded ``cases`` as its argument."""
    ran = python_code(script, json.dumps(cases), timeout=timeout)
    assert ran.returncode == 0, ran.stderr[-3000:]
    return json.loads(ran.stdout.splitlines()[-1])


def stored_cells(db: Path) -> int:
    """How many cells a sweep has stored in the SQLite file ``db`` (0 before its tables exist)."""
    import sqlite3

    try:
        with sqlite3.connect(db, timeout=5) as conn:
            return conn.execute("SELECT count(*) FROM sweep_cells").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


def sweep_until_stored(
    command: list[str], db: Path, cells: int, text: bool = False, env: dict | None = None
) -> subprocess.Popen:
    """Start ``command`` (a sweep into ``db``) and return it, still running, once it has stored
    ``cells`` cells (fails if it ended first): the moment to kill or interrupt it."""
    import time

    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=text, env=env)
    deadline = time.monotonic() + 300
    while stored_cells(db) < cells and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.1)
    assert process.poll() is None, "the sweep ended before it could be stopped"
    return process


def cli_in_process(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``bakeoff ARGS`` through its error boundary, in this process: (exit code, stdout, stderr)."""
    from bakeoff.cli.main import main

    capsys.readouterr()
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


#: Modules whose tests share module-scoped work (a compiled model, a sweep, a Ray cluster): run
#: on one worker under pytest-xdist (``--dist loadgroup``), so that work is done once.
SHARED_WORK = {
    "test_script_audit_host_work.py",
    "test_amp.py",
    "test_correctness_faults.py",
    "test_emu_device.py",
    "test_emu_collectives.py",
    "test_fit.py",
    "test_layers.py",
    "test_localization.py",
    "test_report_browser.py",
    "test_signals.py",
    "test_sweep_ray.py",
    "test_training_parity.py",
    "test_checkpoint.py",
    "test_quality.py",
    "test_coldstart.py",
    "test_script_launch.py",
    "test_workloads.py",
    "test_suite_grouping.py",
    "test_exec_ranks.py",
    "test_exec_nodes.py",
}
#: Modules where only the tests that read a module-scoped run share it: those tests carry an
#: ``xdist_group`` of their own, and the module's other tests spread over the workers.
GROUPED_BY_TEST = {
    "test_compilation.py",
    "test_exec.py",
    "test_exec_isolation.py",
    "test_serve_example.py",
    "test_sweep_cell_baseline.py",
}
_UNIT = Path(__file__).parent / "unit"


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups once to name the tests
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test outside ``tests/unit`` ``slow`` (the fast tier is ``-m "not slow"``), and
    keep the tests of a module that shares module-scoped work on one xdist worker."""
    slow = pytest.mark.slow
    for item in items:
        path = Path(str(item.fspath))
        if _UNIT not in path.parents:
            item.add_marker(slow)
        if path.name in SHARED_WORK:
            item.add_marker(pytest.mark.xdist_group(path.stem))
        elif path.name in ON_THE_CLOCK:
            item.add_marker(pytest.mark.xdist_group(ON_THE_CLOCK_GROUP))
    if hasattr(config, "workerinput"):  # an xdist worker: the order it reports is the order work is handed out
        items[:] = [item for scope in _work_order(items) for item in scope]


#: Modules whose tests mostly wait on the clock, a core or less busy: a service under traffic
#: at a fixed rate for seconds; a job, rank, sweep cell or localisation left to hang or run past
#: its timeout. One group, handed out first, so that one worker goes through them one after
#: another beside the two that keep the cores busy. Spread over the workers in collection order,
#: the services came last, two or three at once, and the suite's last three minutes ran with the
#: two cores 60% busy; with the hang and timeout modules in groups of their own, those came first
#: beside the services, and the first four minutes ran with the cores 75% busy (88% in one group).
ON_THE_CLOCK = {
    "test_serve_run.py", "test_serve_load.py", "test_serve_service.py", "test_serve_audit.py",
    "test_launch.py", "test_dist_watch.py", "test_localize_records.py", "test_sweep.py", "test_dist.py",
}  # fmt: skip
ON_THE_CLOCK_GROUP = "on_the_clock"


def _work_order(items: list[pytest.Item]) -> list[list[pytest.Item]]:
    """The suite's work units (an ``xdist_group`` or one test, as ``--dist loadgroup`` scopes
    them) in the order they are handed out (``--no-loadscope-reorder`` keeps it): the tests on
    the clock, then the other groups, most tests first (xdist's own order), then every other test
    in collection order."""
    scopes: dict[str, list[pytest.Item]] = {}
    for item in items:
        marks = item.iter_markers("xdist_group")
        names = {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in marks}
        scopes.setdefault("@" + "_".join(sorted(names)) if names else item.nodeid, []).append(item)
    first = "@" + ON_THE_CLOCK_GROUP
    return [unit for _, unit in sorted(scopes.items(), key=lambda scope: (scope[0] != first, -len(scope[1])))]


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker more than the cores. Most of the suite's time is spent in the
    processes its tests start (a script's runs, ranks, servers, a Ray cluster) while the test's
    own worker waits for them, so two workers on two cores left the cores idle about half the
    time (a load average near 1 over minutes)."""
    return (os.cpu_count() or 1) + 1
