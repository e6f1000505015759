"""The process between bakeoff and a user's service: no process of the service outlives it.

::

    python -m bakeoff.serve.keeper   (its orders on stdin, its reports on stdout, as JSON lines)

:func:`bakeoff.serve.service.start_service` starts it with the service's settings on the first
line of its stdin (:func:`order`). The keeper starts the command in a session and process group
of its own, with the service's environment (where a device mapping is given, inside
:func:`bakeoff.script.children.remapped_children`: the service's Python process is remapped as
an exec script's Python children are, in every thread it starts after torch loads, with the
order's ``after`` hooks called once its remap is installed), and reports ``{"started": PID, "at": T}`` (``T``: its
``time.monotonic()`` just before the start, the clock the caller reads too), then
``{"exited": CODE}`` if the service ends by itself. It stops the service on a ``stop`` line, at
the end of its stdin (bakeoff closed it, or died: the kernel closes a killed process's pipes, so
a ``kill -9`` of bakeoff is seen at once), when its parent changes (bakeoff died while a process
it forked still holds the pipe) and on SIGTERM or SIGHUP. It ignores Ctrl-C, which a terminal
sends to bakeoff's whole process group: bakeoff alone decides to stop it.

Stopping: SIGTERM to the service's group and ``grace_s`` for its own process to end, then
:data:`SETTLE_S` for the rest of what it started; then SIGKILL to the group and to every process
of the service still running, reaped, each that outlived the service's own process named
``name (pid N)`` as a leftover in the last report, ``{"stopped": {...}}``. "Every process of the
service" is found two ways: the keeper's descendants (on Linux it is a child subreaper,
``PR_SET_CHILD_SUBREAPER``, as the exec supervisor is, so a process that left the group with
``setsid`` and whose parent ended becomes its child) and every process whose environment holds
the service's marker (:data:`MARK`, a token unique to the start), which also finds a daemon that
escaped the subreaper.

Why not the parent-death signal for the keeper itself: ``PR_SET_PDEATHSIG`` fires when the
*thread* that started the keeper ends, and a caller that starts a service from a worker thread
would lose it when that thread ends; the end of the pipe is the process's death. The service's
own process does get ``PR_SET_PDEATHSIG`` (SIGKILL) against the keeper's death (the keeper's
main thread starts it and lives as long as the keeper).

What is not covered: a ``kill -9`` of the keeper itself (bakeoff's whole process group killed,
for one) ends the service's own process (its death signal) but not what that process started;
off Linux there is no subreaper and no death signal, so a process that left the group is found
by its marker only (a process that clears its environment, or whose environment the system does
not show, escapes), and the service's own process outlives a killed keeper. On Windows there
are no process groups: the service's own process and what its marker finds are stopped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from bakeoff.launch.reaping import death_signal, end_all, running, subreaper

__all__ = ["MARK", "SETTLE_S", "STDERR", "STDOUT", "main", "order"]

#: The environment variable that marks every process of one service (a token per start).
MARK = "BAKEOFF_SERVICE_MARK"
#: The service's output files, in its directory.
STDOUT = "stdout.log"
STDERR = "stderr.log"
#: How long what the service started may take to end once the service's own process has ended.
SETTLE_S = 0.5
#: How long the keeper keeps killing and reaping before it gives up on a process.
_REAP_S = 10.0
_POLL_S = 0.02


def order(
    argv: Sequence[str],
    env: Mapping[str, str],
    out: str,
    mark: str,
    device_map: Mapping[str, str],
    strict: bool,
    grace_s: float,
    cwd: str | None,
    after: Mapping[str, Any] | None = None,
) -> str:
    """The keeper's first line of stdin: what to start, and how."""
    config = {
        "argv": list(argv),
        "env": dict(env),
        "out": out,
        "mark": mark,
        "map": dict(device_map),
        "strict": strict,
        "grace_s": grace_s,
        "cwd": cwd,
        "after": dict(after or {}),
    }
    return json.dumps(config) + "\n"


def _die_with_keeper() -> None:
    """In the service's process, between fork and exec: SIGKILL when the keeper dies."""
    death_signal(signal.SIGKILL)


