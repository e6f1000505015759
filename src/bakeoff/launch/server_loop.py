"""The fork server's own side (:class:`~bakeoff.launch.forkserver.ForkServer` is its client)::

    python -m bakeoff.launch.forkserver --parent PID --fds R,W MODULE...

The server imports the modules, does nothing else (no op of torch runs, no thread starts),
moves what they made out of the collector's reach (``gc.freeze``: a forked run's first full
collection would otherwise touch, and so copy, every page they fill: about 0.2 s of CPU a run
with PyTorch and transformers imported) and serves requests read from fd ``R``, one JSON line
each: a module to import in the server itself (:meth:`~bakeoff.launch.forkserver.ForkServer.preload`:
the runs forked after it start with it imported), or a function
(``module:function``, called with a list of arguments, returning the exit code), an
environment, a working directory, and the files that become stdout and stderr. For each, it
forks a child that starts a session of its own (a process group, stopped as a whole like a
command of :mod:`bakeoff.launch.command`), replaces its environment, directory
(``sys.path[0]`` too, as ``python -m`` sets it, and ``multiprocessing``'s start directory,
where a spawned child finds a relative ``__main__``), stdout and stderr, dies with the server,
calls the function and ends as an interpreter ends (non-daemon threads joined, ``atexit`` run,
streams flushed) without tearing down every module. The server writes the
child's pid, then its wait status, to fd ``W``. It dies with ``PID`` (the bakeoff process).

A forked run differs from a fresh interpreter in what was settled before the fork: the modules
the server imported and what they read from the environment when imported (the server is
started with the runs' own environment and hash seed), ``sys.orig_argv``, and
``sys.modules["__main__"]`` outside the function's own work.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from bakeoff.launch import clones as _clones
from bakeoff.launch.reaping import death_signal, ended
from bakeoff.launch.residency import map_like

__all__ = ["main", "serve", "server_pid"]

#: How often the server looks for ended children and a dead parent (seconds).
_POLL_S = 0.02
#: The server's own pid, in the server and in every run it forked (None elsewhere).
_SERVER: int | None = None


def server_pid() -> int | None:
    """The pid of the fork server this process was forked from (None: not forked by one)."""
    return _SERVER


def _arm_parent_death(parent: int | None) -> None:
    """SIGKILL when ``parent`` dies (Linux); elsewhere the loop's own check of the parent."""
    death_signal(signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def _send(fd: int, reply: Mapping[str, Any]) -> None:
    os.write(fd, json.dumps(dict(reply)).encode() + b"\n")


def _end(code: int) -> None:
    """End a forked run as an interpreter ends (non-daemon threads joined first), without its
    teardown of every module."""
    from bakeoff.launch.process import leave

    try:
        threading._shutdown()  # type: ignore[attr-defined]
    except Exception:  # a thread that cannot be joined does not keep the run
        pass
    leave(code)


def _child(request: Mapping[str, Any], fds: Sequence[int]) -> None:
    """The forked run: never returns."""
    code = 1
    try:
        os.setsid()
        _arm_parent_death(_SERVER)  # the run dies with the server, as the server with bakeoff
        for fd in set(fds):
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for target, name in ((1, "stdout"), (2, "stderr")):
            opened = os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(opened, target)
            os.close(opened)
        sys.path[0] = os.getcwd()
        started_in = sys.modules.get("multiprocessing.process")
        if started_in is not None:  # where a spawned child finds a relative __main__, set at import
            started_in.ORIGINAL_DIR = os.getcwd()  # type: ignore[attr-defined]
        sys.argv = [request["entry"], *request["argv"]]
        importlib.invalidate_caches()
        module, _, function = request["entry"].partition(":")
        returned = getattr(importlib.import_module(module), function)(list(request["argv"]))
        code = returned if isinstance(returned, int) else 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    except BaseException:  # the run's own failure, printed as Python would
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        _end(code)


def serve(
    parent: int,
    request_fd: int,
    reply_fd: int,
    preload: Sequence[str],
    channel: tuple[int, int] | None = None,
    watch: int | None = None,
) -> None:
    """The server's loop (see the module docstring). A template reads clone requests on the
    first end of ``channel`` (its descendants ask on the second); a clone watches its ``parent``
    (the requester, not its parent process) through the pidfd ``watch``."""
    global _SERVER
    if watch is None:
        _arm_parent_death(parent)
    _SERVER = os.getpid()
    started_env = dict(os.environ)  # before an import sets a variable of its own
    started_in = _clones.environment_key(started_env)
    try:
        for name in preload:
            importlib.import_module(name)
    except BaseException as exc:  # the client falls back to fresh processes
        _send(reply_fd, {"ready": False, "error": f"importing {name}: {type(exc).__name__}: {exc}"})
        return
    listening = None
    if channel is not None:
        listening = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=channel[0])
        os.set_inheritable(channel[1], False)  # its runs keep it; a command they start does not
        _clones.offer(channel[1], preload, started_env)
    imported = list(preload)
    gc.freeze()
    _send(reply_fd, {"ready": True})
    buffer = b""
    cloned: set[int] = set()  # clones are not runs: their ends are nobody's business
    waited = [fd for fd in (request_fd, listening, watch) if fd is not None]
    while watch is not None or os.getppid() == parent:
        ready, _, _ = select.select(waited, [], [], _POLL_S)
        if watch is not None and watch in ready:  # the requester ended
            return
        for pid, status in ended():  # the runs that ended
            if pid in cloned:
                cloned.discard(pid)
            else:
                _send(reply_fd, {"pid": pid, "status": status})
        if listening is not None and listening in ready:
            clone = _clone(listening, (request_fd, reply_fd, listening.fileno()), imported, started_in)
            if clone is not None:
                cloned.add(clone)
        if request_fd not in ready:
            continue
        chunk = os.read(request_fd, 1 << 16)
        if not chunk:
            return
        buffer += chunk
        while b"\n" in buffer:
            line, _, buffer = buffer.partition(b"\n")
            request = json.loads(line)
            if "import" in request:  # a module the runs forked from now on start with
                started = time.perf_counter()
                try:
                    importlib.import_module(request["import"])
                except BaseException as exc:
                    _send(reply_fd, {"error": f"importing {request['import']}: {type(exc).__name__}: {exc}"})
                else:
                    gc.freeze()
                    imported.append(request["import"])
                    if channel is not None:
                        _clones.offer(channel[1], imported, started_env)
                    _send(reply_fd, {"imported": request["import"], "seconds": time.perf_counter() - started})
                continue
            try:
                pid = os.fork()
            except OSError as exc:
                _send(reply_fd, {"error": f"fork failed: {exc}"})
                continue
            if pid == 0:
                theirs = [listening.fileno()] if listening is not None else []  # its runs ask on the other end
                _child(request, (request_fd, reply_fd, *theirs, *([watch] if watch is not None else [])))
            _send(reply_fd, {"pid": pid})


