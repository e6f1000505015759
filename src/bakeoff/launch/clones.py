"""Fork servers started by forking a warm one: a new server for the price of a fork.

A :class:`~bakeoff.launch.forkserver.ForkServer` started with ``clones=True`` is a *template*:
the process that started it, the template itself and everything forked from the template (its
runs, the servers cloned from it and their runs) start a later :class:`ForkServer` by asking the
template for it (:func:`request`). The template forks a child that takes the request's
environment, imports what the request preloads beyond what the template imported, and serves
the requester as a fresh server serves its client, in a session of its own. A fresh server pays
an interpreter's start-up and PyTorch's import (1.5-2 s of CPU on a two-core machine); a clone
pays a fork.

A clone starts where a fresh server of the request would, so a request is cloned only when

- the template imported nothing the request does not preload (a clone has the same modules as
  the fresh server, imported in another order), and ran nothing (as no fork server does);
- the environments agree in every variable a module may read when it is imported
  (:func:`environment_key`), ``PYTHONHASHSEED`` included: the hash seed is settled when an
  interpreter starts, and a clone keeps the template's (set alike in both; where it is unset in
  both, every clone of one template shares the template's random seed);
- the requester's process has what a fresh server would inherit from it alike with the
  template's (:func:`process_key`: umask, resource limits, CPU affinity, priority, cgroup, OOM
  score adjustment), except the signals it ignores and blocks, which the clone takes from the
  request (a bakeoff worker ignores Ctrl-C: a sweep's cell runner asks for its trials' server).

The requester checks the first two against its record of the template; the template checks all
three again (its record may be out of date) and refuses a request that does not fit. Any request
refused or not made (no template fits, the platform has no pidfd: Linux before 5.3, the template
has ended) starts a fresh interpreter as before. A clone takes the request's environment,
working directory (first on its module path, as ``python -m`` puts it) and stdin, and maps the
file-backed pages its template has resident (:func:`~bakeoff.launch.residency.map_like`), so that
its resident memory, the base of every run's memory figures, starts where a fresh server's
would. What a clone cannot match: ``sys.orig_argv`` (the template's command line), where the
modules the template imported were found (the template's directory, not the requester's), and
state a module seeded when imported (numpy's global random state is the template's in every
clone, as it is in every run of one server). A clone ends when its requester ends (a pidfd) and
when its template ends (its parent); its runs end with it.

The channel is a ``SOCK_SEQPACKET`` socket pair made by the template's client: the template
reads requests from one end; the other is offered in this module's :data:`_templates`,
inherited by every process forked from the template. A request is one message (JSON: the
preload, the environment, the requester's pid, directory and process) carrying the clone's end
of a fresh stream socket pair and the requester's stdin; the clone's first word on that socket
is its pid with a pidfd of itself (its pid may be reused once it ends; the pidfd cannot), and it
then serves there (requests and replies both). Only processes holding the channel (the
template's own descendants, and its client) can ask. A fresh server is handed the channels of
its client's templates started in its environment (:func:`handed_down`), so that a template
started after another reaches its runs and clones too.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "SIGNALS",
    "EnvKey",
    "Template",
    "environment_key",
    "handed_down",
    "offer",
    "process_key",
    "receive",
    "refusal",
    "request",
    "supported",
    "take_signals",
    "withdraw",
]

#: Variables a forked worker reads afresh, so a change to them needs no new server.
_READ_AGAIN_PREFIXES = ("BAKEOFF_", "PYTEST_")
#: ``TORCHINDUCTOR_CACHE_DIR``: inductor sets it in a process the first time anything there asks
#: for its cache (a compile, a FLOP count) and reads it back when it compiles; no server's preload
#: reads it when imported (a server that imports the compiler is an exec's, whose runs need its
#: exact environment), so a process that ran inductor keeps its servers and templates.
_READ_AGAIN = frozenset(
    {
        "COLUMNS", "LINES", "TERM", "NO_COLOR", "FORCE_COLOR", "TMPDIR", "TEMP", "TMP", "PWD", "OLDPWD",
        "TORCHINDUCTOR_CACHE_DIR",
    }
)  # fmt: skip
#: The largest request a template reads (an environment of a few thousand variables).
_MAX_REQUEST = 1 << 20
#: What a request holds.
_KEYS = frozenset({"preload", "env", "client", "cwd", "process"})

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
_lock = threading.Lock()
os.register_at_fork(after_in_child=lambda: globals().update(_lock=threading.Lock()))


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


#: The first entries of :func:`process_key` a clone takes from its request (:func:`take_signals`)
#: instead of matching the template's: the signals ignored and those blocked.
SIGNALS = 2


def process_key() -> list[Any]:
    """What a fresh server inherits from the process that starts it, beside the environment:
    the signals it ignores or blocks, its umask, resource limits, CPU affinity, priority, cgroup
    and OOM score adjustment. A clone takes the first :data:`SIGNALS` from its request and has
    its template's others, so they must match (Linux: where clones are :func:`supported`)."""
    import resource

    status = dict(line.split(":", 1) for line in _read("/proc/self/status").splitlines() if ":" in line)
    ignored = int(status.get("SigIgn", "0").strip() or "0", 16) & ~_PYTHONS_OWN
    limits = [[name, *resource.getrlimit(getattr(resource, name))] for name in sorted(dir(resource))
              if name.startswith("RLIMIT_")]  # fmt: skip
    return [
        ignored,
        status.get("SigBlk", "").strip(),
        status.get("Umask", "").strip(),
        limits,
        sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [],
        os.getpriority(os.PRIO_PROCESS, 0),
        _read("/proc/self/cgroup"),
        _read("/proc/self/oom_score_adj").strip(),
    ]


