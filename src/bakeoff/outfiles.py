"""Files a user names for bakeoff to write (reports, coverage pages, expectation files): checked
before the work that fills them, and written with one clear line when that fails anyway.

A path that is the knowledge base, or one of SQLite's files beside it (``-wal``, ``-shm``,
``-journal``), is refused: writing a report there would destroy every stored run. The database
is known by its path (``db``, as ``--db`` gives it) and, without one, by its content: any
existing SQLite database is refused as an output. A file is written whole or not at all: into a
temporary file in the same directory, then renamed over the path, so that an interrupted write
leaves the old file (or none), never half of the new one.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from bakeoff.errors import SpecError

__all__ = ["SQLITE_SUFFIXES", "check_not_database", "check_writable", "replacing", "write_text"]

#: The files SQLite keeps beside a database ``NAME``: ``NAME-wal``, ``NAME-shm``, ``NAME-journal``.
SQLITE_SUFFIXES = ("-wal", "-shm", "-journal")
_SQLITE_HEADER = b"SQLite format 3\x00"


def _same(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file: the same inode where both exist, else the same
    resolved path (a database not yet created, a journal not there at the moment)."""
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return a.resolve() == b.resolve()


def _is_sqlite(path: Path) -> bool:
    """Whether ``path`` is a regular file that starts as a SQLite database does (a FIFO or a
    device is never opened: reading one could wait for ever)."""
    try:
        if not path.is_file():
            return False
        with open(path, "rb") as handle:
            return handle.read(len(_SQLITE_HEADER)) == _SQLITE_HEADER
    except OSError:
        return False


def _database_file(db: str | os.PathLike[str] | None) -> Path | None:
    """The SQLite file ``db`` names (a path or a ``sqlite:///`` URL); None for None or a server
    URL (nothing on this disk to overwrite)."""
    if db is None:
        return None
    value = os.fspath(db)
    if "://" in value:
        if not value.startswith("sqlite:///"):
            return None
        value = value.removeprefix("sqlite:///")
    return Path(value).expanduser() if value.strip() else None


def check_not_database(path: str | os.PathLike[str], db: str | os.PathLike[str] | None = None) -> None:
    """Refuse ``path`` when it is the database ``db`` (a path or URL as
    :func:`~bakeoff.store.connection.resolve_db_url` gives it; None: not known) or a file SQLite
    keeps beside it, or any existing SQLite database or a file beside one.

    Raises:
        SpecError: one line naming the path.
    """
    target = Path(path).expanduser()
    database = _database_file(db)
    candidates = [target]
    for suffix in SQLITE_SUFFIXES:
        if target.name.endswith(suffix) and len(target.name) > len(suffix):
            candidates.append(target.with_name(target.name[: -len(suffix)]))
    for candidate in candidates:
        ours = database is not None and _same(candidate, database)
        if ours or _is_sqlite(candidate):
            which = "the knowledge base" if ours else "a SQLite database"
            what = which if candidate is target else f"a file SQLite keeps beside {which} {candidate}"
            raise SpecError(
                f"cannot write {os.fspath(path)}: it is {what}; writing there would destroy it",
                hint="choose another path for the output",
            )


def check_writable(path: str | os.PathLike[str], db: str | os.PathLike[str] | None = None) -> None:
    """Refuse a path that cannot be written (a directory, a missing or read-only folder) or that
    is the knowledge base ``db`` or a file of it (:func:`check_not_database`).

    Raises:
        SpecError: one line naming the path and why.
    """
    check_not_database(path, db)
    target = Path(path).expanduser()
    parent = target.parent if str(target.parent) else Path(".")
    why = None
    if target.is_dir():
        why = "it is a directory"
    elif not parent.is_dir():
        why = f"directory {parent} does not exist"
    elif not os.access(parent, os.W_OK | os.X_OK) or (target.exists() and not os.access(target, os.W_OK)):
        why = "permission denied"
    if why:
        raise SpecError(f"cannot write {os.fspath(path)}: {why}", hint="choose another path")


@contextlib.contextmanager
def replacing(
    path: str | os.PathLike[str], db: str | os.PathLike[str] | None = None, newline: str | None = None
) -> Iterator[IO[str]]:
    """A text file to write ``path`` through: a temporary file beside it, renamed over it when
    the block ends without an error, removed when it does not. A symbolic link is written
    through (its target is replaced); a new file gets the mode the umask gives, a replaced one
    keeps its own.

    Raises:
        SpecError: ``path`` is the database (:func:`check_not_database`), before anything is made.
        OSError: the file could not be written (the caller says it in its own words).
    """
    check_not_database(path, db)
    target = Path(os.path.realpath(Path(path).expanduser()))
    try:
        mode = target.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline=newline) as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def write_text(path: str | os.PathLike[str], text: str, db: str | os.PathLike[str] | None = None) -> None:
    """Write ``text`` to ``path`` whole (:func:`replacing`).

    Raises:
        SpecError: ``path`` is the database (:func:`check_not_database`), or the file could not
            be written (one line, with the system's reason).
    """
    try:
        with replacing(path, db) as out:
            out.write(text)
    except OSError as exc:
        raise SpecError(f"cannot write {os.fspath(path)}: {exc.strerror or exc}", hint="choose another path") from exc
