"""The Store: open a database by URL or path, migrate it, and read and write runs.

Nothing is overwritten: runs, baselines and environments are only ever inserted. The same code
serves a SQLite file on a laptop and a PostgreSQL database shared by a team: several processes
on several machines may write at once, so every insert that could meet a twin from another
writer (an environment with the same fingerprint, a tag, an imported run) is written as
"insert unless it exists", never as "look, then insert".

Migrations: a SQLite file is upgraded when it is opened (one user, one file). A server database
is shared by machines that may run different releases, so ordinary commands only create a new,
empty one; an older one is refused until someone runs ``bakeoff db upgrade`` deliberately.
Concurrent openers are serialised around a migration (an advisory lock on PostgreSQL, an
immediate write transaction on SQLite), so two clients starting at once migrate once.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, Table, create_engine, event, func, insert, inspect, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError

from bakeoff.env import VOLATILE, Environment
from bakeoff.errors import StoreError
from bakeoff.hashing import file_sha256
from bakeoff.results.summary import RunSummary
from bakeoff.results.values import BaselineInfo, RunResult, TargetResult
from bakeoff.store import schema
from bakeoff.store.annotations import Note, check_note_text, check_tag
from bakeoff.store.migrations import SCHEMA_VERSION, current_version, migrate, pending

__all__ = [
    "DEFAULT_DB",
    "RunSummary",
    "Store",
    "baseline_name",
    "dialect_insert",
    "display_db_url",
    "insert_unless_exists",
    "resolve_db_url",
    "utc_now",
]

DEFAULT_DB = "bakeoff.db"
T = TypeVar("T")
_VOLATILE_KEY = "_environment_volatile"
# pg_advisory_xact_lock key held while migrating a server database: "bakeoff" in ASCII
_MIGRATION_LOCK = int.from_bytes(b"bakeoff", "big")
_CONNECT_TIMEOUT_S = 10
_SERVER_HINT = "check that the server is running and the URL's host, port, user, password and database name"
_PRIVILEGE_HINT = (
    "bakeoff's role must be able to create tables there: make it the database's owner, "
    "e.g. createdb -O ROLE DBNAME, or ALTER DATABASE DBNAME OWNER TO ROLE"
)


def _server_hint(detail: str) -> str:
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


_ARTIFACT_KEY = re.compile(r"[0-9A-Za-z_-]{1,64}")


def baseline_name(info: BaselineInfo) -> str:
    """Where a baseline's tensors live *inside* an artifact store, derived from its id and
    fingerprint alone: what the database and exports keep instead of a machine's path.

    Raises:
        StoreError: an id or fingerprint that could name a path outside the store.
    """
    for what, value in (("id", info.id), ("fingerprint", info.fingerprint)):
        if not _ARTIFACT_KEY.fullmatch(str(value)):
            raise StoreError(
                f"baseline {what} {str(value)[:80]!r} is not a bakeoff {what}",
                hint="only letters, digits, '-' and '_' (a file written by bakeoff has nothing else)",
            )
    return f"baselines/{info.fingerprint}/{info.id}.safetensors"


def display_db_url(url: str) -> str:
    """A database URL as it may be printed: a SQLite file as its path, a server URL without its password."""
    if url.startswith("sqlite:///"):
        return url.removeprefix("sqlite:///")
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def utc_now() -> str:
    """The current time as the store keeps it: ISO-8601 in UTC, microseconds, ``+00:00``."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _create_engine(url: str) -> Engine:
    """An engine for a SQLite or PostgreSQL URL; ``postgresql://`` means the psycopg 3 driver."""
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


