"""Ordered, named, transactional schema migrations.

``MIGRATIONS[i]`` brings a database from version ``i`` to ``i + 1``. A migration is never
edited once released: later changes are new entries. Version 1 creates the tables as
:mod:`bakeoff.store.schema` defined them at version 1; when a later migration changes a
table, the version-1 definition must first be frozen into this module.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Connection,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    select,
)

from bakeoff.store import schema

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "current_version", "migrate", "pending"]


_V1_TABLES = ("meta", "environments", "baselines", "runs", "target_results", "timing_samples")

# frozen: the baselines table as version 1 created it (version 4 added its sha256 column)
_V1 = MetaData()
schema.environments.to_metadata(_V1)
_V1_BASELINES = Table(
    "baselines",
    _V1,
    Column("id", String(32), primary_key=True),
    Column("workload_spec", Text, nullable=False, index=True),
    Column("fingerprint", String(32), nullable=False, index=True),
    Column("seed", Integer, nullable=False),
    Column("created_at", String(40), nullable=False),
    Column("environment_id", Integer, ForeignKey("environments.id"), nullable=False),
    Column("refs", JSON, nullable=False),
    Column("deterministic", Boolean, nullable=False),
    Column("repeat_max_abs_err", Float, nullable=False),
    Column("path", Text, nullable=False),
)


def _v1_initial(conn: Connection) -> None:
    # frozen: apart from baselines, these tables have not changed since version 1; later tables
    # come from later steps
    first, rest = ("meta", "environments"), ("runs", "target_results", "timing_samples")
    schema.metadata.create_all(conn, tables=[schema.metadata.tables[name] for name in first])
    _V1_BASELINES.create(conn)
    schema.metadata.create_all(conn, tables=[schema.metadata.tables[name] for name in rest])


def _v2_requirements(conn: Connection) -> None:
    schema.requirements.create(conn)


def _v3_notes_and_tags(conn: Connection) -> None:
    schema.run_notes.create(conn)
    schema.run_tags.create(conn)


def _v4_baseline_hashes(conn: Connection) -> None:
    conn.exec_driver_sql("ALTER TABLE baselines ADD COLUMN sha256 VARCHAR(64)")


def _v5_sweeps(conn: Connection) -> None:
    schema.sweeps.create(conn)
    schema.sweep_cells.create(conn)


MIGRATIONS: list[tuple[str, Callable[[Connection], None]]] = [
    ("initial schema: environments, baselines, runs, target results, timing samples", _v1_initial),
    ("requirements per workload", _v2_requirements),
    ("notes and tags on runs", _v3_notes_and_tags),
    ("content hashes of baseline tensor files", _v4_baseline_hashes),
    ("coverage sweeps and their cells", _v5_sweeps),
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
