"""A user's service process, from its start to its stop: the lifecycle ``bakeoff serve`` measures.

:func:`start_service` starts a command line (``{port}`` and ``{device}`` filled in; a free
loopback port chosen when the command has ``{port}`` and no port is given) through a keeper
process (:mod:`bakeoff.serve.keeper`), in a process group of its own, with its output in files.
With a device mapping (``{"cuda": "emu"}``) the service's Python process is remapped exactly as
``bakeoff exec`` remaps a script's Python children (:mod:`bakeoff.script.children`); an empty
mapping runs it as written. It then waits for the health URL to answer a GET with a 2xx status,
polling with a short backoff (5 ms, growing by half each time, to 100 ms) and checking at each
poll whether the process has died. :meth:`Service.stop` ends the whole group (SIGTERM, a grace,
SIGKILL) and every process of the service that left it, and returns the :class:`Lifecycle`.

``ready_s`` is a cold replica's start-up: from just before the keeper starts the process to the
first healthy answer (both read on ``time.monotonic()``, one clock for every process on Linux
and macOS), so it includes the interpreter's start, imports, model loading and binding the port,
and at most one polling interval (100 ms at most, less early on) of delay.

Lifecycle faults are values, never exceptions (:class:`~bakeoff.results.values.ErrorInfo`, by
category):

* ``port_in_use``: the port was taken before the start (a socket already bound there: the
  service is not started, as a server already there would answer its health URL), or the service
  died saying its address was in use;
* ``crash`` (or ``out_of_memory`` for a SIGKILL, as :mod:`bakeoff.launch.deaths` classifies
  deaths): the process died before it was healthy (phase ``start``, with the tail of its
  stderr), or while it served (phase ``serve``: seen by :meth:`Service.check` or at the stop);
* ``timeout``: no healthy answer within the start's timeout (the last probe's outcome is named,
  after the last answer it got where that differs: ``answered 503, then no answer: ...``),
  or, in :meth:`Service.check`, a service that stopped answering (a hang);
* ``leftover``: processes that outlived the service's own process at the stop, killed and named.

What it cannot see: a service that answers its health URL before it can serve (``ready_s`` is
then early), and, off Linux, what :mod:`bakeoff.serve.keeper` says it cannot clean up.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from bakeoff.codec import Value
from bakeoff.launch.deaths import death
from bakeoff.logtail import tail_text
from bakeoff.results.values import ErrorInfo
from bakeoff.serve import keeper as keeper_module
from bakeoff.serve.address import PLACEHOLDERS, command_line, free_port, port_taken, probe, urls, words
from bakeoff.serve.keeper import SETTLE_S, STDERR, STDOUT

__all__ = [
    "KEEPER_LOG",
    "PLACEHOLDERS",
    "STDERR",
    "STDOUT",
    "Lifecycle",
    "Service",
    "command_line",
    "free_port",
    "port_taken",
    "running_service",
    "start_service",
]

#: The keeper's own log (its errors), beside the service's output.
KEEPER_LOG = "keeper.log"
#: How much of the service's stderr a fault keeps.
STDERR_TAIL_CHARS = 2000
#: How long the keeper itself may take to start (an interpreter and a few imports).
KEEPER_START_S = 60.0
_FIRST_PAUSE_S = 0.005
_MAX_PAUSE_S = 0.1
_PROBE_S = 1.0
#: What a server that could not bind its port says (the system's message for EADDRINUSE).
_ADDRESS_IN_USE = re.compile(r"address already in use|EADDRINUSE|only one usage of each socket address", re.IGNORECASE)


@dataclass(frozen=True)
class Lifecycle(Value):
    """What happened to one service process: ``ready_s`` (start to first healthy answer; None:
    never healthy), its own process's ``exit_code`` (negative: the signal that ended it; a
    stopped service usually ends by the stop's SIGTERM), ``killed`` (it did not stop within its
    grace and was killed), the ``leftovers`` killed at the stop (``name (pid N)``) and its
    ``faults`` (see the module docstring), in the order they were seen."""

    ready_s: float | None = None
    exit_code: int | None = None
    killed: bool = False
    leftovers: tuple[str, ...] = ()
    faults: tuple[ErrorInfo, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.faults

    def fault(self, category: str) -> ErrorInfo | None:
        """The first fault of ``category``, if any."""
        return next((f for f in self.faults if f.category == category), None)


class Service:
    """A started service (see the module docstring): its ``url`` (``http://127.0.0.1:PORT``),
    ``health_url``, ``port``, ``pid`` (its own process; None when it did not start), ``ready_s``
    and ``error`` (the start's fault: None when it became healthy). Its output is in
    ``stdout_path`` and ``stderr_path``. :meth:`stop` is idempotent; a service that failed to
    start has been stopped already."""

    def __init__(
        self, argv: list[str], url: str, health_url: str, port: int | None, out: Path, grace_s: float = 5.0
    ) -> None:
        self.argv = tuple(argv)
        self.grace_s = grace_s
        self.url = url
        self.health_url = health_url
        self.port = port
        self.out = out
        self.stdout_path = out / STDOUT
        self.stderr_path = out / STDERR
        self.pid: int | None = None
        self.started_at: float | None = None
        self.ready_s: float | None = None
        self.error: ErrorInfo | None = None
        self._faults: list[ErrorInfo] = []
        self._reports: dict[str, Any] = {}
        self._changed = threading.Condition()
        self._keeper: subprocess.Popen[str] | None = None
        self._lifecycle: Lifecycle | None = None

    # -- the keeper's reports ------------------------------------------------------------------

    def _launch(self, order: str, log: IO[Any]) -> None:
        self._keeper = subprocess.Popen(
            [sys.executable, "-m", keeper_module.__name__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        assert self._keeper.stdin is not None
        self._keeper.stdin.write(order)
        self._keeper.stdin.flush()
        threading.Thread(target=self._listen, name="bakeoff-service-reports", daemon=True).start()

    def _listen(self) -> None:
        import json

        assert self._keeper is not None and self._keeper.stdout is not None
        for line in self._keeper.stdout:
            try:
                report = json.loads(line)
            except ValueError:
                continue
            with self._changed:
                self._reports.update(report)
                self._changed.notify_all()
        with self._changed:
            self._reports.setdefault("gone", True)
            self._changed.notify_all()

    def _wait_for(self, key: str, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the keeper's report ``key`` (or for the keeper to end)."""
        with self._changed:
            return self._changed.wait_for(lambda: key in self._reports or "gone" in self._reports, timeout_s) and (
                key in self._reports
            )

    @property
    def keeper_pid(self) -> int | None:
        """The keeper process's pid (None: none was started)."""
        return None if self._keeper is None else self._keeper.pid

    @property
    def exit_code(self) -> int | None:
        """The service's own process's exit code once it has ended (negative: a signal)."""
        return self._reports.get("exited")

    def stderr_tail(self, chars: int = STDERR_TAIL_CHARS) -> str:
        return tail_text(self.stderr_path, chars)

    # -- the start -----------------------------------------------------------------------------

    def _started(self) -> ErrorInfo | None:
        if not self._wait_for("started", KEEPER_START_S):
            failed = self._reports.get("failed")
            if failed is not None:
                message = f"the service could not be started: {self._reports.get('message', '')}"
                return ErrorInfo(failed, message, "crash", "start")
            log = tail_text(self.out / KEEPER_LOG, STDERR_TAIL_CHARS)
            message = "the service's keeper process ended before it started the service"
            return ErrorInfo("KeeperExit", message, "crash", "start", log)
        self.pid = int(self._reports["started"])
        self.started_at = float(self._reports["at"])
        return None

    def _ended(self, code: int, when: str, phase: str) -> ErrorInfo:
        """The fault of a service whose own process ended with ``code``."""
        tail = self.stderr_tail()
        if _ADDRESS_IN_USE.search(tail):
            where = f"port {self.port}" if self.port is not None else "its address"
            message = f"the service could not bind {where}: it was in use"
            return ErrorInfo("PortInUse", message, "port_in_use", phase, tail)
        if code < 0:
            kind, category, message = death(code)
        else:
            kind, category, message = "ServiceExit", "crash", f"exited with code {code}"
        said = next((line.strip() for line in reversed(tail.splitlines()) if line.strip()), "")
        said = f": {said[:200]}" if said else ""  # its last word on stderr (the whole tail is kept)
        return ErrorInfo(kind, f"the service {message} {when}{said}", category, phase, tail)

    def _poll(self, deadline: float) -> tuple[str, str]:
        """Probe the health URL with backoff until it answers 2xx (``healthy``), the service's
        process or its keeper ends (``ended``), or ``deadline`` passes (``late``); with the last
        probe's outcome, for a message, after the last answer it got where that differs (the last
        probe, cut short by the deadline, may time out on a service that answered 503 until then)."""
        pause, last, heard = _FIRST_PAUSE_S, "no answer", ""
        while True:
            if self._ended_yet():
                return "ended", last
            left = deadline - time.monotonic()
            if left <= 0:
                return "late", last if heard in ("", last) else f"{heard}, then {last}"
            healthy, last = probe(self.health_url, min(_PROBE_S, left))
            if healthy:
                return "healthy", last
            heard = last if last.startswith("answered") else heard
            with self._changed:
                self._changed.wait_for(self._ended_yet, max(0.0, min(pause, left)))
            pause = min(pause * 1.5, _MAX_PAUSE_S)

    def _ended_yet(self) -> bool:
        return "exited" in self._reports or "gone" in self._reports

    def _end_fault(self, when: str, phase: str) -> ErrorInfo:
        """The fault of a service that ended ``when``: its exit, or its keeper's loss."""
        code = self.exit_code
        if code is not None:
            return self._ended(code, when, phase)
        message = f"the service's keeper process ended {when}: the service was lost"
        return ErrorInfo("KeeperExit", message, "crash", phase, self.stderr_tail())

    def _wait_healthy(self, timeout_s: float) -> ErrorInfo | None:
        """Poll the health URL until it answers 2xx, the process dies, or ``timeout_s`` passes
        from the process's start."""
        assert self.started_at is not None
        state, last = self._poll(self.started_at + timeout_s)
        if state == "healthy":
            ready_s = time.monotonic() - self.started_at
            if not self._ended_yet():  # a process that died as it answered is not ready
                self.ready_s = ready_s
                return None
        if state == "late":
            message = f"the service did not become healthy within {timeout_s:g} s ({self.health_url} {last})"
            return ErrorInfo("Timeout", message, "timeout", "start", self.stderr_tail())
        return self._end_fault("before it became healthy", "start")

    # -- while it serves -----------------------------------------------------------------------

    def check(self, timeout_s: float = 5.0) -> ErrorInfo | None:
        """Whether the service still serves: None when its health URL answers 2xx within
        ``timeout_s`` (retried with backoff), else its fault (a ``crash``, or a ``timeout``: it
        hangs), which the :class:`Lifecycle` keeps."""
        if self.error is not None:
            return self.error
        state, last = self._poll(time.monotonic() + timeout_s)
        if state == "healthy":
            return None
        if state == "late":
            message = f"the service did not answer its health check within {timeout_s:g} s ({last})"
            return self._record(ErrorInfo("Timeout", message, "timeout", "serve", self.stderr_tail()))
        return self._record(self._end_fault("while it served", "serve"))

    def _record(self, fault: ErrorInfo) -> ErrorInfo:
        if not any(f.category == fault.category and f.phase == fault.phase for f in self._faults):
            self._faults.append(fault)
        return fault

    # -- the stop ------------------------------------------------------------------------------

    def stop(self) -> Lifecycle:
        """End the service's whole process group and every process of it that left the group
        (see :mod:`bakeoff.serve.keeper`), and return what happened; again: the same value."""
        if self._lifecycle is not None:
            return self._lifecycle
        keeper = self._keeper
        stopped: dict[str, Any] = {}
        if keeper is not None:
            if self.error is None and self.exit_code is not None:  # it ended unasked, while it served
                self._record(self._ended(self.exit_code, "while it served", "serve"))
            try:
                assert keeper.stdin is not None
                keeper.stdin.write("stop\n")
                keeper.stdin.close()
            except (OSError, ValueError):
                pass
            if self._wait_for("stopped", self.grace_s + SETTLE_S + 30.0):
                stopped = self._reports["stopped"]
            if keeper.poll() is None:
                try:
                    keeper.wait(timeout=10.0)
                except subprocess.TimeoutExpired:
                    keeper.kill()
                    keeper.wait()
        leftovers = tuple(stopped.get("leftovers", ()))
        if leftovers:
            count = f"{len(leftovers)} process{'es' if len(leftovers) > 1 else ''}"
            message = f"the service left {count} running after it ended, killed by bakeoff: {', '.join(leftovers)}"
            self._faults.append(ErrorInfo("LeftoverProcess", message, "leftover", "stop"))
        code = stopped.get("exit", self.exit_code)
        self._lifecycle = Lifecycle(self.ready_s, code, bool(stopped.get("killed")), leftovers, tuple(self._faults))
        return self._lifecycle

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_service(
    command: str,
    *,
    out: Path | str,
    port: int | None = None,
    device: str = "",
    device_map: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    health: str = "/health",
    timeout_s: float = 120.0,
    grace_s: float = 5.0,
    strict: bool = False,
    cwd: Path | str | None = None,
    after: Mapping[str, Any] | None = None,
) -> Service:
    """Start ``command`` and wait until it is healthy (see the module docstring).

    Args:
        command: the command line, split as a POSIX shell would (no shell runs it); ``{port}``
            and ``{device}`` are filled in.
        out: the directory for its output (:data:`STDOUT`, :data:`STDERR`), the keeper's log and,
            under a mapping, the remap's files.
        port: the port it listens on (None: a free one when the command has ``{port}``, else
            the health URL's).
        device: what fills ``{device}``.
        device_map: the remap of its Python process (``{"cuda": "emu"}``); empty: as written.
        env: its whole environment (None: this process's).
        health: the health URL, or its path on ``http://127.0.0.1:PORT``.
        timeout_s: how long it may take from its start to its first healthy answer.
        grace_s: how long it has to end after the stop's SIGTERM before it is killed.
        strict: the remap's ``--strict`` (see :class:`bakeoff.script.remap.Remapper`).
        cwd: its working directory (None: this process's).
        after: under a mapping, hooks called in its process once its remap is installed (see
            :func:`~bakeoff.script.children.remapped_children`; the placement audit's, for one).

    Returns:
        The :class:`Service`: healthy, or with its ``error`` (and already stopped).

    Raises:
        SpecError: a malformed command line or health URL (see :func:`command_line`).
    """
    port, url, health_url = urls(words(command), port, health)
    argv = command_line(command, port, device)
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    service = Service(argv, url, health_url, port, out, grace_s)
    if port is not None and port_taken(port):
        message = f"port {port} is already in use on 127.0.0.1: the service was not started"
        service.error = service._record(ErrorInfo("PortInUse", message, "port_in_use", "start"))
        service.stop()
        return service
    order = keeper_module.order(
        argv,
        dict(os.environ if env is None else env),
        str(out),
        uuid.uuid4().hex,
        dict(device_map or {}),
        strict,
        grace_s,
        None if cwd is None else str(cwd),
        after,
    )
    try:
        with open(out / KEEPER_LOG, "w", encoding="utf-8") as log:
            service._launch(order, log)
        fault = service._started() or service._wait_healthy(timeout_s)
    except BaseException:  # Ctrl-C while it starts: nothing of it stays
        service.stop()
        raise
    if fault is not None:
        service.error = service._record(fault)
        service.stop()
    return service


@contextmanager
def running_service(command: str, **options: Any) -> Iterator[Service]:
    """:func:`start_service` (same arguments) for the block, stopped when it is left; its
    :class:`Lifecycle` is then ``service.stop()``."""
    service = start_service(command, **options)
    try:
        yield service
    finally:
        service.stop()