def _sqlite_pragmas(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()


def _baseline_info(row: Any) -> BaselineInfo:
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
        sha256=row.get("sha256") or "",
    )


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
        upgrade: bool | None = None,
    ) -> Store:
        """Open (creating and migrating if needed) the database at ``db``.

        With ``create=False`` (commands that only read) a SQLite file that does not exist is an
        error rather than a new empty database: a mistyped path must not look like "no runs".

        ``upgrade`` says what to do with an older schema: ``None`` (ordinary commands) upgrades a
        SQLite file and refuses an older server database; ``True`` (``bakeoff db upgrade``)
        applies pending migrations to either; ``False`` opens the database as it is, for
        :meth:`schema_status` only.

        Artifacts (baseline tensors) live next to a SQLite file in ``<name>.artifacts/``, or in
        ``artifacts_dir`` / ``BAKEOFF_ARTIFACTS`` / ``./bakeoff-artifacts`` for server databases.

        Raises:
            StoreError: the file is not a database, the server cannot be reached or its driver is
                missing, the database was written by a newer bakeoff, or a server database needs
                ``bakeoff db upgrade``.
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
        engine = _create_engine(url)
        if is_sqlite:
            _sqlite_pragmas(engine)
        store = cls(engine, url, artifacts)
        try:
            store._migrate(upgrade)
        except BaseException:
            engine.dispose()
            raise
        return store

    @property
    def is_sqlite(self) -> bool:
        return self.engine.dialect.name == "sqlite"

    def _check_version(self, conn: Any, refuse_newer: bool = True) -> int:
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
                f"{self.display_url} is a database but not a bakeoff one (it has tables such as {shown!r}"
                + (" and no bakeoff schema version)" if ours else ")"),
                hint="pass a bakeoff database or a new path with --db",
            )
        if refuse_newer and version > SCHEMA_VERSION:
            raise StoreError(
                f"database {self.display_url} has schema version {version}, newer than this "
                f"bakeoff understands ({SCHEMA_VERSION})",
                hint="upgrade bakeoff to use it",
            )
        return version

    def _migrate(self, upgrade: bool | None) -> None:
        try:
            with self.engine.connect() as conn:
                version = self._check_version(conn, refuse_newer=upgrade is not False)
            if upgrade is False:
                return
            if 0 < version < SCHEMA_VERSION and upgrade is None and not self.is_sqlite:
                raise StoreError(
                    f"database {self.display_url} has schema version {version}; this bakeoff needs "
                    f"version {SCHEMA_VERSION}",
                    hint="run `bakeoff db upgrade` once for everyone who shares it; "
                    "older bakeoff releases will then refuse it",
                )
            if version < SCHEMA_VERSION:
                with self.engine.begin() as conn:
                    self._lock_for_migration(conn)
                    migrate(conn, self._check_version(conn))  # again: another client may have done it
            with self.engine.connect() as conn:
                missing = sorted(set(schema.metadata.tables) - set(inspect(conn).get_table_names()))
            if missing:
                raise StoreError(
                    f"database {self.display_url} is damaged: table {missing[0]!r} is missing",
                    hint="restore it from a backup or use a new --db",
                )
        except DBAPIError as exc:
            detail = str(exc.orig).strip().splitlines()[0] if str(exc.orig).strip() else type(exc.orig).__name__
            if self.is_sqlite:
                raise StoreError(
                    f"cannot open database {self.display_url}: {detail}",
                    hint="pass a bakeoff database file or a new path with --db",
                ) from exc
            raise StoreError(f"cannot open database {self.display_url}: {detail}", hint=_server_hint(detail)) from exc
        except ValueError as exc:  # a schema_version that is not a number
            raise StoreError(
                f"database {self.display_url} is damaged: {exc}", hint="restore it from a backup or use a new --db"
            ) from exc

    def _lock_for_migration(self, conn: Any) -> None:
        """Hold, until this transaction ends, the right to migrate: one client at a time."""
        if self.is_sqlite:
            conn.exec_driver_sql("BEGIN IMMEDIATE")  # the write lock now, not at the first write
        else:
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK})

    @_guarded
    def schema_status(self) -> dict[str, Any]:
        """Where this database stands: its schema version, this release's, and what is pending."""
        with self.engine.connect() as conn:
            version = self._check_version(conn, refuse_newer=False)
            runs = 0
            if version >= 1:
                runs = int(conn.execute(select(func.count()).select_from(schema.runs)).scalar_one())
        return {
            "database": self.display_url,
            "dialect": self.engine.dialect.name,
            "schema_version": version,
            "supported_version": SCHEMA_VERSION,
            "pending": pending(version) if version <= SCHEMA_VERSION else [],
            "newer": version > SCHEMA_VERSION,
            "runs": runs,
        }

    def upgrade(self) -> list[str]:
        """Apply pending migrations (under the migration lock); the names of those applied."""
        try:
            with self.engine.begin() as conn:
                self._lock_for_migration(conn)
                return migrate(conn, self._check_version(conn))
        except DBAPIError as exc:
            detail = str(exc.orig).strip().splitlines()[0]
            raise StoreError(
                f"cannot upgrade database {self.display_url}: {detail}",
                hint=_server_hint(detail) if not self.is_sqlite else "check that the file is writable",
            ) from exc

    @property
    def display_url(self) -> str:
        return display_db_url(self.url)

    # -- environments -------------------------------------------------------------------
    def _environment_id(self, conn: Any, env: Environment) -> int:
        table = schema.environments
        query = select(table.c.id).where(table.c.fingerprint == env.fingerprint)
        found = conn.execute(query).scalar()
        if found is not None:
            return int(found)
        # another writer may be inserting the same environment right now: let its row win
        conn.execute(
            insert_unless_exists(conn, table, ["fingerprint"]).values(
                fingerprint=env.fingerprint, captured_at=env.data.get("captured_at", ""), data=env.to_dict()
            )
        )
        return int(conn.execute(query).scalar_one())

    def _environment(self, conn: Any, env_id: int) -> Environment:
        data = conn.execute(select(schema.environments.c.data).where(schema.environments.c.id == env_id)).scalar_one()
        return Environment.from_dict(data)

    # -- baselines ----------------------------------------------------------------------
    def baseline_file(self, info: BaselineInfo) -> Path:
        """The tensor file of ``info`` in this store's artifacts, whatever path the record names."""
        return self.artifacts_dir / baseline_name(info)

    def baseline_problem(self, info: BaselineInfo) -> str | None:
        """Why ``info``'s tensors cannot be used as a reference here, or None when they can:
        the file must be in this store's artifacts and match the content hash recorded with it."""
        try:
            path = self.baseline_file(info)
        except StoreError as exc:
            return str(exc)
        if not path.is_file():
            return "has no tensor file here"
        if not path.resolve().is_relative_to(self.artifacts_dir.resolve()):
            return "tensor file links outside the artifact store"
        if not info.sha256:
            return "has no content hash to verify its tensor file against"
        if file_sha256(path) != info.sha256:
            return "tensor file does not match its content hash"
        return None

    @_guarded
    def save_baseline(self, info: BaselineInfo, env: Environment) -> None:
        with self.engine.begin() as conn:
            self._insert_baseline(conn, info, env, insert(schema.baselines))

    def insert_baseline_unless_exists(self, conn: Any, info: BaselineInfo, env: Environment) -> bool:
        """Insert a baseline in the caller's transaction ``conn`` unless its id is there; True if it went in."""
        return self._insert_baseline(conn, info, env, insert_unless_exists(conn, schema.baselines, ["id"]))

    def _insert_baseline(self, conn: Any, info: BaselineInfo, env: Environment, statement: Any) -> bool:
        env_id = self._environment_id(conn, env)
        return bool(
            conn.execute(
                statement.values(
                    id=info.id,
                    workload_spec=info.workload_spec,
                    fingerprint=info.fingerprint,
                    seed=info.seed,
                    created_at=info.created_at,
                    environment_id=env_id,
                    refs=list(info.references),
                    deterministic=info.deterministic,
                    repeat_max_abs_err=info.repeat_max_abs_err,
                    path=baseline_name(info),  # never a path of the machine that wrote it
                    sha256=info.sha256 or None,
                )
            ).rowcount
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
        return None if row is None else _baseline_info(row)

    @_guarded
    def baselines(self, workload_specs: Iterable[str] | None = None) -> list[tuple[BaselineInfo, Environment]]:
        """Every baseline (of these workload specs), oldest first, with the environment it was made in."""
        table, envs = schema.baselines, schema.environments
        query = (
            select(table, envs.c.fingerprint.label("env_fp"), envs.c.data.label("env_data"))
            .join(envs, envs.c.id == table.c.environment_id)
            .order_by(table.c.created_at, table.c.id)
        )
        if workload_specs is not None:
            query = query.where(table.c.workload_spec.in_(list(workload_specs)))
        with self.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        return [(_baseline_info(row), Environment.from_dict(row["env_data"])) for row in rows]

    # -- requirements -------------------------------------------------------------------
    @_guarded
    def save_requirements(self, workload_spec: str, items: list[str], updated_at: str) -> None:
        """Replace the requirements kept for a workload spec (their canonical texts, in order)."""
        table = schema.requirements
        with self.engine.begin() as conn:
            # an upsert: two machines declaring requirements at once must not collide on the key
            statement = dialect_insert(conn, table)
            statement = statement.on_conflict_do_update(
                index_elements=["workload_spec"],
                set_={"updated_at": statement.excluded.updated_at, "texts": statement.excluded.texts},
            )
            conn.execute(statement.values(workload_spec=workload_spec, updated_at=updated_at, texts=list(items)))

    @_guarded
    def all_requirements(self, workload_specs: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Every workload's kept requirements as ``{workload_spec, updated_at, texts}``."""
        table = schema.requirements
        query = select(table).order_by(table.c.workload_spec)
        if workload_specs is not None:
            query = query.where(table.c.workload_spec.in_(list(workload_specs)))
        with self.engine.connect() as conn:
            return [
                {"workload_spec": r["workload_spec"], "updated_at": r["updated_at"], "texts": list(r["texts"])}
                for r in conn.execute(query).mappings()
            ]

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
        from bakeoff.version import __version__

        with self.engine.begin() as conn:
            self._insert_run(conn, run, __version__, insert(schema.runs))

    def insert_run_unless_exists(self, conn: Any, run: RunResult, bakeoff_version: str) -> bool:
        """Insert a run in the caller's transaction ``conn`` unless its id is there; True if it went in."""
        return self._insert_run(conn, run, bakeoff_version, insert_unless_exists(conn, schema.runs, ["id"]))

    def _insert_run(self, conn: Any, run: RunResult, bakeoff_version: str, statement: Any) -> bool:
        """Insert ``run`` with ``statement`` (a plain insert, or one that skips a run already there)."""
        env_id = self._environment_id(conn, run.environment)
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
                    from bakeoff.version import __version__

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

    @_guarded
    def run_index(self, workload_spec: str | None = None, tag: str | None = None) -> list[dict[str, str]]:
        """``{id, created_at, workload_spec, bakeoff_version}`` of every run selected, oldest first."""
        runs = schema.runs
        query = select(runs.c.id, runs.c.created_at, runs.c.workload_spec, runs.c.bakeoff_version).order_by(
            runs.c.created_at, runs.c.id
        )
        if workload_spec is not None:
            query = query.where(runs.c.workload_spec == workload_spec)
        if tag is not None:
            query = query.where(runs.c.id.in_(select(schema.run_tags.c.run_id).where(schema.run_tags.c.tag == tag)))
        with self.engine.connect() as conn:
            return [dict(row) for row in conn.execute(query).mappings()]

    @_guarded
    def list_runs(self, limit: int = 20, workload_spec: str | None = None, tag: str | None = None) -> list[RunSummary]:
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

    # -- notes and tags -----------------------------------------------------------------
    @_guarded
    def add_note(self, run_id: str, text: str, author: str | None = None, created_at: str | None = None) -> Note:
        """Keep a free-form note on a run (``run_id`` may be a unique prefix).

        ``author`` defaults to ``$USER`` (``None`` when unset); ``created_at`` to now, in UTC.
        """
        run_id = self.resolve_run_id(run_id)
        values = {
            "run_id": run_id,
            "created_at": created_at or utc_now(),
            "text": check_note_text(text),
            "author": author if author is not None else os.environ.get("USER") or None,
        }
        with self.engine.begin() as conn:
            note_id = conn.execute(insert(schema.run_notes).values(**values)).inserted_primary_key[0]
        return Note(id=int(note_id), **values)

    @_guarded
    def notes(self, run_id: str) -> list[Note]:
        """The notes on a run (exact id), oldest first."""
        table = schema.run_notes
        query = select(table).where(table.c.run_id == run_id).order_by(table.c.created_at, table.c.id)
        with self.engine.connect() as conn:
            return [Note(**row) for row in conn.execute(query).mappings()]

    @_guarded
    def add_tag(self, run_id: str, tag: str) -> list[str]:
        """Tag a run (``run_id`` may be a unique prefix); tagging twice is harmless. Returns its tags."""
        run_id = self.resolve_run_id(run_id)
        with self.engine.begin() as conn:
            conn.execute(
                insert_unless_exists(conn, schema.run_tags, ["run_id", "tag"]).values(
                    run_id=run_id, tag=check_tag(tag), created_at=utc_now()
                )
            )
        return self.tags(run_id)

    @_guarded
    def remove_tag(self, run_id: str, tag: str) -> bool:
        """Take a tag off a run (``run_id`` may be a unique prefix); whether it had the tag."""
        run_id = self.resolve_run_id(run_id)
        table = schema.run_tags
        with self.engine.begin() as conn:
            removed = conn.execute(table.delete().where(table.c.run_id == run_id, table.c.tag == tag)).rowcount
        return bool(removed)

    @_guarded
    def tags(self, run_id: str) -> list[str]:
        """A run's tags (exact id), sorted."""
        table = schema.run_tags
        query = select(table.c.tag).where(table.c.run_id == run_id).order_by(table.c.tag)
        with self.engine.connect() as conn:
            return list(conn.execute(query).scalars())

    @_guarded
    def run_ids_with_tag(self, tag: str) -> list[str]:
        """Ids of the runs carrying ``tag``, oldest run first."""
        runs, tags = schema.runs, schema.run_tags
        query = (
            select(runs.c.id)
            .join(tags, tags.c.run_id == runs.c.id)
            .where(tags.c.tag == tag)
            .order_by(runs.c.created_at, runs.c.id)
        )
        with self.engine.connect() as conn:
            return list(conn.execute(query).scalars())
