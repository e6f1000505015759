"""Fork servers started by forking a warm one: a new server for the price of a fork.

A :class:`~bakeoff.launch.forkserver.ForkServer` started with ``clones=True`` is a *template*:
the process that started it, the template itself and everything forked from the template (its
runs, the servers cloned from it and their runs) start a later :class:`ForkServer` by asking the
template for it (:func:`request`). The template forks a child that takes the request's
environment, imports what the request preloads beyond what the template imported, and serves the
requester as a fresh server serves its client: a session of its own; it ends when the requester
ends (watched through a pidfd), and with the template. A fresh server pays an interpreter's
start-up and PyTorch's import (1.5-2 s of CPU on a two-core machine); a clone pays a fork.

A clone starts where a fresh server of the request would, so a request is cloned only when

- the template imported nothing the request does not preload (a clone has the same modules as
  the fresh server, imported in another order), and ran nothing (as no fork server does);
- the environments agree in every variable a module may read when it is imported
  (:func:`environment_key`), ``PYTHONHASHSEED`` included: the hash seed is settled when an
  interpreter starts, and a clone keeps the template's (set alike in both, or random in both).

Any other request, or one made where the platform has no pidfd (Linux before 5.3), or where the
template has ended, starts a fresh interpreter as before. A clone maps the file-backed pages its
template has resident (:func:`~bakeoff.launch.residency.map_like`), so that its resident memory,
the base of every run's memory figures, starts where a fresh server's would. What a clone cannot
match: ``sys.orig_argv`` (the template's command line), and where the modules the template
imported were found (its own directory first on the module path: a clone starts in the
requester's, as a fresh server would, for what it imports itself).

The channel is a ``SOCK_SEQPACKET`` socket pair made by the template's client: the template
reads requests from one end; the other is offered in this module's :data:`_templates`,
inherited by every process forked from the template. A request is one message (JSON: the
preload, the environment, the requester's pid) carrying the clone's end of a fresh stream socket
pair, over which the clone then serves (requests and replies both). Only processes holding the
channel (the template's own descendants, and its client) can ask. A fresh server is handed the
channels of its client's templates started in its environment (:func:`handed_down`), so that a
template started after another reaches its runs and clones too.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "EnvKey",
    "Template",
    "environment_key",
    "handed_down",
    "offer",
    "receive",
    "request",
    "supported",
    "withdraw",
]

#: Variables a forked worker reads afresh, so a change to them needs no new server.
_READ_AGAIN_PREFIXES = ("BAKEOFF_", "PYTEST_")
_READ_AGAIN = frozenset(
    {"COLUMNS", "LINES", "TERM", "NO_COLOR", "FORCE_COLOR", "TMPDIR", "TEMP", "TMP", "PWD", "OLDPWD"}
)
#: The largest request a template reads (an environment of a few thousand variables).
_MAX_REQUEST = 1 << 20

EnvKey = tuple[tuple[str, str], ...]


def environment_key(env: Mapping[str, str]) -> EnvKey:
    """The part of ``env`` a server's imports may have read: what must match for it to serve."""
    kept = (
        (name, value)
        for name, value in env.items()
        if name not in _READ_AGAIN and not name.startswith(_READ_AGAIN_PREFIXES)
    )
    return tuple(sorted(kept))


@dataclass(frozen=True)
class Template:
    """A template reachable from this process: the end of its channel that asks (``fd``), what
    it imported (``preload``) and the key of the environment it started in."""

    fd: int
    preload: tuple[str, ...]
    key: EnvKey

    def fits(self, preload: Sequence[str], env: Mapping[str, str]) -> bool:
        """Whether a clone of it starts where a fresh server of ``preload`` in ``env`` would."""
        return set(self.preload) <= set(preload) and environment_key(env) == self.key


#: The templates this process may ask for new servers, the latest offered last.
_templates: list[Template] = []


def supported() -> bool:
    """Whether this platform can clone servers: a pidfd to watch a requester that is not the
    clone's parent (Linux 5.3), and file descriptors passed over a Unix socket."""
    if not (hasattr(os, "pidfd_open") and hasattr(socket, "send_fds") and hasattr(socket, "AF_UNIX")):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:
        return False
    return True


def offer(fd: int, preload: Sequence[str], env: Mapping[str, str]) -> None:
    """Offer the template at the end ``fd`` of a channel (again, after it imported more) to this
    process and what it forks from now on. Of the templates that fit a request, the one that
    imported the most modules is asked (the latest offered, of those alike)."""
    withdraw(fd)
    _templates.append(Template(fd, tuple(preload), environment_key(env)))


def handed_down(env: Mapping[str, str]) -> list[Template]:
    """The templates this process hands down to a fresh server it starts in ``env``: those
    whose environment is the server's (the server offers them again to its runs and clones)."""
    key = environment_key(env)
    return [template for template in _templates if template.key == key]


def withdraw(fd: int) -> None:
    """The template at ``fd`` has ended: this process no longer asks it."""
    _templates[:] = [template for template in _templates if template.fd != fd]


def request(preload: Sequence[str], env: Mapping[str, str]) -> int | None:
    """Ask this process's template for a server of ``preload`` in ``env``: the end of the new
    server's socket (it replies "ready" on it, as a fresh server does on its pipe), or None where
    no template fits the request or it could not be asked (the caller starts a fresh server)."""
    fitting = [each for each in _templates if each.fits(preload, env)]
    if not fitting:
        return None
    template = max(reversed(fitting), key=lambda each: len(each.preload))  # the most imported already
    try:
        asked = {"preload": list(preload), "env": dict(env), "client": os.getpid(), "cwd": os.getcwd()}
    except OSError:  # no working directory to start in
        return None
    message = json.dumps(asked).encode()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        passed = [theirs.fileno(), *([0] if _open(0) else [])]  # a fresh server inherits this stdin
        channel = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=os.dup(template.fd))
        with channel:
            socket.send_fds(channel, [message], passed)
    except OSError:  # the template ended, or the request is too large: a fresh server instead
        ours.close()
        return None
    finally:
        theirs.close()
    return ours.detach()


def _open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def receive(channel: socket.socket) -> tuple[dict[str, Any], int, int | None] | None:
    """The template's side: the next request on ``channel``, the clone's socket it carries and
    the requester's stdin (None: it had none); None: a malformed message, whose descriptors are
    closed."""
    message, fds, _flags, _address = socket.recv_fds(channel, _MAX_REQUEST, 4)
    try:
        asked = json.loads(message)
        if len(fds) in (1, 2) and isinstance(asked, dict) and {"preload", "env", "client", "cwd"} <= asked.keys():
            return asked, fds[0], fds[1] if len(fds) == 2 else None
    except ValueError:
        pass
    for fd in fds:
        os.close(fd)
    return None