#: The signals every interpreter ignores itself, whatever it inherited.
_PYTHONS_OWN = (1 << (signal.SIGPIPE - 1)) | (1 << (signal.SIGXFSZ - 1))


def take_signals(process: list[Any]) -> bool:
    """Ignore and block the signals a requester's ``process`` key (:func:`process_key`) says,
    as a fresh interpreter it started would have inherited them (where one is ignored, Python
    installs no handler of its own; where not, SIGINT gets Python's ``KeyboardInterrupt``);
    returns whether this process's key now says the same."""
    ignored, blocked = int(process[0]), int(process[1] or "0", 16)
    for number in sorted(int(s) for s in signal.valid_signals()):
        if number in (signal.SIGKILL, signal.SIGSTOP) or (1 << (number - 1)) & _PYTHONS_OWN:
            continue
        wanted = bool(ignored & (1 << (number - 1)))
        if wanted != (signal.getsignal(number) == signal.SIG_IGN):
            default = signal.default_int_handler if number == signal.SIGINT else signal.SIG_DFL
            signal.signal(number, signal.SIG_IGN if wanted else default)
    signal.pthread_sigmask(signal.SIG_SETMASK, {n for n in signal.valid_signals() if blocked & (1 << (int(n) - 1))})
    return process_key()[:SIGNALS] == process[:SIGNALS]


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return ""


def offer(fd: int, preload: Sequence[str], env: Mapping[str, str]) -> None:
    """Offer the template at the end ``fd`` of a channel (again, after it imported more) to this
    process and what it forks from now on. Of the templates that fit a request, the one that
    imported the most modules is asked (the latest offered, of those alike)."""
    with _lock:
        _templates[:] = [template for template in _templates if template.fd != fd]
        _templates.append(Template(fd, tuple(preload), environment_key(env)))


def handed_down(env: Mapping[str, str]) -> list[Template]:
    """The templates this process hands down to a fresh server it starts in ``env``: those
    whose environment is the server's (the server offers them again to its runs and clones)."""
    key = environment_key(env)
    with _lock:
        return [template for template in _templates if template.key == key]


def withdraw(fd: int) -> None:
    """The template at ``fd`` has ended, or did not answer: this process no longer asks it."""
    with _lock:
        _templates[:] = [template for template in _templates if template.fd != fd]


def request(preload: Sequence[str], env: Mapping[str, str]) -> tuple[int, int] | None:
    """Ask this process's template for a server of ``preload`` in ``env``: the end of the new
    server's socket (its first word is its pid and a pidfd; then it replies "ready", as a fresh
    server does on its pipe) and the template's channel, or None where no template fits the
    request or it could not be asked (the caller starts a fresh server). The template checks
    the request again against what it imported and started with, and refuses one that does not
    fit (a word, then the end of the socket)."""
    with _lock:
        fitting = [each for each in _templates if each.fits(preload, env)]
    if not fitting:  # most processes: no template at all
        return None
    template: Template | None = max(reversed(fitting), key=lambda each: len(each.preload))
    try:
        asked = {"preload": list(preload), "env": dict(env), "client": os.getpid(), "cwd": os.getcwd()}
    except OSError:  # no working directory to start in
        return None
    asked["process"] = process_key()
    message = json.dumps(asked).encode()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    passed = [theirs.fileno(), *([0] if _open(0) else [])]  # a fresh server inherits this stdin
    with _lock:  # the template's fd stays its own until the request is sent
        try:
            if template in _templates:  # not withdrawn (and its fd closed) meanwhile
                with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=os.dup(template.fd)) as channel:
                    socket.send_fds(channel, [message], passed)
            else:
                template = None
        except OSError:  # the template ended, or the request is too large: a fresh server instead
            template = None
    theirs.close()
    if template is None:
        ours.close()
        return None
    return ours.detach(), template.fd


def _open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def receive(channel: socket.socket) -> tuple[dict[str, Any], int, int | None] | None:
    """The template's side: the next request on ``channel``, the clone's socket it carries and
    the requester's stdin (None: it had none), each moved to a descriptor above 2 that a command
    the clone starts does not inherit; None: a malformed message, whose descriptors are
    closed."""
    import fcntl

    message, received, _flags, _address = socket.recv_fds(channel, _MAX_REQUEST, 4)
    fds = []
    for fd in received:  # never 0-2: the template's creator may have had none of them open
        fds.append(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3))
        os.close(fd)
    try:
        asked = json.loads(message)
        if len(fds) in (1, 2) and isinstance(asked, dict) and _KEYS <= asked.keys():
            return asked, fds[0], fds[1] if len(fds) == 2 else None
    except (ValueError, RecursionError):
        pass
    for fd in fds:
        os.close(fd)
    return None


def refusal(asked: Mapping[str, Any], imported: Sequence[str], key: EnvKey, process: list[Any]) -> str | None:
    """Why a template that imported ``imported``, started in an environment of ``key`` and whose
    process is now ``process`` (:func:`process_key`) does not clone for ``asked`` (None: it does).
    The requester checked the first two against its own record of the template, which may be
    older than the template's last import."""
    if not set(imported) <= set(asked["preload"]):
        return f"the template imported {sorted(set(imported) - set(asked['preload']))}, which the request does not"
    if environment_key(asked["env"]) != key:
        return "the request's environment differs from the template's in a variable read at import"
    if asked["process"][SIGNALS:] != json.loads(json.dumps(process))[SIGNALS:]:  # a clone takes the signals
        return "the requester's process differs from the template's (limits, affinity, priority or cgroup)"
    return None