class _Reports:
    """The keeper's reports on its stdout; bakeoff may be gone (a broken pipe is ignored)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def send(self, **report: Any) -> None:
        try:
            self.stream.write(json.dumps(report) + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass


def _watch_orders(stop: threading.Event) -> None:
    """Stop on a ``stop`` line or at the end of stdin (bakeoff closed it, or died)."""
    for line in sys.stdin:
        if line.strip() == "stop":
            break
    stop.set()


def _marked(mark: str, skip: set[int]) -> list[Any]:
    """Every running process whose environment holds the service's marker."""
    import psutil

    found = []
    for process in psutil.process_iter():
        if process.pid in skip:
            continue
        try:
            if process.environ().get(MARK) == mark:
                found.append(process)
        except (psutil.Error, OSError):
            continue
    return found


def _service_processes(mark: str, skip: set[int]) -> list[Any]:
    """The service's processes still running: the keeper's descendants and the marked ones."""
    import psutil

    found = {p.pid: p for p in psutil.Process().children(recursive=True)}
    for process in _marked(mark, skip):
        found.setdefault(process.pid, process)
    return [p for pid, p in found.items() if pid not in skip and running(p)]


def _signal_group(service: subprocess.Popen[Any], kill: bool) -> None:
    """SIGTERM (or SIGKILL) to the service's process group; its own process only without groups."""
    killpg = getattr(os, "killpg", None)
    try:
        if killpg is not None:
            killpg(service.pid, signal.SIGKILL if kill else signal.SIGTERM)
        elif service.poll() is None:
            service.kill() if kill else service.terminate()
    except (ProcessLookupError, PermissionError):
        pass


def _stop(service: subprocess.Popen[Any], mark: str, grace_s: float) -> dict[str, Any]:
    """End the service (see the module docstring): its exit code, whether it had to be killed,
    and the leftovers, ``name (pid N)``, that outlived its own process."""

    skip = {os.getpid(), os.getppid()}
    _signal_group(service, kill=False)
    try:
        service.wait(timeout=grace_s)
        killed = False
    except subprocess.TimeoutExpired:  # it would not stop: its whole group goes at once
        killed = True
        _signal_group(service, kill=True)
    code = service.wait()
    leftovers = end_all(
        lambda: _service_processes(mark, skip),
        0.0 if killed else SETTLE_S,
        _REAP_S,
        before_kill=lambda: _signal_group(service, kill=True),
    )
    return {"exit": code, "killed": killed, "leftovers": leftovers}


def _start(config: Mapping[str, Any], reports: _Reports) -> subprocess.Popen[Any] | None:
    """Start the command as the order says: the process, or None (the reason reported)."""
    out = Path(config["out"])
    out.mkdir(parents=True, exist_ok=True)
    os.environ.clear()  # the service's environment, which the remap below adds to
    os.environ.update(config["env"])
    os.environ[MARK] = config["mark"]
    posix = os.name == "posix"
    with open(out / STDOUT, "wb") as stdout, open(out / STDERR, "wb") as stderr:
        mapping = config["map"]
        if mapping:
            from bakeoff.script.children import remapped_children

            strict, after = bool(config["strict"]), config.get("after")
            remap: Any = remapped_children(mapping, strict=strict, out=out, threads=True, after=after)
        else:
            from contextlib import nullcontext

            remap = nullcontext()
        with remap:
            at = time.monotonic()
            try:
                service = subprocess.Popen(
                    config["argv"],
                    stdin=subprocess.DEVNULL,
                    stdout=stdout,
                    stderr=stderr,
                    cwd=config["cwd"],
                    start_new_session=posix,
                    preexec_fn=_die_with_keeper if sys.platform.startswith("linux") else None,
                )
            except OSError as exc:
                reports.send(failed=type(exc).__name__, message=str(exc))
                return None
    reports.send(started=service.pid, at=at)
    return service


def main(argv: Sequence[str] | None = None) -> int:
    """Read the order, start the service, report, and stop it when told or orphaned."""
    line = sys.stdin.readline()
    if not line:
        return 0  # bakeoff went before it gave the order
    config = json.loads(line)
    stop = threading.Event()
    parent = os.getppid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), lambda _signum, _frame: stop.set())
    subreaper()
    reports = _Reports(sys.stdout)
    service = _start(config, reports)
    if service is None:
        return 0
    threading.Thread(target=_watch_orders, args=(stop,), name="bakeoff-keeper-orders", daemon=True).start()
    exited = False
    while not stop.wait(_POLL_S):
        if os.getppid() != parent:
            break
        if not exited and service.poll() is not None:
            exited = True
            reports.send(exited=service.returncode, exited_at=time.monotonic())
    reports.send(stopped=_stop(service, config["mark"], float(config["grace_s"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
