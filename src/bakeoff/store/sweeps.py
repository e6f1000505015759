"""Coverage sweeps in the knowledge base: the sweep, and one cell row per workload.

A cell is written in the same transaction as its run, and only if the sweep has no cell for
that workload yet: a sweep killed at any moment and resumed (even by two processes at once)
ends with every workload stored exactly once, and a run stored for a cell is never without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, insert, select

from bakeoff.env import Environment
from bakeoff.errors import StoreError
from bakeoff.results.values import RunResult
from bakeoff.store import schema
from bakeoff.store.connection import guarded, insert_unless_exists, resolve_prefix
from bakeoff.version import __version__

__all__ = ["CellRow", "SweepRecord", "SweepTables"]


@dataclass(frozen=True)
class SweepRecord:
    """A stored sweep: what it covers (``population``: name, unit, source, specs), on which
    targets, with which trial keywords, in which environment."""

    id: str
    created_at: str
    population: dict[str, Any]
    targets: tuple[str, ...]
    settings: dict[str, Any]
    environment: Environment
    bakeoff_version: str
    done: int = 0

    @property
    def specs(self) -> list[str]:
        return list(self.population.get("specs", ()))


@dataclass(frozen=True)
class CellRow:
    """One workload of a sweep: its run, or why it did not build (``error``)."""

    workload_spec: str
    position: int
    run_id: str | None
    error: dict[str, Any] | None
    duration_s: float
    finished_at: str


class SweepTables:
    """The sweep methods of :class:`~bakeoff.store.db.Store`, mixed into it: they use its
    ``engine``, ``display_url``, ``_environment_id`` and ``_insert_run``."""

    engine: Any
    display_url: str

    @guarded
    def create_sweep(
        self, sweep_id: str, created_at: str, population: dict, targets: list[str], settings: dict, env: Environment
    ) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                insert(schema.sweeps).values(
                    id=sweep_id,
                    created_at=created_at,
                    population=population,
                    targets=list(targets),
                    settings=settings,
                    environment_id=self._environment_id(conn, env),  # type: ignore[attr-defined]
                    bakeoff_version=__version__,
                )
            )

    @guarded
    def save_cell(
        self,
        sweep_id: str,
        spec: str,
        position: int,
        duration_s: float,
        finished_at: str,
        run: RunResult | None = None,
        error: dict[str, Any] | None = None,
    ) -> bool:
        """Store one cell (with its run) unless the sweep has it already; True if it went in."""
        with self.engine.begin() as conn:
            cell = insert_unless_exists(conn, schema.sweep_cells, ["sweep_id", "workload_spec"]).values(
                sweep_id=sweep_id,
                workload_spec=spec,
                position=position,
                run_id=None,
                error=error,
                duration_s=duration_s,
                finished_at=finished_at,
            )
            if not conn.execute(cell).rowcount:
                return False  # another process finished this cell first: keep its run, drop ours
            if run is not None:
                self._insert_run(conn, run, __version__, insert(schema.runs))  # type: ignore[attr-defined]
                table = schema.sweep_cells
                conn.execute(
                    table.update()
                    .where(table.c.sweep_id == sweep_id, table.c.workload_spec == spec)
                    .values(run_id=run.run_id)
                )
            return True

    @guarded
    def resolve_sweep_id(self, prefix: str) -> str:
        """The full id of the one sweep whose id starts with ``prefix``."""
        hint = "`bakeoff sweeps` lists the sweeps"
        return resolve_prefix(self.engine, self.display_url, schema.sweeps.c.id, prefix, "sweep", hint)

    @guarded
    def get_sweep(self, sweep_id: str) -> SweepRecord:
        sweeps, envs, cells = schema.sweeps, schema.environments, schema.sweep_cells
        with self.engine.connect() as conn:
            row = conn.execute(
                select(sweeps, envs.c.data.label("env"))
                .join(envs, envs.c.id == sweeps.c.environment_id)
                .where(sweeps.c.id == sweep_id)
            ).first()
            done = conn.execute(select(func.count()).where(cells.c.sweep_id == sweep_id)).scalar() or 0
        if row is None:
            raise StoreError(f"no sweep {sweep_id!r} in {self.display_url}", hint="`bakeoff sweeps` lists the sweeps")
        return SweepRecord(
            id=row.id,
            created_at=row.created_at,
            population=row.population,
            targets=tuple(row.targets),
            settings=row.settings,
            environment=Environment.from_dict(row.env),
            bakeoff_version=row.bakeoff_version,
            done=int(done),
        )

    @guarded
    def sweep_cells(self, sweep_id: str) -> list[CellRow]:
        table = schema.sweep_cells
        with self.engine.connect() as conn:
            rows = conn.execute(select(table).where(table.c.sweep_id == sweep_id).order_by(table.c.position)).all()
        return [CellRow(r.workload_spec, r.position, r.run_id, r.error, r.duration_s, r.finished_at) for r in rows]

    @guarded
    def sweep_ids(self, limit: int | None = None, before: str | None = None) -> list[str]:
        """Sweep ids, newest first; only those started before ``before`` (a ``created_at``)."""
        table = schema.sweeps
        query = select(table.c.id).order_by(table.c.created_at.desc()).limit(limit)
        if before is not None:
            query = query.where(table.c.created_at < before)
        with self.engine.connect() as conn:
            return list(conn.execute(query).scalars().all())

    def list_sweeps(self, limit: int = 20) -> list[SweepRecord]:
        return [self.get_sweep(i) for i in self.sweep_ids(limit)]
