"""Light queries for choosing runs: who ran what, when, in which environment.

Regression detection and reports first decide *which* runs they need from these headers (no
results, no samples), then load only those runs in full.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from bakeoff.errors import StoreError
from bakeoff.store import schema
from bakeoff.store.db import Store

__all__ = ["RunHeader", "no_runs", "run_headers"]


@dataclass(frozen=True)
class RunHeader:
    """A run's identity and the ``(target, variant)`` results it holds."""

    run_id: str
    created_at: str
    workload_spec: str
    environment_fingerprint: str
    keys: tuple[tuple[str, str], ...]

    def as_tuple(self) -> tuple[str, str, str, str, tuple[tuple[str, str], ...]]:
        """The shape :func:`bakeoff.verdicts.regressions.pair_runs` takes."""
        return (self.run_id, self.created_at, self.workload_spec, self.environment_fingerprint, self.keys)

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "keys": [list(k) for k in self.keys]}


def run_headers(
    store: Store,
    *,
    workload: str | None = None,
    target: str | None = None,
    run_ids: Sequence[str] | None = None,
) -> list[RunHeader]:
    """Headers of the runs matching every filter given, oldest first.

    ``target`` keeps only that target's results in each header (and drops runs without it).
    """
    runs, results, envs = schema.runs, schema.target_results, schema.environments
    query = (
        select(
            runs.c.id,
            runs.c.created_at,
            runs.c.workload_spec,
            envs.c.fingerprint,
            results.c.target_spec,
            results.c.data["variant"].as_string().label("variant"),
        )
        .join(envs, envs.c.id == runs.c.environment_id)
        .join(results, results.c.run_id == runs.c.id)
        .order_by(runs.c.created_at, runs.c.id, results.c.position)
    )
    if workload is not None:
        query = query.where(runs.c.workload_spec == workload)
    if target is not None:
        query = query.where(results.c.target_spec == target)
    if run_ids is not None:
        query = query.where(runs.c.id.in_(list(run_ids)))
    heads: dict[str, tuple[str, str, str]] = {}
    keys: dict[str, list[tuple[str, str]]] = {}
    try:
        with store.engine.connect() as conn:
            for run_id, created_at, spec, env_fp, target_spec, variant in conn.execute(query):
                heads.setdefault(run_id, (created_at, spec, env_fp))
                keys.setdefault(run_id, []).append((target_spec, variant or "as-is"))
    except SQLAlchemyError as exc:
        detail = str(getattr(exc, "orig", None) or exc).splitlines()[0]
        raise StoreError(
            f"database {store.display_url} could not be read: {detail}",
            hint="check the file or server; restore a damaged database from a backup",
        ) from exc
    return [RunHeader(run_id, *heads[run_id], tuple(keys[run_id])) for run_id in heads]


def no_runs(store: Store, workload: str | None = None, tag: str | None = None) -> StoreError:
    """The one error for a selection that matched no stored run (a report's, an export's): what was
    asked for, in which knowledge base, and how to see what it holds."""
    if tag is not None:
        what = f"no runs tagged {tag!r}"
    else:
        what = f"no runs of {workload!r}" if workload is not None else "no runs"
    hint = "run `bakeoff history` to see what is stored, or check --db"
    return StoreError(f"{what} in {store.display_url}", hint=hint)
