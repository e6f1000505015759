"""Files a user names for bakeoff to write (reports, coverage pages, expectation files): checked
before the work that fills them, and written with one clear line when that fails anyway."""

from __future__ import annotations

import os
from pathlib import Path

from bakeoff.errors import SpecError

__all__ = ["check_writable", "write_text"]


def check_writable(path: str | os.PathLike[str]) -> None:
    """Refuse a path that cannot be written (a directory, a missing or read-only folder).

    Raises:
        SpecError: one line naming the path and why.
    """
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


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path``.

    Raises:
        SpecError: the file could not be written (one line, with the system's reason).
    """
    try:
        with open(Path(path).expanduser(), "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        raise SpecError(f"cannot write {os.fspath(path)}: {exc.strerror or exc}", hint="choose another path") from exc
