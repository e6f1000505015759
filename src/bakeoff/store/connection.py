"""Reaching a database: its URL, its engine, and the errors and statements that differ by server.

``--db`` takes a file path or a URL; a path means a SQLite file, ``postgresql://`` a server
through psycopg 3. Everything here is the same for every table: the store's reads and writes
live in :mod:`bakeoff.store.db`, the schema's version in :mod:`bakeoff.store.versioning`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, Table, create_engine, event, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from bakeoff.errors import StoreError

__all__ = [
    "BUSY_TIMEOUT_S",
    "DEFAULT_DB",
    "db_flag",
    "dialect_insert",
    "display_db_url",
    "guarded",
    "insert_unless_exists",
    "lock_writers",
    "make_engine",
    "resolve_db_url",
    "server_hint",
    "set_sqlite_pragmas",
    "sqlite_file",
]

DEFAULT_DB = "bakeoff.db"
T = TypeVar("T")
_CONNECT_TIMEOUT_S = 10
_SERVER_HINT = "check that the server is running and the URL's host, port, user, password and database name"
_PRIVILEGE_HINT = (
    "bakeoff's role must be able to create tables there: make it the database's owner, "
    "e.g. createdb -O ROLE DBNAME, or ALTER DATABASE DBNAME OWNER TO ROLE"
)


def server_hint(detail: str) -> str:
    """How to fix a server database that refused us, from the first line of its complaint."""
    return _PRIVILEGE_HINT if "permission denied" in detail.lower() else _SERVER_HINT


def resolve_db_url(db: str | os.PathLike[str] | None) -> str:
    """``--db`` value, else ``BAKEOFF_DB``, else ``bakeoff.db`` here; plain paths become SQLite URLs."""
    value = str(db) if db is not None else os.environ.get("BAKEOFF_DB") or DEFAULT_DB
    if not value.strip():
        raise StoreError(
            "--db is empty", hint="give a file path or a postgresql:// URL, or leave --db out for ./bakeoff.db"
        )
    if "://" in value:
        return value
    return f"sqlite:///{Path(value).expanduser().resolve()}"


def db_flag(db: str | os.PathLike[str] | None) -> str:
    """What a command printed as a hint needs to read the same knowledge base: `` --db DB`` where
    ``--db`` was given, else "" (the default, or ``BAKEOFF_DB``, applies again)."""
    if db is None:
        return ""
    import shlex

    return f" --db {shlex.quote(str(db))}"


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite database URL (``sqlite:///PATH``); None for a server's URL."""
    return Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None


def display_db_url(url: str) -> str:
    """A database URL as it may be printed: a SQLite file as its path, a server URL without its password."""
    if url.startswith("sqlite:///"):
        return url.removeprefix("sqlite:///")
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def make_engine(url: str) -> Engine:
    """An engine for a SQLite or PostgreSQL URL; ``postgresql://`` means the psycopg 3 driver.

    Raises:
        StoreError: a URL that cannot be parsed, names another kind of database, or needs a
            driver that is not installed.
    """
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise StoreError(
            f"cannot use database URL {url!r}: {exc}", hint="use a file path or a sqlite:/// or postgresql:// URL"
        ) from exc
    backend, _, driver = parsed.drivername.partition("+")
    if backend == "postgres":  # the libpq spelling; SQLAlchemy only knows postgresql
        backend = "postgresql"
    if backend not in ("sqlite", "postgresql"):
        raise StoreError(
            f"bakeoff keeps runs in SQLite or PostgreSQL, not {backend!r} ({display_db_url(url)})",
            hint="use a file path or a postgresql://user@host/dbname URL",
        )
    from bakeoff.results import strictjson

    # JSON columns: strict JSON (PostgreSQL refuses NaN/Infinity), infinities tagged and restored
    kwargs: dict[str, Any] = {"json_serializer": strictjson.dumps, "json_deserializer": strictjson.loads}
    if backend == "postgresql":
        parsed = parsed.set(drivername=f"postgresql+{driver or 'psycopg'}")
        # whatever the server's default: "insert unless exists, then read it" needs to see rows
        # other writers committed meanwhile
        kwargs["isolation_level"] = "READ COMMITTED"
        if "connect_timeout" not in parsed.query:  # an unreachable host fails in seconds, not minutes
            kwargs["connect_args"] = {"connect_timeout": _CONNECT_TIMEOUT_S}
    try:
        return create_engine(parsed, **kwargs)
    except ImportError as exc:
        raise StoreError(
            f"cannot use {display_db_url(url)}: the PostgreSQL driver is not installed ({exc})",
            hint="pip install 'bakeoff[postgres]' (psycopg 3)",
        ) from exc
    except (SQLAlchemyError, ValueError) as exc:
        raise StoreError(
            f"cannot use database URL {display_db_url(url)!r}: {exc}",
            hint="use a file path or a sqlite:/// or postgresql:// URL",
        ) from exc


