"""Linux's process controls for a process that must not leave others behind, and reaping.

* :func:`death_signal`: the signal this process gets when its parent (the *thread* that started
  it) ends (``PR_SET_PDEATHSIG``);
* :func:`subreaper`: this process becomes the parent of every orphan among its descendants (a
  process that left its group with ``setsid`` and whose own parent ended included:
  ``PR_SET_CHILD_SUBREAPER``), so that it can find and end them;
* :func:`reap`: collect every child that has ended, without waiting (:func:`ended`: and say which,
  with its wait status); :func:`running`: whether a
  ``psutil`` process is still running (a zombie has ended); :func:`end_all`: kill what is left
  of a set of processes, after a moment to end by itself, and name each one killed.

Off Linux the controls do nothing: a caller says what it then cannot clean up.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["death_signal", "descendants", "end_all", "ended", "kill_group", "reap", "running", "subreaper"]

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
        except (OSError, AttributeError):
            pass


def kill_group(pid: int) -> None:
    """SIGKILL to the process group ``pid`` leads, and to ``pid`` itself (a process that had not
    yet made its own group when it was stopped); gone already is no error."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def death_signal(signum: int) -> None:
    """``signum`` to this process when its parent ends (Linux)."""
    _prctl(_PR_SET_PDEATHSIG, signum)


def subreaper() -> None:
    """Make this process its descendants' reaper (Linux)."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def ended() -> Iterator[tuple[int, int]]:
    """Collect every child that has ended (a subreaper's orphans too), without waiting: each
    one's pid and wait status."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        yield pid, status


def reap() -> None:
    """Collect every child that has ended (a subreaper's orphans too), without waiting."""
    for _ in ended():
        pass


def running(process: Any) -> bool:
    """Whether the ``psutil.Process`` ``process`` is still running (not ended, not a zombie)."""
    import psutil

    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def descendants(pid: int | None = None) -> list[Any]:
    """``psutil`` processes below ``pid`` (this process by default); none where it has ended or
    cannot be read."""
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def end_all(
    find: Callable[[], list[Any]], settle_s: float, reap_s: float, before_kill: Callable[[], None] = lambda: None
) -> list[str]:
    """Wait up to ``settle_s`` for the processes ``find`` returns (``psutil`` processes still
    running) to end by themselves, then kill them (``before_kill`` first, each round), reaping,
    until none is left or ``reap_s`` more have passed: ``name (pid N)`` of each one killed."""
    import psutil

    killed: list[str] = []
    seen: set[int] = set()
    settle = time.monotonic() + settle_s
    deadline = settle + reap_s
    while time.monotonic() < deadline:
        reap()
        alive = find()
        if not alive:
            break
        if time.monotonic() >= settle:
            before_kill()
            for process in alive:
                try:
                    label = f"{process.name()} (pid {process.pid})"
                    process.kill()
                except psutil.Error:
                    continue
                if process.pid not in seen:
                    seen.add(process.pid)
                    killed.append(label)
        time.sleep(0.02)
    reap()
    return killed
