"""A run's rows: writing a :class:`RunResult` into the runs, target results and timing samples
tables, reading one back whole, and listing runs.

Every raw timing sample is its own row, so a run is read back with the samples it was measured
with and percentiles are derived again on read. The environment row is shared between runs; what
varies from run to run (load, clocks: :data:`bakeoff.env.VOLATILE`) is kept with the run's
settings and laid back over the environment when the run is read.

The functions take the caller's connection: :class:`~bakeoff.store.db.Store` methods hold the
transaction (and turn database errors into one line), a sweep cell or an import writes its run in
the transaction that records the rest.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, insert, select

from bakeoff.env import VOLATILE, Environment
from bakeoff.errors import StoreError
from bakeoff.results.summary import RunSummary
from bakeoff.results.values import RunResult, TargetResult
from bakeoff.store import schema
from bakeoff.store.environments import environment_id, select_environment
from bakeoff.version import __version__

__all__ = ["insert_run", "select_run", "select_run_index", "select_run_summaries"]

_VOLATILE_KEY = "_environment_volatile"


def insert_run(conn: Any, run: RunResult, bakeoff_version: str, statement: Any) -> bool:
    """Insert ``run`` with ``statement`` (a plain insert, or one that skips a run already there)."""
    env_id = environment_id(conn, run.environment)
    inserted = conn.execute(
        statement.values(
            id=run.run_id,
            created_at=run.created_at,
            workload_spec=run.workload["spec"],
            workload_fingerprint=run.fingerprint,
            workload=run.workload,
            environment_id=env_id,
            baseline_id=run.baseline_id,
            # the environment row is shared; what varies from run to run stays with the run
            settings={
                **run.settings,
                _VOLATILE_KEY: {k: run.environment.data[k] for k in VOLATILE if k in run.environment.data},
            },
            bakeoff_version=bakeoff_version,
        )
    ).rowcount
    if not inserted:
        return False
    sample_rows: list[dict[str, Any]] = []
    for position, result in enumerate(run.results):
        data = result.to_dict()
        if data.get("latency"):
            data["latency"] = {k: v for k, v in data["latency"].items() if k != "samples_ms"}
        row = conn.execute(
            insert(schema.target_results).values(
                run_id=run.run_id,
                position=position,
                target_spec=result.target.spec,
                status=result.status,
                verdict=result.verdict,
                p50_ms=result.latency.p50_ms if result.latency and result.latency.count else None,
                speedup=result.speedup,
                error_type=result.error.type if result.error else None,
                error_category=result.error.category if result.error else None,
                data=data,
            )
        )
        if result.latency and result.latency.count:
            result_id = row.inserted_primary_key[0]
            sample_rows.extend(
                {"result_id": result_id, "seq": i, "ms": ms} for i, ms in enumerate(result.latency.samples_ms)
            )
    if sample_rows:  # one batch for the whole run
        conn.execute(insert(schema.timing_samples), sample_rows)
    return True


def select_run(conn: Any, run_id: str) -> RunResult:
    """The run stored under ``run_id`` (an exact id), with its results and every timing sample.

    Raises:
        StoreError: a result was written in a format this bakeoff cannot read.
    """
    runs, results, samples = schema.runs, schema.target_results, schema.timing_samples
    run = conn.execute(select(runs).where(runs.c.id == run_id)).mappings().one()
    env = select_environment(conn, run["environment_id"])
    rows = conn.execute(select(results).where(results.c.run_id == run_id).order_by(results.c.position)).mappings().all()
    # every sample of the run in one query (one round trip to a server, not one per target)
    by_result: dict[int, list[float]] = {row["id"]: [] for row in rows}
    if rows:
        query = (
            select(samples.c.result_id, samples.c.ms)
            .where(samples.c.result_id.in_(list(by_result)))
            .order_by(samples.c.result_id, samples.c.seq)
        )
        for result_id, ms in conn.execute(query):
            by_result[result_id].append(ms)
    items = []
    for row in rows:
        data = dict(row["data"])
        if data.get("latency") is not None:
            data["latency"] = {**data["latency"], "samples_ms": by_result[row["id"]]}
        try:
            items.append(TargetResult.from_dict(data))
        except (TypeError, KeyError, ValueError, AttributeError) as exc:
            raise StoreError(
                f"run {run_id} was written by bakeoff {run['bakeoff_version']} in a result format "
                f"this bakeoff ({__version__}) cannot read ({type(exc).__name__}: {exc})",
                hint=f"read it with bakeoff {run['bakeoff_version']} or newer",
            ) from exc
    settings = dict(run["settings"])
    volatile = settings.pop(_VOLATILE_KEY, None)
    if volatile:
        env = Environment({**env.data, **volatile})
    return RunResult(
        run_id=run["id"],
        created_at=run["created_at"],
        workload=run["workload"],
        environment=env,
        results=tuple(items),
        baseline_id=run["baseline_id"],
        settings=settings,
    )


def select_run_index(conn: Any, workload_spec: str | None, tag: str | None) -> list[dict[str, str]]:
    """``{id, created_at, workload_spec, bakeoff_version}`` of every run selected, oldest first."""
    runs = schema.runs
    query = select(runs.c.id, runs.c.created_at, runs.c.workload_spec, runs.c.bakeoff_version).order_by(
        runs.c.created_at, runs.c.id
    )
    if workload_spec is not None:
        query = query.where(runs.c.workload_spec == workload_spec)
    if tag is not None:
        query = query.where(runs.c.id.in_(select(schema.run_tags.c.run_id).where(schema.run_tags.c.tag == tag)))
    return [dict(row) for row in conn.execute(query).mappings()]


def select_run_summaries(conn: Any, limit: int, workload_spec: str | None, tag: str | None) -> list[RunSummary]:
    """The newest ``limit`` runs selected, newest first, each with its results counted by outcome."""
    runs, results, envs = schema.runs, schema.target_results, schema.environments
    query = (
        select(
            runs.c.id,
            runs.c.created_at,
            runs.c.workload_spec,
            runs.c.workload_fingerprint,
            envs.c.fingerprint.label("env_fp"),
        )
        .join(envs, envs.c.id == runs.c.environment_id)
        .order_by(runs.c.created_at.desc(), runs.c.id.desc())
        .limit(limit)
    )
    if workload_spec is not None:
        query = query.where(runs.c.workload_spec == workload_spec)
    if tag is not None:
        query = query.where(runs.c.id.in_(select(schema.run_tags.c.run_id).where(schema.run_tags.c.tag == tag)))
    heads = conn.execute(query).mappings().all()
    ids = [h["id"] for h in heads]
    counts: dict[str, dict[str, int]] = {i: {} for i in ids}
    if ids:
        stat = (
            select(results.c.run_id, results.c.status, results.c.verdict, func.count())
            .where(results.c.run_id.in_(ids))
            .group_by(results.c.run_id, results.c.status, results.c.verdict)
        )
        for run_id, status, verdict, n in conn.execute(stat):
            bucket = counts[run_id]
            bucket[status] = bucket.get(status, 0) + n
            if verdict:
                bucket[f"v:{verdict}"] = bucket.get(f"v:{verdict}", 0) + n
    return [
        RunSummary(
            run_id=h["id"],
            created_at=h["created_at"],
            workload_spec=h["workload_spec"],
            fingerprint=h["workload_fingerprint"],
            environment_fingerprint=h["env_fp"],
            targets=sum(v for k, v in counts[h["id"]].items() if not k.startswith("v:")),
            ok=counts[h["id"]].get("ok", 0),
            passed=counts[h["id"]].get("v:pass", 0),
            failed=counts[h["id"]].get("v:fail", 0),
            errors=counts[h["id"]].get("error", 0),
            skipped=counts[h["id"]].get("skipped", 0),
        )
        for h in heads
    ]
