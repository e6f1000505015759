"""A spawned worker interpreter, and the one place its timeouts are enforced and its death read.

Each worker is a *spawned* interpreter: compile backends and device plugins that change
process-global state (dynamo settings, PrivateUse1 registration) cannot leak between jobs, and
peak memory is measured per worker. It imports what it ``preload``\\ s, says ``ready``, then serves
commands with its ``serve`` loop: by default :func:`serve_jobs` (a :class:`~bakeoff.launch.job.Job`
in, its :class:`~bakeoff.launch.job.Outcome` out, until ``close``); a pipeline with steps (a
target's session, a sweep's cells) passes its own loop. The parent talks to it through
:meth:`Worker.request`: a reply, or the error of a worker that died (its exit code or signal,
:mod:`bakeoff.launch.deaths`) or did not answer in time (its Python stack dumped first, by
``faulthandler``, then killed).

Workers never outlive the parent: on Linux the kernel kills them when it dies (the parent-death
signal), elsewhere a watcher thread notices the parent is gone. They ignore Ctrl-C, which the
terminal sends to the whole process group: the parent alone decides to stop them, quietly.
Their files (crash log, phase, captured output) live in a temporary directory named after the
parent (:mod:`bakeoff.launch.tempdirs`), removed when the worker is closed, or by a later
bakeoff process when the parent was killed.
"""

from __future__ import annotations

import importlib
import json
import multiprocessing
import os
import select
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bakeoff.launch.deaths import died, timed_out
from bakeoff.launch.job import Outcome, run_inline
from bakeoff.launch.reaping import descendants, end_all, kill_group, running, subreaper
from bakeoff.launch.residency import map_like
from bakeoff.launch.tempdirs import owned_tempdir
from bakeoff.logtail import tail_text

__all__ = ["STARTUP_TIMEOUT_S", "Worker", "die_with_parent", "leave", "serve_jobs"]

_STACK_SIGNAL = getattr(signal, "SIGUSR1", None)  # asks a hung worker for its Python stack
#: How long a worker may take to start and import what it preloads (torch, transformers) on a
#: busy machine; a step's timeout counts from then.
STARTUP_TIMEOUT_S = 300.0
#: The longest path a Unix socket takes, less its final byte (see :func:`_socket_dir`).
_SOCKET_PATH_MAX = 100
#: How much of the crash log (faulthandler's stacks) an error keeps.
CRASH_LOG_CHARS = 4000

#: How often a wait for a worker's reply also reads whether it has ended (seconds).
_ALIVE_EVERY_S = 1.0

#: ``serve(conn, phase_file, capture_dir)``: a worker's command loop.
Serve = Callable[[Any, str, str], None]


def die_with_parent(parent_pid: int, signum: int = signal.SIGKILL) -> None:
    """Make sure this process cannot outlive ``parent_pid`` (a ``kill -9`` of bakeoff included):
    it gets ``signum`` when that parent ends (SIGKILL by default; another signal is for a process
    whose handler must end what it started first, and then itself)."""
    from bakeoff.launch.reaping import death_signal

    def orphaned() -> None:
        if signum == signal.SIGKILL:
            os._exit(1)
        os.kill(os.getpid(), signum)

    death_signal(signum)
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        orphaned()

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        orphaned()

    threading.Thread(target=watch, name="bakeoff-parent-watch", daemon=True).start()


def leave(code: int = 0) -> None:
    """End a worker that was asked to (with exit ``code``): what it registered to run on the way
    out runs (a compile backend's own worker pool is shut down, temporary files go), but not the
    interpreter's teardown of every module, which takes seconds once torch and transformers are
    imported."""
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(code)


def serve_jobs(conn: Any, phase_file: str, capture_dir: str) -> None:
    """The default command loop: each command is a job, answered with its outcome; ``close``
    ends the worker."""
    while True:
        command = conn.recv()
        if command == "close":
            conn.close()
            leave()
        conn.send(run_inline(command))


def _worker(
    conn: Any,
    crash_log: str,
    parent_pid: int,
    phase_file: str,
    capture_dir: str,
    preload: tuple[str, ...],
    serve: Serve,
) -> None:
    """A worker's life: arm the parent-death signal, ignore Ctrl-C, let ``faulthandler`` write
    to the crash log, import what it preloads, say ``ready``, then serve commands."""
    import faulthandler
    import importlib

    die_with_parent(parent_pid)
    subreaper()  # a workload's double-forked daemon stays a descendant, for close() to end
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # as its own children would have it (see _interrupts_held)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    with open(crash_log, "w", encoding="utf-8") as log:
        faulthandler.enable(log)
        if _STACK_SIGNAL is not None:
            faulthandler.register(_STACK_SIGNAL, file=log, all_threads=True)
        for name in preload:  # a warm worker pays its imports before its first job
            try:
                importlib.import_module(name)
            except Exception:
                pass  # a hint only: the job that needs it reports the missing or broken library
        if preload:
            import gc

            gc.freeze()  # the imported modules are for life: later collections need not walk them
        conn.send("ready")  # start-up is over: from now on each request has its own timeout
        try:
            serve(conn, phase_file, capture_dir)
        except (EOFError, BrokenPipeError, ConnectionResetError):
            os._exit(1)  # the parent is gone (killed: its death signal may not have landed yet): quietly


