"""What the keyword API's modules share: the path type of their ``db`` arguments, the default
trial settings their keywords' defaults are read from, and two questions every entry point that
runs targets asks before anything runs: which targets the specs name (each backend known), and
whether opening the database would create it (a new knowledge base is created only once the
input has proved good).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from bakeoff.settings import TrialSettings

PathLike = str | os.PathLike[str]
_DEFAULT = TrialSettings()


def _targets(on: str | Iterable[str]) -> list:
    from bakeoff.target.detect import check_backend_name, extra_devices
    from bakeoff.target.spec import parse_targets

    parsed = parse_targets([on] if isinstance(on, str) else list(on), extra_devices())
    for target in parsed:
        if target.backend is not None:
            check_backend_name(target.backend)
    return parsed


def _store_for(db: PathLike | None) -> Any:
    """The store a command will write its run to: opened now when it exists (one that cannot be
    read is refused before any work), else a callable that creates it once there is something
    to store. A SQLite file, or the directory a new one would go in, that cannot be written is
    refused now too: not after minutes of work.

    Raises:
        StoreError: the database cannot be opened, or cannot be written.
    """
    from bakeoff.store.db import Store

    Store.check_writable(db)
    if _would_create(db):
        return lambda: Store.open(db)
    return Store.open(db)


def _would_create(db: PathLike | None) -> bool:
    """Whether opening ``db`` would create a new SQLite file."""
    from bakeoff.store.connection import resolve_db_url, sqlite_file

    file = sqlite_file(resolve_db_url(db))
    return file is not None and not file.exists()


def reference_target(text: str) -> Any:
    """The target ``--reference text`` names, refused where it cannot run here: every target
    would be compared with a reference that never ran.

    Raises:
        SpecError: a malformed target, or a device this machine lacks.
    """
    from bakeoff.errors import SpecError
    from bakeoff.target.detect import extra_devices, unavailable_reason
    from bakeoff.target.spec import parse_target

    reference = parse_target(text, extra_devices())
    missing = unavailable_reason(reference)
    if missing is not None:
        raise SpecError(
            f"--reference {reference.spec} cannot run here: {missing}",
            hint="give a device this machine has (`bakeoff targets` lists them), or leave --reference out",
        )
    return reference
