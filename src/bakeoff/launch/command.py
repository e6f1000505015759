"""A command line in a process group of its own: the launcher for ``python -m`` entry points and
other programs (a script run by ``bakeoff exec``, pip, a bisection's trial).

The command starts a new session, so that it and everything it starts form one process group.
When it outlives its time, or this process is interrupted (Ctrl-C, SIGTERM), the group is
stopped: with a ``grace_s``, SIGTERM to the command first (it may end what it started, a process
that left the group included), then SIGKILL to the whole group. A command's death by a signal
is classified by :func:`bakeoff.launch.deaths.died` from :attr:`Ran.code`.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

__all__ = ["Ran", "run_command", "stop_group"]


@dataclass(frozen=True)
class Ran:
    """A command's end: its exit ``code`` (negative: the signal that killed it; None: it ran past
    its time and was stopped) and what it wrote to the pipes (None where it wrote to a file)."""

    code: int | None
    stdout: str | None = None
    stderr: str | None = None

    @property
    def timed_out(self) -> bool:
        return self.code is None


def stop_group(process: subprocess.Popen[Any], grace_s: float = 0.0) -> None:
    """End ``process`` and its process group: SIGTERM to it and ``grace_s`` to finish first,
    then SIGKILL to the group for anything left in it."""
    if grace_s > 0:
        try:
            os.kill(process.pid, signal.SIGTERM)
            process.wait(timeout=grace_s)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_command(
    command: Sequence[str],
    env: Mapping[str, str],
    timeout_s: float,
    *,
    cwd: Path | str | None = None,
    stdout: IO[Any] | int = subprocess.PIPE,
    stderr: IO[Any] | int = subprocess.PIPE,
    grace_s: float = 0.0,
) -> Ran:
    """Run ``command`` to its end or its timeout (then stopped, with ``grace_s``); an
    interruption of this process stops it too, and goes on."""
    process = subprocess.Popen(
        list(command), cwd=cwd, env=dict(env), stdout=stdout, stderr=stderr, text=True, start_new_session=True
    )
    try:
        out, err = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop_group(process, grace_s)
        out, err = process.communicate()
        return Ran(None, out, err)
    except BaseException:  # Ctrl-C or SIGTERM: the command's process group goes too
        stop_group(process, grace_s)
        process.communicate()
        raise
    return Ran(process.returncode, out, err)
