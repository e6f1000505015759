"""Processes that run as one job and end as one: the ranks of a torchrun-style script.

Each member is a process in a session of its own: a command line (:func:`start_command`) or a run
forked from a warm process (:func:`forked_member`, :mod:`bakeoff.launch.forkserver`). The group
(:func:`run_group`) waits for all of them, and ends early as torchrun ends a job whose worker
failed: the first member that exits non-zero or dies of a signal is the cause; the others get
``linger_s`` to end by themselves (a peer's own error, "connection closed", is kept as theirs)
and are then stopped: SIGTERM and ``grace_s`` to end what they started, then SIGKILL to their
process group. Past ``timeout_s`` every member still running is stopped the same way; an
interruption of this process (Ctrl-C, SIGTERM) stops them all and goes on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from bakeoff.launch.command import Ran
from bakeoff.launch.forkserver import ForkServer

__all__ = ["GroupEnd", "Member", "forked_member", "run_group", "start_command", "stop"]

#: How often the group looks at its members (seconds).
_POLL_S = 0.02


class Member(Protocol):
    """A running member: its pid (the leader of its own process group), and its end."""

    pid: int

    def exit_code(self, wait_s: float = 0.0) -> int | None:
        """Its exit code (negative: the signal it died of), waiting up to ``wait_s``; None: running."""
        ...


@dataclass
class _Command:
    process: subprocess.Popen[Any]

    @property
    def pid(self) -> int:
        return self.process.pid

    def exit_code(self, wait_s: float = 0.0) -> int | None:
        try:
            return self.process.wait(timeout=wait_s) if wait_s > 0 else self.process.poll()
        except subprocess.TimeoutExpired:
            return None


@dataclass
class _Forked:
    server: ForkServer
    pid: int
    code: int | None = None  # the server tells a run's end once: kept

    def exit_code(self, wait_s: float = 0.0) -> int | None:
        if self.code is None:
            try:
                self.code = self.server.exit_code(self.pid, wait_s)
            except EOFError:  # the server ended, and its runs with it (each one watches it)
                self.code = -int(signal.SIGKILL)
        return self.code


def start_command(
    command: Sequence[str], env: Mapping[str, str], cwd: Path | str, stdout: IO[Any], stderr: IO[Any]
) -> Member:
    """``command`` started in a session of its own."""
    process = subprocess.Popen(
        list(command), cwd=cwd, env=dict(env), stdout=stdout, stderr=stderr, start_new_session=True
    )
    return _Command(process)


def forked_member(
    server: ForkServer,
    entry: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: Path | str,
    stdout: Path | str,
    stderr: Path | str,
) -> Member | None:
    """``entry(argv)`` forked by ``server`` (None: the server cannot fork)."""
    pid = server.fork(entry, argv, env, cwd, stdout, stderr)
    return None if pid is None else _Forked(server, pid)


@dataclass(frozen=True)
class GroupEnd:
    """How the group ended: each member's :class:`Ran` (code None: still running at the
    timeout), the member whose failure ended it (None: none failed, or the timeout came first),
    the members stopped because of it, and the seconds from the start to each member's end."""

    ran: tuple[Ran, ...]
    failed_first: int | None
    stopped: tuple[int, ...]
    ended_s: tuple[float | None, ...]


def _signal(member: Member, signum: int, group: bool) -> None:
    try:
        (os.killpg if group else os.kill)(member.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _stop(members: Sequence[Member], codes: list[int | None], which: Sequence[int], grace_s: float) -> None:
    """SIGTERM to each member in ``which``, ``grace_s`` for all of them to end, then SIGKILL to
    their groups (what they left there too); their codes read into ``codes`` (None: still
    unread after the kill, which should not happen)."""
    if grace_s > 0:
        for i in which:
            _signal(members[i], signal.SIGTERM, False)
        deadline = time.monotonic() + grace_s
        for i in which:
            codes[i] = members[i].exit_code(max(0.0, deadline - time.monotonic()))
    for i in which:
        _signal(members[i], signal.SIGKILL, True)
        if codes[i] is None:
            codes[i] = members[i].exit_code(30.0)


def stop(members: Sequence[Member], grace_s: float = 0.0) -> list[int | None]:
    """Stop every member still running (SIGTERM and ``grace_s``, then SIGKILL to its group);
    their exit codes."""
    codes = [member.exit_code() for member in members]
    _stop(members, codes, [i for i, code in enumerate(codes) if code is None], grace_s)
    return codes


def run_group(
    members: Sequence[Member],
    timeout_s: float,
    grace_s: float,
    linger_s: float = 2.0,
    on_timeout: Callable[[Sequence[int]], None] | None = None,
) -> GroupEnd:
    """Wait for ``members`` as one job (see the module docstring); ``on_timeout`` is called with
    the members still running at the timeout before they are stopped (to ask them where they are)."""
    start = time.monotonic()
    deadline = start + timeout_s
    codes: list[int | None] = [None] * len(members)
    ended: list[float | None] = [None] * len(members)
    failed_first: int | None = None
    stop_at: float | None = None
    try:
        while any(c is None for c in codes):
            now = time.monotonic()
            for i, member in enumerate(members):
                if codes[i] is None:
                    codes[i] = member.exit_code()
                    if codes[i] is not None:
                        ended[i] = now - start
                        if codes[i] != 0 and failed_first is None:
                            failed_first, stop_at = i, now + linger_s
            if now >= deadline or (stop_at is not None and now >= stop_at):
                break
            time.sleep(_POLL_S)
    except BaseException:  # Ctrl-C or SIGTERM: every member goes too
        _stop(members, codes, [i for i, c in enumerate(codes) if c is None], grace_s)
        raise
    running = [i for i, c in enumerate(codes) if c is None]
    timed_out = failed_first is None
    if timed_out and running and on_timeout is not None:
        on_timeout(running)
    _stop(members, codes, running, grace_s)
    ran = tuple(Ran(None) if timed_out and i in running else Ran(code) for i, code in enumerate(codes))
    stopped = () if timed_out else tuple(running)
    return GroupEnd(ran, failed_first, stopped, tuple(ended))
