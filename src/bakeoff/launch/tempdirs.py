"""Temporary directories that name the process that made them, so that one left behind by a process
killed before it could remove it (``kill -9``) is removed by a later bakeoff process.

Such a directory is ``bakeoff-KIND-PID-HOST-XXXXXXXX`` in the temporary directory: KIND what it
holds (``exec``: a script run's copy of its working directory; ``worker``: a worker process's
crash log, phase and captured output, a cell runner's target workers' directories included;
``cell``: a sweep cell's scratch store; ``serve``: a service run's output and remap files;
``capture``: the raw output a trial or a target session caught; ``inductor``: a cold-start
measurement's empty compile cache), PID
the process that made it and removes it when done, HOST eight hex digits of its host's name, the
rest :func:`tempfile.mkdtemp`'s. The processes using a directory never outlive its maker
(workers die with their parent), so once that PID is gone nobody is using it. Only directories
made under this host's name are judged: containers that share a temporary directory but not
their process ids keep each other's.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import tempfile
from pathlib import Path

__all__ = ["KINDS", "host_tag", "owned_tempdir", "remove_stale_tempdirs"]

#: What a directory may hold, as its name says.
KINDS = ("exec", "worker", "cell", "bisect", "serve", "coldstart", "capture", "inductor", "dist")
_NAME = re.compile(r"bakeoff-(?:" + "|".join(KINDS) + r")-([1-9][0-9]*)-([0-9a-f]{8})-[a-z0-9_]{8}")


def host_tag() -> str:
    """Eight hex digits of this host's name, in every directory name made here."""
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def owned_tempdir(kind: str, where: str | None = None) -> Path:
    """A new temporary directory named after this process, in ``where`` (None: the temporary
    directory), made after removing the stale ones (:func:`remove_stale_tempdirs`: one look
    there, each time, because a long-lived process such as a Ray worker outlives the processes
    whose directories it finds)."""
    if kind not in KINDS:
        raise ValueError(f"unknown temporary directory kind {kind!r}")
    remove_stale_tempdirs(Path(where) if where is not None else None)
    return Path(tempfile.mkdtemp(prefix=f"bakeoff-{kind}-{os.getpid()}-{host_tag()}-", dir=where))


def remove_stale_tempdirs(tmp: Path | None = None) -> list[Path]:
    """Remove the temporary directories whose maker is gone: only directories of this user named
    exactly ``bakeoff-KIND-PID-HOST-XXXXXXXX``, HOST this host's, whose PID is not a live
    process. Returns those removed.

    A PID reused by another process keeps its directory until that process ends too.
    """
    removed: list[Path] = []
    where = Path(tmp if tmp is not None else tempfile.gettempdir())
    try:
        entries = list(os.scandir(where))
    except OSError:
        return removed
    here = host_tag()
    for entry in entries:
        found = _NAME.fullmatch(entry.name)
        if found is None or found.group(2) != here or int(found.group(1)) == os.getpid():
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
        except OSError:
            continue
        if not _alive(int(found.group(1))):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(Path(entry.path))
    return removed


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists (signal 0; a process of another user is alive too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: it exists, owned by someone else
        return True
    return True
