"""The Store: open a database by URL or path, migrate it, and read and write runs.

Nothing is overwritten: runs, baselines and environments are only ever inserted.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, create_engine, event, func, insert, inspect, select
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from bakeoff.env import VOLATILE, Environment
from bakeoff.errors import StoreError
from bakeoff.results.values import BaselineInfo, RunResult, TargetResult
from bakeoff.store import schema
from bakeoff.store.migrations import SCHEMA_VERSION, current_version, migrate

__all__ = ["DEFAULT_DB", "RunSummary", "Store", "resolve_db_url"]

DEFAULT_DB = "bakeoff.db"
T = TypeVar("T")
_VOLATILE_KEY = "_environment_volatile"


def resolve_db_url(db: str | os.PathLike[str] | None) -> str:
    """``--db`` value, else ``BAKEOFF_DB``, else ``bakeoff.db`` here; plain paths become SQLite URLs."""
    value = str(db) if db is not None else os.environ.get("BAKEOFF_DB") or DEFAULT_DB
    if "://" in value:
        return value
    return f"sqlite:///{Path(value).expanduser().resolve()}"


@dataclass(frozen=True)
class RunSummary:
    """One line of history."""

    run_id: str
    created_at: str
    workload_spec: str
    fingerprint: str
    environment_fingerprint: str
    targets: int
    ok: int
    passed: int
    failed: int
    errors: int
    skipped: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _sqlite_pragmas(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()


def _guarded(method: Callable[..., T]) -> Callable[..., T]:
    """Turn database errors in a Store method into one StoreError line."""

    @functools.wraps(method)
    def wrapper(self: Store, *args: Any, **kwargs: Any) -> T:
        try:
            return method(self, *args, **kwargs)
        except SQLAlchemyError as exc:
            detail = str(getattr(exc, "orig", None) or exc).splitlines()[0]
            raise StoreError(
                f"database {self.display_url} could not be read or written: {detail}",
                hint="check the file or server; restore a damaged database from a backup",
            ) from exc

    return wrapper


class Store:
    """A bakeoff knowledge base. Use :meth:`open`."""

    def __init__(self, engine: Engine, url: str, artifacts_dir: Path) -> None:
        self.engine = engine
        self.url = url
        self.artifacts_dir = artifacts_dir

    @classmethod
    def open(
        cls,
        db: str | os.PathLike[str] | None = None,
        artifacts_dir: str | os.PathLike[str] | None = None,
        create: bool = True,
    ) -> Store:
        """Open (creating and migrating if needed) the database at ``db``.

        With ``create=False`` (commands that only read) a SQLite file that does not exist is an
        error rather than a new empty database: a mistyped path must not look like "no runs".

        Artifacts (baseline tensors) live next to a SQLite file in ``<name>.artifacts/``, or in
        ``artifacts_dir`` / ``BAKEOFF_ARTIFACTS`` / ``./bakeoff-artifacts`` for server databases.

        Raises:
            StoreError: the file is not a database, the server cannot be reached, or the
                database was written by a newer bakeoff.
        """
        url = resolve_db_url(db)
        if url in ("sqlite://", "sqlite:///", "sqlite:///:memory:"):  # SQLAlchemy's in-memory forms
            raise StoreError("an in-memory database keeps nothing", hint="pass a file path, e.g. --db results.db")
        is_sqlite = url.startswith("sqlite:///")
        if is_sqlite:
            path = Path(url.removeprefix("sqlite:///"))
            if path.exists() and path.is_dir():
                raise StoreError(f"database path {path} is a directory", hint="pass a file path, e.g. --db results.db")
            if not create and not path.exists():
                raise StoreError(f"no database at {path}", hint="check --db / BAKEOFF_DB, or run a trial first")
            if not path.parent.exists():
                raise StoreError(
                    f"directory {path.parent} does not exist", hint="create it or choose another --db path"
                )
            default_artifacts = path.with_name(path.name + ".artifacts")
        else:
            default_artifacts = Path("bakeoff-artifacts").resolve()
        artifacts = Path(artifacts_dir or os.environ.get("BAKEOFF_ARTIFACTS") or default_artifacts)
        try:
            engine = create_engine(url)
        except (SQLAlchemyError, ImportError, ValueError) as exc:
            raise StoreError(
                f"cannot use database URL {url!r}: {exc}", hint="use a file path or a sqlite:/// or postgresql:// URL"
            ) from exc
        if is_sqlite:
            _sqlite_pragmas(engine)
        store = cls(engine, url, artifacts)
        store._migrate()
        return store

    def _migrate(self) -> None:
        try:
            with self.engine.begin() as conn:
                foreign = [t for t in inspect(conn).get_table_names() if t not in schema.metadata.tables]
                if foreign and not conn.dialect.has_table(conn, "meta"):
                    raise StoreError(
                        f"{self.display_url} is a database but not a bakeoff one "
                        f"(it has tables such as {foreign[0]!r})",
                        hint="pass a bakeoff database or a new path with --db",
                    )
                version = current_version(conn)
                if version > SCHEMA_VERSION:
                    raise StoreError(
                        f"database {self.display_url} has schema version {version}, newer than this "
                        f"bakeoff understands ({SCHEMA_VERSION})",
                        hint="upgrade bakeoff to use it",
                    )
                migrate(conn, version)
                missing = sorted(set(schema.metadata.tables) - set(inspect(conn).get_table_names()))
                if missing:
                    raise StoreError(
                        f"database {self.display_url} is damaged: table {missing[0]!r} is missing",
                        hint="restore it from a backup or use a new --db",
                    )
        except DBAPIError as exc:
            raise StoreError(
                f"cannot open database {self.display_url}: {str(exc.orig).splitlines()[0]}",
                hint="pass a bakeoff database file or a new path with --db",
            ) from exc
        except ValueError as exc:  # a schema_version that is not a number
            raise StoreError(
                f"database {self.display_url} is damaged: {exc}", hint="restore it from a backup or use a new --db"
            ) from exc

    @property
    def display_url(self) -> str:
        return self.url.removeprefix("sqlite:///")

    # -- environments -------------------------------------------------------------------
    def _environment_id(self, conn: Any, env: Environment) -> int:
        table = schema.environments
        found = conn.execute(select(table.c.id).where(table.c.fingerprint == env.fingerprint)).scalar()
        if found is not None:
            return int(found)
        result = conn.execute(
            insert(table).values(
                fingerprint=env.fingerprint, captured_at=env.data.get("captured_at", ""), data=env.to_dict()
            )
        )
        return int(result.inserted_primary_key[0])

    def _environment(self, conn: Any, env_id: int) -> Environment:
        data = conn.execute(select(schema.environments.c.data).where(schema.environments.c.id == env_id)).scalar_one()
        return Environment.from_dict(data)

    # -- baselines ----------------------------------------------------------------------
    @_guarded
    def save_baseline(self, info: BaselineInfo, env: Environment) -> None:
        with self.engine.begin() as conn:
            env_id = self._environment_id(conn, env)
            conn.execute(
                insert(schema.baselines).values(
                    id=info.id,
                    workload_spec=info.workload_spec,
                    fingerprint=info.fingerprint,
                    seed=info.seed,
                    created_at=info.created_at,
                    environment_id=env_id,
                    refs=list(info.references),
                    deterministic=info.deterministic,
                    repeat_max_abs_err=info.repeat_max_abs_err,
                    path=info.path,
                )
            )

    @_guarded
    def latest_baseline(self, workload_spec: str) -> BaselineInfo | None:
        """The newest baseline recorded for a workload spec (whatever its fingerprint)."""
        table, envs = schema.baselines, schema.environments
        query = (
            select(table, envs.c.fingerprint.label("env_fp"))
            .join(envs, envs.c.id == table.c.environment_id)
            .where(table.c.workload_spec == workload_spec)
            .order_by(table.c.created_at.desc(), table.c.id.desc())
            .limit(1)
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        if row is None:
            return None
        return BaselineInfo(
            id=row["id"],
            workload_spec=row["workload_spec"],
            fingerprint=row["fingerprint"],
            seed=row["seed"],
            created_at=row["created_at"],
            environment_fingerprint=row["env_fp"],
            references=tuple(row["refs"]),
            deterministic=bool(row["deterministic"]),
            repeat_max_abs_err=float(row["repeat_max_abs_err"]),
            path=row["path"],
        )

    # -- requirements -------------------------------------------------------------------
    @_guarded
    def save_requirements(self, workload_spec: str, items: list[str], updated_at: str) -> None:
        """Replace the requirements kept for a workload spec (their canonical texts, in order)."""
        table = schema.requirements
        with self.engine.begin() as conn:
            conn.execute(table.delete().where(table.c.workload_spec == workload_spec))
            conn.execute(insert(table).values(workload_spec=workload_spec, updated_at=updated_at, texts=list(items)))

    @_guarded
    def requirements(self, workload_spec: str) -> list[str]:
        """The requirements kept for a workload spec (empty if none were ever declared)."""
        table = schema.requirements
        with self.engine.connect() as conn:
            items = conn.execute(select(table.c.texts).where(table.c.workload_spec == workload_spec)).scalar()
        return list(items or [])

    # -- runs ---------------------------------------------------------------------------
    @_guarded
    def save_run(self, run: RunResult) -> None:
        """Insert a run with its results and every raw timing sample, in one transaction."""
        from bakeoff import __version__

        with self.engine.begin() as conn:
            env_id = self._environment_id(conn, run.environment)
            conn.execute(
                insert(schema.runs).values(
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
                    bakeoff_version=__version__,
                )
            )
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
                    conn.execute(
                        insert(schema.timing_samples),
                        [
                            {"result_id": result_id, "seq": i, "ms": ms}
                            for i, ms in enumerate(result.latency.samples_ms)
                        ],
                    )

    @_guarded
    def resolve_run_id(self, prefix: str) -> str:
        """The full id of the one run whose id starts with ``prefix``."""
        table = schema.runs
        with self.engine.connect() as conn:
            ids = (
                conn.execute(select(table.c.id).where(table.c.id.startswith(prefix, autoescape=True)).limit(2))
                .scalars()
                .all()
            )
        if not ids:
            raise StoreError(f"no run {prefix!r} in {self.display_url}", hint="run `bakeoff history` to list run ids")
        if len(ids) > 1:
            raise StoreError(f"run id prefix {prefix!r} is ambiguous", hint="give more characters of the id")
        return ids[0]

    @_guarded
    def get_run(self, run_id: str) -> RunResult:
        run_id = self.resolve_run_id(run_id)
        runs, results, samples = schema.runs, schema.target_results, schema.timing_samples
        with self.engine.connect() as conn:
            run = conn.execute(select(runs).where(runs.c.id == run_id)).mappings().one()
            env = self._environment(conn, run["environment_id"])
            rows = (
                conn.execute(select(results).where(results.c.run_id == run_id).order_by(results.c.position))
                .mappings()
                .all()
            )
            items = []
            for row in rows:
                data = dict(row["data"])
                if data.get("latency") is not None:
                    ms = (
                        conn.execute(
                            select(samples.c.ms).where(samples.c.result_id == row["id"]).order_by(samples.c.seq)
                        )
                        .scalars()
                        .all()
                    )
                    data["latency"] = {**data["latency"], "samples_ms": ms}
                items.append(TargetResult.from_dict(data))
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

    @_guarded
    def list_runs(self, limit: int = 20, workload_spec: str | None = None) -> list[RunSummary]:
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
        with self.engine.connect() as conn:
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
