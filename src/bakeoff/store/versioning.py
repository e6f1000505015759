"""Which schema version a database has, and when it is brought up to date.

The steps themselves are in :mod:`bakeoff.store.migrations`; this module decides when they run.
A SQLite file is upgraded when it is opened (one user, one file). A server database is shared
by machines that may run different releases, so ordinary commands only create a new, empty
one; an older one is refused until someone runs ``bakeoff db upgrade`` deliberately.
Concurrent openers are serialised around a migration (an advisory lock on PostgreSQL, an
immediate write transaction on SQLite), so two clients starting at once migrate once.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, func, inspect, select
from sqlalchemy.exc import DBAPIError

from bakeoff.errors import StoreError
from bakeoff.store import schema
from bakeoff.store.connection import lock_writers, server_hint
from bakeoff.store.migrations import SCHEMA_VERSION, current_version, migrate, pending

__all__ = ["MIGRATION_LOCK", "check_version", "ensure_schema", "schema_status", "upgrade"]

#: pg_advisory_xact_lock key held while migrating a server database: "bakeoff" in ASCII
MIGRATION_LOCK = int.from_bytes(b"bakeoff", "big")


def check_version(conn: Any, display_url: str, refuse_newer: bool = True) -> int:
    """The database's schema version, after making sure it is bakeoff's to touch.

    A database with tables but no recorded schema version is someone else's (even when a
    table happens to be called ``meta`` or ``runs``): it is refused before anything is
    written, so a mistyped ``--db`` leaves the file byte-identical.
    """
    names = inspect(conn).get_table_names()
    version = current_version(conn)
    if version == 0 and names:
        ours = [t for t in names if t in schema.metadata.tables]
        shown = next((t for t in names if t not in schema.metadata.tables), names[0])
        raise StoreError(
            f"{display_url} is a database but not a bakeoff one (it has tables such as {shown!r}"
            + (" and no bakeoff schema version)" if ours else ")"),
            hint="pass a bakeoff database or a new path with --db",
        )
    if refuse_newer and version > SCHEMA_VERSION:
        raise StoreError(
            f"database {display_url} has schema version {version}, newer than this "
            f"bakeoff understands ({SCHEMA_VERSION})",
            hint="upgrade bakeoff to use it",
        )
    return version


def ensure_schema(engine: Engine, display_url: str, upgrade: bool | None) -> None:
    """Check a database just opened and migrate it as ``upgrade`` allows (see :meth:`Store.open`).

    Raises:
        StoreError: not a bakeoff database, newer than this release, an older server database
            without ``upgrade=True``, damaged, or unreachable.
    """
    is_sqlite = engine.dialect.name == "sqlite"
    try:
        with engine.connect() as conn:
            version = check_version(conn, display_url, refuse_newer=upgrade is not False)
        if upgrade is False:
            return
        if 0 < version < SCHEMA_VERSION and upgrade is None and not is_sqlite:
            raise StoreError(
                f"database {display_url} has schema version {version}; this bakeoff needs version {SCHEMA_VERSION}",
                hint="run `bakeoff db upgrade` once for everyone who shares it; "
                "older bakeoff releases will then refuse it",
            )
        if version < SCHEMA_VERSION:
            with engine.begin() as conn:
                lock_writers(conn, MIGRATION_LOCK)
                migrate(conn, check_version(conn, display_url))  # again: another client may have done it
        with engine.connect() as conn:
            missing = sorted(set(schema.metadata.tables) - set(inspect(conn).get_table_names()))
        if missing:
            raise StoreError(
                f"database {display_url} is damaged: table {missing[0]!r} is missing",
                hint="restore it from a backup or use a new --db",
            )
    except DBAPIError as exc:
        detail = str(exc.orig).strip().splitlines()[0] if str(exc.orig).strip() else type(exc.orig).__name__
        if is_sqlite:
            raise StoreError(
                f"cannot open database {display_url}: {detail}",
                hint="pass a bakeoff database file or a new path with --db",
            ) from exc
        raise StoreError(f"cannot open database {display_url}: {detail}", hint=server_hint(detail)) from exc
    except ValueError as exc:  # a schema_version that is not a number
        raise StoreError(
            f"database {display_url} is damaged: {exc}", hint="restore it from a backup or use a new --db"
        ) from exc


def schema_status(engine: Engine, display_url: str) -> dict[str, Any]:
    """Where a database stands: its schema version, this release's, and what is pending."""
    with engine.connect() as conn:
        version = check_version(conn, display_url, refuse_newer=False)
        runs = 0
        if version >= 1:
            runs = int(conn.execute(select(func.count()).select_from(schema.runs)).scalar_one())
    return {
        "database": display_url,
        "dialect": engine.dialect.name,
        "schema_version": version,
        "supported_version": SCHEMA_VERSION,
        "pending": pending(version) if version <= SCHEMA_VERSION else [],
        "newer": version > SCHEMA_VERSION,
        "runs": runs,
    }


def upgrade(engine: Engine, display_url: str) -> list[str]:
    """Apply pending migrations (under the migration lock); the names of those applied."""
    try:
        with engine.begin() as conn:
            lock_writers(conn, MIGRATION_LOCK)
            return migrate(conn, check_version(conn, display_url))
    except DBAPIError as exc:
        detail = str(exc.orig).strip().splitlines()[0]
        raise StoreError(
            f"cannot upgrade database {display_url}: {detail}",
            hint=server_hint(detail) if engine.dialect.name != "sqlite" else "check that the file is writable",
        ) from exc
