"""A warm process that forks runs: a fresh interpreter's start-up (importing PyTorch, numpy and
bakeoff: seconds on a loaded machine) paid once per ``bakeoff exec`` instead of once per run.

The server (:mod:`bakeoff.launch.server_loop`, started as ``python -m bakeoff.launch.forkserver``)
imports its modules once and runs nothing itself; each run is a fork of it, in a session,
environment, directory and streams of its own, that dies with the server as the server dies
with bakeoff.

The client, :class:`ForkServer`, forks runs (:meth:`~ForkServer.fork`, several at once: the ranks
of a job) and reads their ends (:meth:`~ForkServer.exit_code`); :meth:`~ForkServer.run` runs one
to its end and returns a :class:`~bakeoff.launch.command.Ran` as
:func:`~bakeoff.launch.command.run_command` does:
past its timeout, or on an interruption, the child gets SIGTERM and ``grace_s`` to end, then its
whole group SIGKILL. When the server cannot run a request (it failed to start, or died), the
client says so (None) and the caller starts a fresh process instead.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bakeoff.launch import clones as _clones
from bakeoff.launch.command import Ran
from bakeoff.launch.reaping import kill_group
from bakeoff.launch.server_loop import server_pid

__all__ = ["ForkServer", "forkable", "server_pid"]

#: How long the server may take to import its modules before the client gives up on it.
READY_S = 120.0


def forkable() -> bool:
    """Whether this platform runs work forked from a warm server (Linux); elsewhere each run is
    a fresh interpreter."""
    return sys.platform.startswith("linux")


class ForkServer:
    """A server importing ``preload`` in ``env`` (see the module docstring); :meth:`run` runs
    one request, :meth:`close` ends the server (a run still going is stopped first).

    Where this process can reach a template that fits (:mod:`bakeoff.launch.clones`), the server
    is a fork of it (:attr:`cloned`) instead of a fresh interpreter. With ``clones``, the server
    is itself a template: this process's later servers, and those of the processes forked from
    it, are its clones where they fit."""

    def __init__(self, preload: Sequence[str], env: Mapping[str, str], clones: bool = False) -> None:
        self.env = dict(env)
        self.broken: str | None = None
        self._preload = list(preload)
        self._lock = threading.Lock()
        self._buffer = b""
        self._ended: dict[int, int] = {}  # pid -> wait status of forked runs not yet asked about
        self._running: set[int] = set()  # forked runs whose end no one has asked about yet
        self._ready: bool | None = None
        self._pid: int | None = None  # a clone's, from its first reply
        self._watch: int | None = None  # a clone's pidfd (it is the template's child, not ours)
        self._offered: int | None = None  # a template's: this process's end of its channel
        self.process: subprocess.Popen[bytes] | None = None
        self._open = True
        asked = None if clones else _clones.request(preload, self.env)
        self.cloned = asked is not None and self._adopt(*asked)
        if self.cloned:
            return
        request_r, self._requests = os.pipe()
        self._replies, reply_w = os.pipe()
        command = [sys.executable, "-m", "bakeoff.launch.forkserver", "--parent", str(os.getpid())]
        command += ["--fds", f"{request_r},{reply_w}"]
        passed = kept = [request_r, reply_w]  # kept: the ends the server keeps, closed here once started
        handed = _clones.handed_down(self.env)
        for template in handed:  # its runs and clones reach them too
            command += ["--offers", f"{template.fd}:{','.join(template.preload)}"]
        if clones and _clones.supported():
            listen, ask = (end.detach() for end in socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET))
            command += ["--clones", f"{listen},{ask}"]
            passed, kept = [*passed, listen, ask], [*kept, listen]  # this process asks on ask too
            self._offered = ask
        try:
            self.process = subprocess.Popen(
                [*command, *preload],
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=[*passed, *(template.fd for template in handed)],
                start_new_session=True,
            )
        except OSError as exc:
            self.broken = f"the fork server did not start: {exc}"
        finally:
            for fd in kept:
                os.close(fd)
        if self._offered is not None:
            if self.process is None:
                os.close(self._offered)
                self._offered = None
            else:
                _clones.offer(self._offered, preload, self.env)

    @property
    def pid(self) -> int | None:
        """The server's pid (None: not started)."""
        return self.process.pid if self.process is not None else self._pid

    def _adopt(self, channel: int, template: int) -> bool:
        """Serve through a clone on ``channel`` (one socket both ways). Its first word is its pid
        and a pidfd of it (so it exists once this returns, as a fresh server does once started,
        and is held by the pidfd: it is the template's child, not this process's, and its pid
        may be reused once it ends). False: the template refused the request, or did not answer
        (it is then not asked again); the channel is closed and the caller starts a fresh
        server."""
        self._requests = self._replies = channel
        word, self._watch, self._buffer = _first_word(channel, time.monotonic() + READY_S)
        if self._watch is not None and word is not None and "cloned" in word:
            self._pid = int(word["cloned"])
            return True
        if self._watch is not None:
            os.close(self._watch)
            self._watch = None
        if word is None or "refused" not in word:
            _clones.withdraw(template)
        os.close(channel)
        self._buffer = b""
        return False

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _line(self, deadline: float | None) -> dict[str, Any] | None:
        """The server's next reply (None: none before ``deadline``); EOFError: the server ended."""
        while b"\n" not in self._buffer:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self._replies], [], [], wait)
            if not ready:
                return None
            chunk = os.read(self._replies, 1 << 16)
            if not chunk:
                raise EOFError
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    def _wait_ready(self) -> bool:
        if self._ready is None:
            try:
                reply = self._line(time.monotonic() + READY_S)
            except EOFError:
                reply = {"error": "it ended while importing"}
            self._ready = bool(reply and reply.get("ready"))
            if not self._ready:
                why = (reply or {}).get("error", f"not ready within {READY_S:g} s")
                self.broken = f"the fork server could not start: {why}"
                self.close()
        return self._ready

    def _request(self, request: Mapping[str, Any]) -> dict[str, Any] | None:
        """Send ``request`` and return its reply (None: none came, or the server ended), keeping
        the ends of earlier runs that come before it. The caller holds the lock."""
        try:
            os.write(self._requests, json.dumps(dict(request)).encode() + b"\n")
            deadline = time.monotonic() + READY_S
            while True:  # an earlier run's end may come first
                reply = self._line(deadline)
                if reply is None or "status" not in reply:
                    return reply
                self._ended[int(reply["pid"])] = int(reply["status"])
        except (OSError, EOFError):
            return None

    def fork(
        self,
        entry: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: Path | str,
        stdout: Path | str,
        stderr: Path | str,
    ) -> int | None:
        """Start ``entry(argv)`` in a forked child and return its pid without waiting for it
        (:meth:`exit_code` reads its end); several may run at once. None: the server could not
        fork it (:attr:`broken` says why)."""
        with self._lock:
            if self.broken is not None or not self._wait_ready():
                return None
            request = {"entry": entry, "argv": list(argv), "env": dict(env), "cwd": str(cwd)}
            request |= {"stdout": str(stdout), "stderr": str(stderr)}
            reply = self._request(request)
            if not reply or "pid" not in reply:
                self.broken = f"the fork server did not fork the run: {(reply or {}).get('error', 'it ended')}"
                self.close()
                return None
            self._running.add(int(reply["pid"]))
            return int(reply["pid"])

    def preload(self, module: str) -> float | None:
        """Import ``module`` in the server, so that the runs forked after it start with it
        imported; the seconds the import took there. None: it could not (the server is then
        closed, and later runs are fresh)."""
        with self._lock:
            if self.broken is not None or not self._wait_ready():
                return None
            reply = self._request({"import": module})
            if not reply or reply.get("imported") != module:
                self.broken = f"the fork server did not import {module}: {(reply or {}).get('error', 'it ended')}"
                self.close()
                return None
            self._preload.append(module)
            if self._offered is not None:  # its clones start with it imported too
                _clones.offer(self._offered, self._preload, self.env)
            return float(reply["seconds"])

    @property
    def preloaded(self) -> tuple[str, ...]:
        """The modules the server imported before its runs, :meth:`preload` 's included."""
        return tuple(self._preload)

    @property
    def idle(self) -> bool:
        """Whether every run it forked has ended and been asked about (:meth:`exit_code`)."""
        return not self._running

    def exit_code(self, pid: int, wait_s: float = 0.0) -> int | None:
        """The exit code of the forked run ``pid`` (negative: the signal it died of), waiting up
        to ``wait_s`` for it to end; None: still running. EOFError: the server ended (and its
        runs with it)."""
        deadline = time.monotonic() + wait_s
        with self._lock:
            while pid not in self._ended:
                reply = self._line(deadline)
                if reply is None:
                    return None
                if "status" in reply:
                    self._ended[int(reply["pid"])] = int(reply["status"])
            self._running.discard(pid)
            return os.waitstatus_to_exitcode(self._ended.pop(pid))

    def run(
        self,
        entry: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: Path | str,
        stdout: Path | str,
        stderr: Path | str,
        timeout_s: float,
        grace_s: float = 0.0,
    ) -> Ran | None:
        """Run ``entry(argv)`` in a forked child, to its end or ``timeout_s`` (then stopped,
        with ``grace_s``); an interruption of this process stops it too, and goes on. None: the
        server could not run it (:attr:`broken` says why)."""
        pid = self.fork(entry, argv, env, cwd, stdout, stderr)
        if pid is None:
            return None
        try:
            code = self.exit_code(pid, timeout_s)
            if code is None:
                self.stop(pid, grace_s)
                return Ran(None)
        except EOFError:
            self.broken = "the fork server ended during a run"
            kill_group(pid)
            return None
        except BaseException:  # Ctrl-C or SIGTERM: the run's process group goes too
            self.stop(pid, grace_s)
            raise
        return Ran(code)

    def stop(self, pid: int, grace_s: float) -> int | None:
        """SIGTERM to the run ``pid`` and ``grace_s`` to end, then SIGKILL to its group; its exit
        code (None: the server ended meanwhile)."""
        try:
            if grace_s > 0:
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                code = self.exit_code(pid, grace_s)
                if code is not None:
                    kill_group(pid)  # what it left in its group
                    return code
            kill_group(pid)
            return self.exit_code(pid, 30.0)
        except EOFError:
            self.broken = "the fork server ended during a run"
            return None

    def close(self) -> None:
        """End the server (its runs die with it: each one watches it)."""
        if self._offered is not None:
            _clones.withdraw(self._offered)
            os.close(self._offered)
            self._offered = None
        if self._open:
            self._open = False
            for fd in {self._requests, self._replies}:
                try:
                    os.close(fd)
                except OSError:
                    pass
            if self.process is not None:
                try:
                    os.killpg(self.process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.process.wait()
                self.process = None
            elif self._watch is not None:  # a clone
                try:
                    signal.pidfd_send_signal(self._watch, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                ended = select.poll()
                ended.register(self._watch, select.POLLIN)
                ended.poll(30_000)  # readable once it has ended
                os.close(self._watch)
                self._watch = self._pid = None
        if self.broken is None:
            self.broken = "the fork server was closed"


def _first_word(channel: int, deadline: float) -> tuple[dict[str, Any] | None, int | None, bytes]:
    """A clone's first line on ``channel``, the descriptor that came with it and what came
    after the line (None, None: nothing before ``deadline``, or the end of the socket)."""
    remaining = max(0.0, deadline - time.monotonic())
    if not select.select([channel], [], [], remaining)[0]:
        return None, None, b""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=os.dup(channel)) as sock:
        try:
            data, fds, _flags, _address = socket.recv_fds(sock, 1 << 16, 1)
        except OSError:
            return None, None, b""
    line, _, rest = data.partition(b"\n")
    try:
        word = json.loads(line) if line else None
    except ValueError:
        word = None
    return (word if isinstance(word, dict) else None), (fds[0] if fds else None), rest


if __name__ == "__main__":  # the server: the real module's main, so that its runs find server_pid()
    from bakeoff.launch.server_loop import main as _main

    sys.exit(_main())