def _clone(listening: socket.socket, template_fds: Sequence[int], imported: Sequence[str], key: Any) -> int | None:
    """A template's side of a clone request read from ``listening``: the clone's pid (None: none
    was started). A request that does not fit what the template ``imported``, the ``key`` of the
    environment it started in and its process as it is now (what a clone would inherit) is
    refused (a word, then the end of the socket). The
    clone closes ``template_fds``, takes the request's environment and serves the requester on
    the socket the request carried (:mod:`bakeoff.launch.clones`)."""
    try:
        received = _clones.receive(listening)
    except OSError:
        return None
    if received is None:
        return None
    asked, fd, stdin = received
    why = _clones.refusal(asked, imported, key, _clones.process_key())
    if why is not None:
        with contextlib.suppress(OSError):
            _send(fd, {"refused": why})
    template = os.getpid()
    try:
        pid = None if why is not None else os.fork()
    except OSError:
        pid = None  # the requester reads the end of the socket, and starts a fresh server
    if pid != 0:
        for each in (fd, stdin):
            if each is not None:
                os.close(each)
        return pid
    code = 1
    try:  # the clone: never returns
        if not _clones.take_signals(asked["process"]):  # before its first word: the requester starts fresh
            return None
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=os.dup(fd)) as first:
            itself = os.pidfd_open(os.getpid())  # the requester holds this clone, not a pid that may be reused
            socket.send_fds(first, [json.dumps({"cloned": os.getpid()}).encode() + b"\n"], [itself])
            os.close(itself)
        os.setsid()
        _arm_parent_death(template)  # it dies with the template, as runs die with their server
        for each in set(template_fds):
            os.close(each)
        map_like(template)  # its resident memory starts where a fresh server's would (as a worker's does)
        if stdin is not None:  # the requester's, as a fresh server inherits it
            os.dup2(stdin, 0)
            os.close(stdin)
            sys.stdin = sys.__stdin__ = open(0, closefd=False)  # as an interpreter makes it
        else:
            with contextlib.suppress(OSError):
                os.close(0)
            sys.stdin = sys.__stdin__ = None  # type: ignore[assignment]
        os.environ.clear()
        os.environ.update(asked["env"])
        if "tempfile" in sys.modules:  # the request's TMPDIR, read again
            sys.modules["tempfile"].tempdir = None
        os.chdir(asked["cwd"])  # where a fresh server (python -m) would start: first on the module path
        sys.path[0] = os.getcwd()
        importlib.invalidate_caches()  # the template's directory listings may be out of date
        serve(int(asked["client"]), fd, fd, asked["preload"], watch=os.pidfd_open(int(asked["client"])))
        code = 0
    except BaseException:  # the requester reads the end of the socket: before the first word, it
        pass  # starts a fresh server; after it, the server is broken and its runs start fresh
    finally:
        os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bakeoff.launch.forkserver")
    parser.add_argument("--parent", type=int, required=True, help="the process the server dies with")
    parser.add_argument("--fds", required=True, help="R,W: the request and reply pipes")
    parser.add_argument(
        "--clones", help="R,A: a template's channel: it reads clone requests on R, its descendants ask on A"
    )
    parser.add_argument("--offers", action="append", default=[], help="FD:MODULE,...: a template handed down")
    parser.add_argument("preload", nargs="*", help="the modules imported before any fork")
    args = parser.parse_args(argv)
    for offer in args.offers:  # the client's templates, started in this environment
        fd, _, modules = offer.partition(":")
        os.set_inheritable(int(fd), False)  # its runs keep it; a command they start does not
        _clones.offer(int(fd), modules.split(","), os.environ)
    request_fd, reply_fd = (int(fd) for fd in args.fds.split(","))
    channel = tuple(int(fd) for fd in args.clones.split(",")) if args.clones else None
    serve(args.parent, request_fd, reply_fd, args.preload, channel)  # type: ignore[arg-type]
    return 0
