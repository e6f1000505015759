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

__all__ = ["FreshPython", "Ran", "run_command", "stop_group"]


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


@dataclass(frozen=True)
class FreshPython:
    """Fresh Python interpreters for a check that needs one (the cold-start check): handed to it
    through its context, since checks sit below this package. :meth:`run` runs ``code`` with
    ``args`` in ``sys.argv[1:]`` and returns the JSON value it printed on its last line, or one
    line saying why none came (its exit code and last line, the signal that ended it, or the
    timeout). The interpreter dies with this process (a ``kill -9`` of bakeoff, or of the worker
    that started it, ends it too). :meth:`tempdir` makes a temporary directory a later process reaps if this one is
    killed."""

    def run(self, code: str, args: Sequence[str], env: Mapping[str, str], timeout_s: float, who: str) -> Any:
        import json
        import sys

        from bakeoff.launch.deaths import died

        guarded = f"import os; from bakeoff.launch.process import die_with_parent; die_with_parent({os.getpid()})\n"
        ran = run_command([sys.executable, "-c", guarded + code, *args], env, timeout_s)
        if ran.timed_out:
            return f"{who} did not finish within {timeout_s:g} s"
        lines = (ran.stdout or "").strip().splitlines()
        if ran.code == 0 and lines:
            try:
                return json.loads(lines[-1])
            except ValueError:
                pass
        if ran.code is not None and ran.code < 0:
            return died(ran.code, who).message
        tail = (ran.stderr or "").strip().splitlines()
        return f"{who} exited with {ran.code}: {(tail[-1] if tail else 'no output')[:240]}"

    def tempdir(self, kind: str) -> Path:
        from bakeoff.launch.tempdirs import owned_tempdir

        return owned_tempdir(kind)
