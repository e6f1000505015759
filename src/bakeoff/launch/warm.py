"""Warm fork servers kept for the life of this process: one per preload and environment.

A trial gives each target session a worker process of its own (:class:`~bakeoff.launch.process.Worker`).
Spawned, each one pays an interpreter's start-up and its imports (PyTorch, transformers: 1.5 to
2.5 s of CPU apiece); forked from a :class:`~bakeoff.launch.forkserver.ForkServer` that imported
them once, it pays a fork. :func:`shared_server` keeps that server for every later request of this
process with the same preload (the next trial of a notebook, a test session, a plan), so it is
started once. A process keeps up to :data:`KEPT` servers (one per preload: the workload's kind
and architecture); past that, the one unused longest is ended, unless a worker forked from it is
still running.

What a forked worker starts from is the server's state, and the server has run nothing: no op of
torch, no compile, no device plugin, no thread. What one target's session changes in its process
(a compile backend's settings, a PrivateUse1 registration) still cannot reach another target's.
The server is started with this process's environment, because PyTorch and its libraries read
some variables when they are imported; a request made after the environment changed starts a
new server (the old one is ended once no worker forked from it runs). Variables read again by
the worker do not count (:func:`~bakeoff.launch.clones.environment_key`): bakeoff's own,
pytest's, the terminal's, the shell's working directories, the temporary directory
(``tempfile`` forgets the server's), and inductor's cache directory (which inductor names in
this process the first time anything here asks for it, and reads when it compiles).
Where this process reaches a template that fits, the server is its clone (:mod:`bakeoff.launch.clones`).
A worker that must import in an environment of its own (a target's switches) is spawned as
before, and so is every worker where the platform cannot fork (:func:`~bakeoff.launch.forkserver.forkable`)
or the server failed to start.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Sequence

from bakeoff.launch.clones import EnvKey, environment_key
from bakeoff.launch.forkserver import ForkServer, forkable

__all__ = ["close_servers", "shared_server"]

#: How many servers a process keeps (each an idle interpreter with its imports: 250-400 MiB);
#: beyond it, the longest unused idle one is ended.
KEPT = 3

_servers: dict[tuple[str, ...], tuple[EnvKey, ForkServer]] = {}  # oldest use first
_outdated: list[ForkServer] = []  # replaced while workers forked from it still ran
_lock = threading.Lock()
_registered: list[bool] = []


def shared_server(preload: Sequence[str]) -> ForkServer | None:
    """This process's fork server for ``preload`` (started now when there is none, or when the
    environment changed since it started); None where workers cannot be forked. The server
    imports while the caller goes on: the first fork waits for it."""
    if not forkable():
        return None
    wanted = tuple(preload)
    key = environment_key(os.environ)
    with _lock:
        for server in [s for s in _outdated if s.idle]:
            _outdated.remove(server)
            server.close()
        kept = _servers.pop(wanted, None)
        if kept is not None:
            started_in, server = kept
            if started_in == key and server.broken is None:
                _servers[wanted] = kept  # now the latest used
                return server
            if server.idle:
                server.close()
            else:  # its workers still run in the old environment: it ends with them, or at exit
                _outdated.append(server)
        unused = [other for other, (_key, server) in _servers.items() if server.idle]
        for other in unused[: max(0, len(_servers) + 1 - KEPT)]:
            _servers.pop(other)[1].close()
        if not _registered:
            atexit.register(close_servers)
            _registered.append(True)
        server = ForkServer(wanted, os.environ)
        _servers[wanted] = (key, server)
        return server


def close_servers() -> None:
    """End every server kept (each also dies with this process)."""
    with _lock:
        for server in [*(server for _key, server in _servers.values()), *_outdated]:
            server.close()
        _servers.clear()
        _outdated.clear()
