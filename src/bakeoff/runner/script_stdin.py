"""The stdin every run of one ``bakeoff exec`` reads: one copy of bakeoff's own, or nothing.

Every run of one ``bakeoff exec`` reads the same stdin (:func:`script_stdin`): bakeoff's own is
shared by all its runs, so piped input would be consumed by the first run and a terminal would
hold every run until its timeout. A terminal gives each run an empty stdin (``/dev/null``);
anything else is read once (up to :data:`STDIN_CAP` bytes; a stdin left open without a byte for
:data:`STDIN_IDLE_S` has said all it will), kept in a temporary directory named after the
bakeoff process, and each run reads that copy. A note on each run says which it was.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

__all__ = ["STDIN_CAP", "STDIN_IDLE_S", "remove_shared_stdin", "script_stdin"]

#: At most this much of bakeoff's stdin is given to the runs (the rest is not read; a note says so).
STDIN_CAP = 16 << 20
#: A stdin that stays open this long without a byte is taken to have said all it will (a pipe
#: that nobody writes to, left open by whatever started bakeoff).
STDIN_IDLE_S = 10.0


def _read_stdin() -> tuple[bytes, str]:
    """Bakeoff's stdin up to :data:`STDIN_CAP` bytes, and how the reading ended: ``end``,
    ``cap`` (more was there) or ``idle`` (open, and silent for :data:`STDIN_IDLE_S`)."""
    import select

    chunks, size = [], 0
    while size <= STDIN_CAP:
        ready, _, _ = select.select([0], [], [], STDIN_IDLE_S)
        if not ready:
            return b"".join(chunks), "idle"
        chunk = os.read(0, min(1 << 16, STDIN_CAP + 1 - size))
        if not chunk:
            return b"".join(chunks), "end"
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)[:STDIN_CAP], "cap"


def _folder(parent: int) -> Path:
    from bakeoff.launch.tempdirs import host_tag

    return Path(tempfile.gettempdir()) / f"bakeoff-exec-{parent}-{host_tag()}-stdinbuf"


def remove_shared_stdin() -> None:
    """Remove the copy of this bakeoff process's stdin that its runs shared, once they have ended
    (a process killed before it could leaves it to the next one, see :func:`_shared_stdin`)."""
    import shutil

    shutil.rmtree(_folder(os.getpid()), ignore_errors=True)


def _shared_stdin(parent: str) -> tuple[bytes, str]:
    """:func:`_read_stdin` once per bakeoff process ``parent``: the first run reads it and keeps
    it for the others in a directory named after that process (removed once it has ended, as
    :mod:`bakeoff.launch.tempdirs` removes the directories of a process killed before it could)."""
    import fcntl

    if not parent.isdigit():
        return _read_stdin()
    folder = _folder(int(parent))
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        found = folder.lstat()
        if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid():
            return _read_stdin()
    except OSError:
        return _read_stdin()
    with open(folder / "lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        kept, how = folder / "stdin", folder / "stdin.how"
        if how.exists():
            return kept.read_bytes(), how.read_text()
        data, ended = _read_stdin()
        kept.write_bytes(data)
        how.write_text(ended)  # last: a run that finds it finds the bytes too
        return data, ended


def script_stdin(parent: str) -> str | None:
    """Point this process's stdin (fd 0) at what every run of the ``bakeoff exec`` whose process
    is ``parent`` reads (see the module docstring), and say what that was (None: bakeoff's stdin
    is ``/dev/null`` or closed, left as it is)."""
    try:
        found = os.fstat(0)
    except OSError:
        return None
    if os.isatty(0):
        empty = os.open(os.devnull, os.O_RDONLY)
        os.dup2(empty, 0)
        os.close(empty)
        return (
            "the script's stdin was empty (/dev/null): bakeoff's is a terminal, and every run must read "
            "the same input (pipe it to bakeoff to give the script input)"
        )
    if stat.S_ISCHR(found.st_mode) and found.st_rdev == os.stat(os.devnull).st_rdev:
        return None
    data, ended = _shared_stdin(parent)
    copy = tempfile.TemporaryFile()
    copy.write(data)
    copy.flush()
    os.lseek(copy.fileno(), 0, os.SEEK_SET)
    os.dup2(copy.fileno(), 0)
    copy.close()
    said = f"every run of the script read the same stdin: the {len(data)} bytes bakeoff was given"
    if ended == "cap":
        said = f"every run of the script read the same stdin: the first {len(data)} bytes bakeoff was given (no more)"
    elif ended == "idle":
        said += f" before its stdin stayed open and silent for {STDIN_IDLE_S:g} s"
    return said
