"""Ordered, named, transactional schema migrations.

``MIGRATIONS[i]`` brings a database from version ``i`` to ``i + 1``. A migration is never
edited once released: later changes are new entries. Version 1 creates the tables as
:mod:`bakeoff.store.schema` defined them at version 1; when a later migration changes a
table, the version-1 definition must first be frozen into this module.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Connection, select

from bakeoff.store import schema

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "current_version", "migrate", "pending"]


_V1_TABLES = ("meta", "environments", "baselines", "runs", "target_results", "timing_samples")


def _v1_initial(conn: Connection) -> None:
    # frozen: these tables have not changed since version 1; later tables come from later steps
    schema.metadata.create_all(conn, tables=[schema.metadata.tables[name] for name in _V1_TABLES])


def _v2_requirements(conn: Connection) -> None:
    schema.requirements.create(conn)


def _v3_notes_and_tags(conn: Connection) -> None:
    schema.run_notes.create(conn)
    schema.run_tags.create(conn)


MIGRATIONS: list[tuple[str, Callable[[Connection], None]]] = [
    ("initial schema: environments, baselines, runs, target results, timing samples", _v1_initial),
    ("requirements per workload", _v2_requirements),
    ("notes and tags on runs", _v3_notes_and_tags),
]
SCHEMA_VERSION = len(MIGRATIONS)


def current_version(conn: Connection) -> int:
    """The schema version recorded in the database (0 for an empty database)."""
    if not conn.dialect.has_table(conn, "meta"):
        return 0
    value = conn.execute(select(schema.meta.c.value).where(schema.meta.c.key == "schema_version")).scalar()
    return int(value) if value is not None else 0


def pending(start: int) -> list[str]:
    """Names of the migrations a database at version ``start`` still needs, as :func:`migrate` reports them."""
    return [f"{version + 1}: {MIGRATIONS[version][0]}" for version in range(start, SCHEMA_VERSION)]


def migrate(conn: Connection, start: int) -> list[str]:
    """Apply every migration after ``start`` inside the caller's transaction; return their names."""
    applied = []
    for version in range(start, SCHEMA_VERSION):
        name, step = MIGRATIONS[version]
        step(conn)
        applied.append(f"{version + 1}: {name}")
    if applied:
        table = schema.meta
        conn.execute(table.delete().where(table.c.key == "schema_version"))
        conn.execute(table.insert().values(key="schema_version", value=str(SCHEMA_VERSION)))
    return applied