#: How long a SQLite connection waits for another process's lock before it gives up.
BUSY_TIMEOUT_S = 30.0


def set_sqlite_pragmas(engine: Engine) -> None:
    """Enforce foreign keys and wait (up to :data:`BUSY_TIMEOUT_S`) for another writer's lock on
    every connection."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        cursor.close()


#: Words of a database error that says it was not allowed to write, not that the file is damaged.
_DENIED = ("readonly", "read-only", "unable to open", "permission", "not permitted")


def guarded(method: Callable[..., T]) -> Callable[..., T]:
    """Turn database errors in a method of an object with a ``display_url`` into one StoreError line."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> T:
        try:
            return method(self, *args, **kwargs)
        except SQLAlchemyError as exc:
            detail = str(getattr(exc, "orig", None) or exc).splitlines()[0]
            denied = any(word in detail.lower() for word in _DENIED)
            if "locked" in detail.lower():  # another process's lock outlasted SQLite's wait: nothing is damaged
                hint = "another process holds its lock (a long import or sweep, a sqlite3 shell); try again later"
            elif denied:
                hint = "make the file and its directory writable (SQLite writes a journal beside the file), or choose "
                hint += "another --db path"
            else:
                hint = "check the file or server; restore a damaged database from a backup"
            raise StoreError(f"database {self.display_url} could not be read or written: {detail}", hint=hint) from exc

    return wrapper


def lock_writers(conn: Any, key: int) -> None:
    """Hold, until the transaction ``conn`` ends, the right to write alone among those asking for ``key``.

    SQLite has one lock for the whole file (taken now rather than at the first write); a
    PostgreSQL server gets a transaction-scoped advisory lock on ``key``.
    """
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    else:
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})


def dialect_insert(conn: Any, table: Table) -> Any:
    """An INSERT that can say ``ON CONFLICT``: both SQLite and PostgreSQL have it."""
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as dialect_insert
    else:
        from sqlalchemy.dialects.sqlite import insert as dialect_insert
    return dialect_insert(table)


def insert_unless_exists(conn: Any, table: Table, keys: list[str]) -> Any:
    """``INSERT ... ON CONFLICT (keys) DO NOTHING``: safe when another writer inserts the same row."""
    # rowcount says whether the row went in; some drivers forget it once the cursor closes
    return (
        dialect_insert(conn, table)
        .on_conflict_do_nothing(index_elements=keys)
        .execution_options(preserve_rowcount=True)
    )


def resolve_prefix(engine: Any, where: str, column: Any, prefix: str, noun: str, hint: str) -> str:
    """The one id in ``column`` that starts with ``prefix`` (``where``: the database, as shown).

    Raises:
        StoreError: none does (``hint`` says where to list them), or more than one does.
    """
    if not prefix.strip():  # every id starts with it: "ambiguous" would say nothing of the mistake
        raise StoreError(f"an empty {noun} id", hint=hint)
    with engine.connect() as conn:
        ids = conn.execute(select(column).where(column.startswith(prefix, autoescape=True)).limit(2)).scalars().all()
    if not ids:
        raise StoreError(f"no {noun} {prefix!r} in {where}", hint=hint)
    if len(ids) > 1:
        raise StoreError(f"{noun} id prefix {prefix!r} is ambiguous", hint="give more characters of the id")
    return str(ids[0])
