"""Tables of the current schema (SQLAlchemy Core; portable between SQLite and PostgreSQL).

Timestamps are ISO-8601 strings in UTC: they sort correctly as text and survive SQLite, which
has no time zone type. JSON columns hold the serialised values from :mod:`bakeoff.results`.
"""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

__all__ = [
    "baselines",
    "environments",
    "meta",
    "metadata",
    "requirements",
    "run_notes",
    "run_tags",
    "runs",
    "sweep_cells",
    "sweeps",
    "target_results",
    "timing_samples",
    "utc_now",
]


def utc_now() -> str:
    """The current time as the store keeps it: ISO-8601 in UTC, microseconds, ``+00:00``."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


metadata = MetaData()

meta = Table(
    "meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

environments = Table(
    "environments",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("fingerprint", String(32), nullable=False, unique=True),
    Column("captured_at", String(40), nullable=False),
    Column("data", JSON, nullable=False),
)

baselines = Table(
    "baselines",
    metadata,
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
    Column("sha256", String(64), nullable=True),  # of the tensor file; version 4
)

runs = Table(
    "runs",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("created_at", String(40), nullable=False, index=True),
    Column("workload_spec", Text, nullable=False, index=True),
    Column("workload_fingerprint", String(32), nullable=False, index=True),
    Column("workload", JSON, nullable=False),
    Column("environment_id", Integer, ForeignKey("environments.id"), nullable=False),
    Column("baseline_id", String(32), ForeignKey("baselines.id"), nullable=True),
    Column("settings", JSON, nullable=False),
    Column("bakeoff_version", String(32), nullable=False),
)

target_results = Table(
    "target_results",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(32), ForeignKey("runs.id"), nullable=False, index=True),
    Column("position", Integer, nullable=False),
    Column("target_spec", Text, nullable=False, index=True),
    Column("status", String(16), nullable=False),
    Column("verdict", String(32), nullable=True),
    Column("p50_ms", Float, nullable=True),
    Column("speedup", Float, nullable=True),
    Column("error_type", Text, nullable=True),
    Column("error_category", String(32), nullable=True),
    Column("data", JSON, nullable=False),
    UniqueConstraint("run_id", "position"),
)

timing_samples = Table(
    "timing_samples",
    metadata,
    Column("result_id", Integer, ForeignKey("target_results.id"), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("ms", Float, nullable=False),
)

# version 2: what a workload's service needs (``--require``), kept per workload spec so that
# later trials, on any baseline recomputed for it, check the same requirements.
requirements = Table(
    "requirements",
    metadata,
    Column("workload_spec", Text, primary_key=True),
    Column("updated_at", String(40), nullable=False),
    Column("texts", JSON, nullable=False),
)

# version 3: what people say about a run. Notes are free text kept beside the numbers (a failed
# attempt, an operational observation); tags group runs for selection (``history --tag``).
run_notes = Table(
    "run_notes",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(32), ForeignKey("runs.id"), nullable=False, index=True),
    Column("created_at", String(40), nullable=False),
    Column("text", Text, nullable=False),
    Column("author", Text, nullable=True),
)

run_tags = Table(
    "run_tags",
    metadata,
    Column("run_id", String(32), ForeignKey("runs.id"), primary_key=True),
    Column("tag", String(64), primary_key=True),
    Column("created_at", String(40), nullable=False),
    Index("ix_run_tags_tag", "tag"),
)

# version 5: coverage sweeps. A sweep is a population of workloads run on the same targets;
# each workload is a cell row, written in the same transaction as its run (or with the reason
# the workload did not build), so a sweep resumed after a kill has every cell exactly once.
sweeps = Table(
    "sweeps",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("created_at", String(40), nullable=False, index=True),
    Column("population", JSON, nullable=False),  # name, unit, source, specs
    Column("targets", JSON, nullable=False),  # target specs
    Column("settings", JSON, nullable=False),  # the trial keywords every cell ran with
    Column("environment_id", Integer, ForeignKey("environments.id"), nullable=False),
    Column("bakeoff_version", String(32), nullable=False),
)

sweep_cells = Table(
    "sweep_cells",
    metadata,
    Column("sweep_id", String(32), ForeignKey("sweeps.id"), primary_key=True),
    Column("workload_spec", Text, primary_key=True),
    Column("position", Integer, nullable=False),
    Column("run_id", String(32), ForeignKey("runs.id"), nullable=True),
    Column("error", JSON, nullable=True),  # why the workload did not build (no run then)
    Column("duration_s", Float, nullable=False),
    Column("finished_at", String(40), nullable=False),
)