@contextmanager
def _interrupts_held() -> Iterator[None]:
    """Spawn a worker with Ctrl-C ignored from its first instruction, without losing one meant
    for this process. An ignored signal stays ignored across ``exec`` (and Python then installs
    no KeyboardInterrupt handler), so a Ctrl-C while the worker imports its first modules,
    before it ignores SIGINT itself, prints no traceback from it. Meanwhile this thread blocks
    SIGINT: one that arrives stays pending (a blocked signal is never discarded as ignored) and
    reaches this process's own handler once the spawn is done."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def forked_worker(argv: list[str]) -> int:
    """A worker forked from a fork server (:class:`Worker` given a ``server``): it takes its
    parent's module search path (as a spawned one does), connects back to its parent through the
    socket ``argv[0]``, then lives as a spawned worker does, dying with the server (which dies
    with bakeoff)."""
    path, crash_log, phase_file, capture_dir, serve_name, name, search_path, *preload = argv
    sys.path[:] = json.loads(search_path)
    multiprocessing.current_process().name = name  # what it serves, as a spawned worker's says
    map_like(os.getppid())  # its resident memory starts where a spawned worker's would
    tempfile.tempdir = None  # the run's TMPDIR, read again (the server's may differ)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    module, _, function = serve_name.partition(":")
    serve = getattr(importlib.import_module(module), function)
    _worker(Connection(sock.detach()), crash_log, os.getppid(), phase_file, capture_dir, tuple(preload), serve)
    return 0


def _socket_dir(tmp: Path) -> Path | None:
    """Where a forked worker's socket is bound until it connects: its own temporary directory
    ``tmp``; where that path is too long for a Unix socket (a sweep's cell runner keeps its
    workers' directories inside its own), a directory of its own in the environment's temporary
    directory; None where that is too long too (the worker is spawned)."""
    if len(str(tmp / "conn")) < _SOCKET_PATH_MAX:
        return tmp
    where = next((os.environ[name] for name in ("TMPDIR", "TEMP", "TMP") if os.environ.get(name)), "/tmp")
    try:
        short = owned_tempdir("worker", where)
    except OSError:
        return None
    if len(str(short / "conn")) < _SOCKET_PATH_MAX:
        return short
    shutil.rmtree(short, ignore_errors=True)
    return None


class _Forked:
    """A worker's process forked by a fork server, read as ``multiprocessing`` reads a spawned
    one (``is_alive``, ``join``, ``kill``, ``exitcode``, ``pid``); killing it kills its process
    group (what it started with it)."""

    def __init__(self, server: Any, pid: int) -> None:
        self.server = server
        self.pid = pid
        self.exitcode: int | None = None

    def join(self, timeout: float | None = None) -> None:
        if self.exitcode is None:
            try:
                self.exitcode = self.server.exit_code(self.pid, STARTUP_TIMEOUT_S if timeout is None else timeout)
            except EOFError:  # the server ended, and its runs with it
                self.exitcode = -signal.SIGKILL

    def is_alive(self) -> bool:
        self.join(0)
        return self.exitcode is None

    def kill(self) -> None:
        kill_group(self.pid)


class Worker:
    """A spawned worker process and the files it leaves for the parent (crash log, phase, output).

    ``preload`` names modules it imports before its first command, while the parent does other
    work. ``serve`` is its command loop (a top-level function: it is pickled by name);
    ``name`` is the process's ``multiprocessing`` name, which tells the worker (and a workload's
    code) what it serves. A worker that starts workers of its own must not be a ``daemon``
    (multiprocessing refuses); its owner then ends it explicitly, as every owner does anyway.

    Given a ``server`` (a :class:`~bakeoff.launch.forkserver.ForkServer` that imported what the
    worker preloads), the worker is forked from it instead, in a session of its own, and talks to
    its parent over a socket in its temporary directory: the interpreter's start-up is paid once
    per server. Where the server cannot fork it, it is spawned.
    """

    def __init__(
        self,
        preload: tuple[str, ...] = (),
        serve: Serve = serve_jobs,
        name: str = "bakeoff-worker",
        daemon: bool = True,
        server: Any = None,
    ) -> None:
        self._tmp = owned_tempdir("worker")  # a later process removes it if this one is killed
        self.crash_log = self._tmp / "crash.log"
        self.phase_file = self._tmp / "phase"
        self.capture_dir = self._tmp / "capture"
        self.key: Any = None
        self.broken = False
        self.ready = False
        self.retired = False
        self._listening: socket.socket | None = None
        self._socket_dir = _socket_dir(self._tmp) if server is not None else None
        self.conn: Any = None
        self.process: Any = None
        files = (str(self.crash_log), str(self.phase_file), str(self.capture_dir))
        if self._socket_dir is not None:
            self.process = self._fork(server, files, preload, serve, name)
        if self.process is None:
            ctx = multiprocessing.get_context("spawn")
            self.conn, child = ctx.Pipe(duplex=True)
            self.process = ctx.Process(
                target=_worker, args=(child, files[0], os.getpid(), *files[1:], preload, serve), name=name,
                daemon=daemon,
            )  # fmt: skip
            with _interrupts_held():
                self.process.start()
            child.close()

    def _fork(
        self, server: Any, files: tuple[str, ...], preload: tuple[str, ...], serve: Serve, name: str
    ) -> _Forked | None:
        assert self._socket_dir is not None
        path = str(self._socket_dir / "conn")
        self._listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listening.bind(path)  # in a temporary directory of this process's own: no one else's to reach
        self._listening.listen(1)
        argv = [path, *files, f"{serve.__module__}:{serve.__qualname__}", name, json.dumps(sys.path), *preload]
        out, err = (str(self._tmp / f"{stream}.log") for stream in ("stdout", "stderr"))
        pid = server.fork("bakeoff.launch.process:forked_worker", argv, dict(os.environ), os.getcwd(), out, err)
        if pid is None:
            self._close_listening()
            return None
        return _Forked(server, pid)

    def _close_listening(self) -> None:
        """The forked worker's socket is no longer listened to (it connected, or never will)."""
        if self._listening is not None:
            self._listening.close()
            self._listening = None
        if self._socket_dir is not None and self._socket_dir != self._tmp:
            shutil.rmtree(self._socket_dir, ignore_errors=True)

    def _accepted(self, timeout_s: float) -> bool:
        """A forked worker's connection back, within ``timeout_s`` (False: it ended or did not
        connect in time)."""
        if self.conn is not None:
            return True
        deadline = time.monotonic() + timeout_s
        assert self._listening is not None
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self._listening], [], [], min(0.1, max(0.0, deadline - time.monotonic())))
            if ready:
                sock, _ = self._listening.accept()
                self.conn = Connection(sock.detach())
                self._close_listening()
                return True
            if not self.process.is_alive():
                return False
        return False

    @property
    def alive(self) -> bool:
        return not self.broken and self.process.is_alive()

    def wait_ready(self, timeout_s: float) -> bool:
        """Wait until the worker has started and imported what it preloads (its ``ready``);
        False if it died or did not get there within ``timeout_s``."""
        if self.ready:
            return True
        began = time.monotonic()
        if not self._accepted(timeout_s):
            return False
        try:
            if self.conn.poll(max(0.0, timeout_s - (time.monotonic() - began))):
                self.ready = self.conn.recv() == "ready"
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            self.ready = False
        return self.ready

    def started(self, timeout_s: float, who: str = "worker") -> Outcome:
        """Wait for the worker's start (``timeout_s``, at least :data:`STARTUP_TIMEOUT_S`): an
        empty outcome, or the error of a worker that died or hung while it started (it is then
        ended)."""
        waited = max(timeout_s, STARTUP_TIMEOUT_S)
        if self.wait_ready(waited):
            return Outcome()
        self._ended(2.0)  # one killed a moment ago may not be reaped yet: not a hang
        if self.process.is_alive():
            return self._hung(f"{who} did not start within {waited:g} s", "start-up")
        return self._dead(who, "at start-up", "start-up")

    def send(self, command: Any, who: str = "worker", what: str = "") -> Outcome:
        """Send ``command`` without waiting: an empty outcome, or the error of a worker that died
        before it could take it."""
        try:
            if not self._accepted(STARTUP_TIMEOUT_S):
                raise BrokenPipeError
            self.conn.send(command)
        except (BrokenPipeError, ConnectionResetError, OSError):
            return self._dead(who, f"before '{what}' reached it" if what else "", what)
        return Outcome()

    def request(self, command: Any, timeout_s: float, who: str = "worker", what: str = "") -> Outcome:
        """Send ``command`` and wait up to ``timeout_s`` for the reply: its value, or the error
        of a worker that died (its exit code or signal) or did not reply in time (its stack
        dumped to the crash log, then killed). ``what`` names the command in the error."""
        what = what or (command if isinstance(command, str) else type(command).__name__)
        sent = self.send(command, who, what)
        return sent if not sent.ok else self.receive(timeout_s, who, what)

    def receive(self, timeout_s: float, who: str = "worker", what: str = "", when: str = "") -> Outcome:
        """The worker's next message within ``timeout_s``, or the error of its death (``when``
        says what it was doing; by default, ``what``) or silence."""
        try:
            if not self._accepted(timeout_s):
                raise EOFError
            # poll() returns early on a message *or* on the pipe closing because the worker died;
            # only a poll that runs out of time is a timeout (a dying worker may still be alive).
            # A process the job left running holds the pipe open past the worker's death, so its
            # exit status is read between slices of the wait too.
            deadline = time.monotonic() + max(0.0, timeout_s)
            while True:
                left = deadline - time.monotonic()
                if self.conn.poll(max(0.0, min(left, _ALIVE_EVERY_S))):
                    return Outcome(value=self.conn.recv())
                if not self.process.is_alive():
                    if self.conn.poll(0):  # its last word, sent as it ended
                        return Outcome(value=self.conn.recv())
                    raise EOFError
                if left <= _ALIVE_EVERY_S:
                    break
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            return self._dead(who, when or (f"during '{what}'" if what else ""), what)
        return self._hung(f"no reply to '{what}' within {timeout_s:g} s", what)

    def _dead(self, who: str, when: str, phase: str) -> Outcome:
        self.broken = True
        self._ended(10)
        if self.process.is_alive():  # closed its end of the pipe but will not exit
            self.process.kill()
            self._ended(10)
        return Outcome(error=died(self.process.exitcode, who, when, phase, self.crash_tail()))

    def _hung(self, message: str, phase: str) -> Outcome:
        self.broken = True
        self.dump_stack()
        self.process.kill()
        self._ended(10)
        return Outcome(error=timed_out(message, phase, self.crash_tail()))

    def crash_tail(self, chars: int = CRASH_LOG_CHARS) -> str:
        """The end of what ``faulthandler`` wrote (a crash's or a dumped hang's stacks)."""
        for log in (self.crash_log, self._tmp / "stderr.log"):  # a forked worker's start-up error: the latter
            said = tail_text(log, chars)
            if said.strip():
                return said
        return ""

    def dump_stack(self) -> None:
        """Ask a hung worker to write its Python stack to the crash log (faulthandler answers
        even when the worker is stuck inside C code), and give it a moment to do so."""
        if _STACK_SIGNAL is None or not self.process.is_alive() or self.process.pid is None:
            return
        before = self.crash_log.stat().st_size if self.crash_log.exists() else 0
        try:
            os.kill(self.process.pid, _STACK_SIGNAL)
        except OSError:
            return
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            if self.crash_log.exists() and self.crash_log.stat().st_size > before:
                time.sleep(0.1)  # let it finish writing every thread
                return
            time.sleep(0.02)

    def retire(self) -> None:
        """Ask the worker to leave, without waiting for it: :meth:`close` waits later."""
        if not self.broken and self.process.is_alive() and self.conn is not None:
            try:
                self.conn.send("close")
            except (BrokenPipeError, ConnectionResetError, OSError):
                pass
        self.broken = True
        self.retired = True

    def _ended(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the worker's process to end, by its exit status: a
        process its job left running holds a spawned worker's sentinel open, so its ``join``
        would wait the whole time for a worker that has ended."""
        if isinstance(self.process, _Forked):  # its fork server waits for it: one request, no sentinel
            self.process.join(timeout_s)
            return
        deadline = time.monotonic() + timeout_s
        while self.process.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)

    def close(self, kill: bool = False) -> None:
        """End the worker (asking it to leave, unless ``kill``), then what its jobs started that
        outlived it (a process in a session of its own, which its group's kill misses: the
        worker is their subreaper, so they are its descendants until it ends), and remove its
        files."""
        asked = self.retired
        self.broken = True
        started = descendants(self.process.pid)
        if not kill and self.process.is_alive() and self.conn is not None:
            if not asked:
                try:
                    self.conn.send("close")
                except (BrokenPipeError, ConnectionResetError, OSError):
                    pass
            self._ended(30)
        if self.process.is_alive():
            self.process.kill()
        self._ended(10)
        if started:
            end_all(lambda: [p for p in started if running(p)], settle_s=0.0, reap_s=5.0)
        if self.conn is not None:
            self.conn.close()
        self._close_listening()
        shutil.rmtree(self._tmp, ignore_errors=True)
