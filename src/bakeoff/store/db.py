"""The Store: a knowledge base's reads and writes of runs, baselines, requirements, notes and tags.

Nothing is overwritten: runs, baselines and environments are only ever inserted. The same code
serves a SQLite file on a laptop and a PostgreSQL database shared by a team: several processes
on several machines may write at once, so every insert that could meet a twin from another
writer (an environment with the same fingerprint, a tag, an imported run) is written as
"insert unless it exists", never as "look, then insert".

Beside it: reaching the database (URL, engine, error guard) in :mod:`bakeoff.store.connection`,
checking and migrating its schema when it is opened in :mod:`bakeoff.store.versioning`, the rows
of a run in :mod:`bakeoff.store.runs`, of environments in :mod:`bakeoff.store.environments`, of
notes and tags in :mod:`bakeoff.store.annotations`, and baseline tensor files in
:mod:`bakeoff.store.artifacts`. Export and import (:mod:`bakeoff.store.transfer`) use only the
Store's public methods.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, insert, select, update

from bakeoff.env import Environment
from bakeoff.errors import StoreError
from bakeoff.results.summary import RunSummary
from bakeoff.results.values import BaselineInfo, RunResult
from bakeoff.store import connection, schema, versioning
from bakeoff.store.annotations import (
    Note,
    delete_tag,
    insert_missing_notes,
    insert_missing_tags,
    insert_note,
    insert_tag,
    select_notes,
    select_runs_with_tag,
    select_tags,
)
from bakeoff.store.artifacts import baseline_name, baseline_problem
from bakeoff.store.connection import (
    DEFAULT_DB,
    db_flag,
    dialect_insert,
    display_db_url,
    guarded,
    insert_unless_exists,
    lock_writers,
    make_engine,
    resolve_db_url,
    resolve_prefix,
    set_sqlite_pragmas,
    sqlite_file,
)
from bakeoff.store.environments import environment_id
from bakeoff.store.runs import insert_run, select_run, select_run_index, select_run_summaries
from bakeoff.store.sweeps import SweepTables
from bakeoff.version import __version__

__all__ = ["DEFAULT_DB", "RunSummary", "Store"]


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


class Store(SweepTables):
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
        path = sqlite_file(url)
        is_sqlite = path is not None
        if path is not None:
            _check_sqlite_path(path, create)
            default_artifacts = path.with_name(path.name + ".artifacts")
        else:
            default_artifacts = Path("bakeoff-artifacts").resolve()
        artifacts = Path(artifacts_dir or os.environ.get("BAKEOFF_ARTIFACTS") or default_artifacts)
        engine = make_engine(url)
        if is_sqlite:
            set_sqlite_pragmas(engine)
        store = cls(engine, url, artifacts)
        try:
            versioning.ensure_schema(engine, store.display_url, upgrade)
        except BaseException:
            engine.dispose()
            raise
        return store

    @staticmethod
    def check_writable(db: str | os.PathLike[str] | None = None) -> None:
        """Refuse, before any work, a SQLite database that a run could not be written to: the
        path is a directory or a link to nothing, its directory is missing or cannot be written,
        or the file cannot be written. A server database is judged when it is opened.

        Raises:
            StoreError: what is wrong with the path.
        """
        path = sqlite_file(resolve_db_url(db))
        if path is not None:
            _check_sqlite_path(path, create=True, write=True)

    @property
    def is_sqlite(self) -> bool:
        return self.engine.dialect.name == "sqlite"

    @guarded
    def schema_status(self) -> dict[str, Any]:
        """Where this database stands: its schema version, this release's, and what is pending."""
        return versioning.schema_status(self.engine, self.display_url)

    def upgrade(self) -> list[str]:
        """Apply pending migrations (under the migration lock); the names of those applied."""
        return versioning.upgrade(self.engine, self.display_url)

    @property
    def display_url(self) -> str:
        return display_db_url(self.url)

    # -- environments (their rows: bakeoff.store.environments) ---------------------------
    def _environment_id(self, conn: Any, env: Environment) -> int:
        """The id of ``env``'s row in the caller's transaction ``conn`` (the sweep methods use it too)."""
        return environment_id(conn, env)

    # -- baselines ----------------------------------------------------------------------
    def baseline_file(self, info: BaselineInfo) -> Path:
        """The tensor file of ``info`` in this store's artifacts, whatever path the record names."""
        return self.artifacts_dir / baseline_name(info)

    def baseline_problem(self, info: BaselineInfo) -> str | None:
        """Why ``info``'s tensors cannot be used as a reference here, or None when they can:
        the file must be in this store's artifacts and match the content hash recorded with it."""
        return baseline_problem(self.artifacts_dir, info)

    @guarded
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

    @guarded
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

    @guarded
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
    @guarded
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

    @guarded
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

    @guarded
    def requirements(self, workload_spec: str) -> list[str]:
        """The requirements kept for a workload spec (empty if none were ever declared)."""
        table = schema.requirements
        with self.engine.connect() as conn:
            items = conn.execute(select(table.c.texts).where(table.c.workload_spec == workload_spec)).scalar()
        return list(items or [])

    # -- runs ---------------------------------------------------------------------------
    @guarded
    def save_run(self, run: RunResult) -> None:
        """Insert a run with its results and every raw timing sample, in one transaction.

        Raises:
            StoreError: the database stayed locked by another process beyond SQLite's wait
                (``BUSY_TIMEOUT_S``): the run is then kept in an export file beside the database
                (or in the temporary directory), named in the error, for ``bakeoff import``.
        """
        from sqlalchemy.exc import OperationalError

        try:
            with self.engine.begin() as conn:
                self._insert_run(conn, run, __version__, insert(schema.runs))
        except OperationalError as exc:
            if "locked" not in str(exc.orig or exc).lower():
                raise
            raise self._kept_for_later(run) from exc

    def _kept_for_later(self, run: RunResult) -> StoreError:
        """Write ``run`` to an export file where it can be, and say where (or that it could not)."""
        import tempfile

        from bakeoff.store.transfer.exporting import keep_unsaved

        name = f"bakeoff-unsaved-{run.run_id}.jsonl"
        file = sqlite_file(self.url)
        flag = db_flag(file or self.url)
        for folder in [*([file.parent] if file is not None else []), Path(tempfile.gettempdir())]:
            try:
                keep_unsaved(run, folder / name)
            except OSError:
                continue
            kept = folder / name
            return StoreError(
                f"database {self.display_url} stayed locked by another process for {connection.BUSY_TIMEOUT_S:g} s: "
                f"run {run.run_id} is kept in {kept}",
                hint=f"bakeoff import {kept}{flag} stores it once the other process lets go",
            )
        return StoreError(
            f"database {self.display_url} stayed locked by another process for {connection.BUSY_TIMEOUT_S:g} s, "
            f"and run {run.run_id} could not be written anywhere else",
            hint="find the process holding the database (a sqlite3 shell, a long import) and run again",
        )

    @guarded
    def change_check_value(
        self, run_id: str, target_spec: str, name: str, change: Callable[[dict[str, Any] | None], dict[str, Any]]
    ) -> dict[str, Any]:
        """Store ``change(stored value)`` as a check's value under a stored run's target (its as-is
        result), reading and writing in one transaction, and return it: evidence gathered after
        the run that keeps what was there (``bakeoff localize`` keeps every earlier localisation)."""
        results = schema.target_results
        with self.engine.begin() as conn:
            rows = conn.execute(
                select(results.c.id, results.c.data)
                .where(results.c.run_id == run_id, results.c.target_spec == target_spec)
                .with_for_update()
            ).all()
            for row_id, data in rows:
                if (data or {}).get("variant", "as-is") == "as-is":
                    value = change((data or {}).get(name))
                    data = {**(data or {}), name: value}
                    conn.execute(update(results).where(results.c.id == row_id).values(data=data))
                    return value
        raise StoreError(f"run {run_id} has no result for target {target_spec}", hint="see `bakeoff show RUN`")

    def insert_run_unless_exists(self, conn: Any, run: RunResult, bakeoff_version: str) -> bool:
        """Insert a run in the caller's transaction ``conn`` unless its id is there; True if it went in."""
        return self._insert_run(conn, run, bakeoff_version, insert_unless_exists(conn, schema.runs, ["id"]))

    def _insert_run(self, conn: Any, run: RunResult, bakeoff_version: str, statement: Any) -> bool:
        """Insert ``run`` with ``statement`` (a plain insert, or one that skips a run already there)."""
        return insert_run(conn, run, bakeoff_version, statement)

    @guarded
    def resolve_run_id(self, prefix: str) -> str:
        """The full id of the one run whose id starts with ``prefix`` (a sweep's id is pointed
        to the command that reads a sweep)."""
        hint = "run `bakeoff history` to list run ids"
        try:
            return resolve_prefix(self.engine, self.display_url, schema.runs.c.id, prefix, "run", hint)
        except StoreError as exc:
            if not exc.message.startswith("no run "):
                raise
            try:
                sweep = resolve_prefix(self.engine, self.display_url, schema.sweeps.c.id, prefix, "sweep", hint)
            except StoreError:
                raise exc from None
            raise StoreError(exc.message, hint=f"{sweep} is a sweep: read it with `bakeoff coverage {sweep}`") from None

    @guarded
    def get_run(self, run_id: str) -> RunResult:
        run_id = self.resolve_run_id(run_id)
        with self.engine.connect() as conn:
            return select_run(conn, run_id)

    @guarded
    def run_index(self, workload_spec: str | None = None, tag: str | None = None) -> list[dict[str, str]]:
        """``{id, created_at, workload_spec, bakeoff_version}`` of every run selected, oldest first."""
        with self.engine.connect() as conn:
            return select_run_index(conn, workload_spec, tag)

    @guarded
    def list_runs(self, limit: int = 20, workload_spec: str | None = None, tag: str | None = None) -> list[RunSummary]:
        with self.engine.connect() as conn:
            return select_run_summaries(conn, limit, workload_spec, tag)

    # -- notes and tags (their rows: bakeoff.store.annotations) ---------------------------
    @guarded
    def add_note(self, run_id: str, text: str, author: str | None = None, created_at: str | None = None) -> Note:
        """Keep a free-form note on a run (``run_id`` may be a unique prefix).

        ``author`` defaults to ``$USER`` (``None`` when unset); ``created_at`` to now, in UTC.
        """
        run_id = self.resolve_run_id(run_id)
        with self.engine.begin() as conn:
            return insert_note(conn, run_id, text, author, created_at)

    @guarded
    def notes(self, run_id: str) -> list[Note]:
        """The notes on a run (exact id), oldest first."""
        with self.engine.connect() as conn:
            return select_notes(conn, run_id)

    @guarded
    def add_tag(self, run_id: str, tag: str) -> list[str]:
        """Tag a run (``run_id`` may be a unique prefix); tagging twice is harmless. Returns its tags."""
        run_id = self.resolve_run_id(run_id)
        with self.engine.begin() as conn:
            insert_tag(conn, run_id, tag)
        return self.tags(run_id)

    @guarded
    def remove_tag(self, run_id: str, tag: str) -> bool:
        """Take a tag off a run (``run_id`` may be a unique prefix); whether it had the tag."""
        run_id = self.resolve_run_id(run_id)
        with self.engine.begin() as conn:
            return delete_tag(conn, run_id, tag)

    @guarded
    def tags(self, run_id: str) -> list[str]:
        """A run's tags (exact id), sorted."""
        with self.engine.connect() as conn:
            return select_tags(conn, run_id)

    @guarded
    def run_ids_with_tag(self, tag: str) -> list[str]:
        """Ids of the runs carrying ``tag``, oldest run first."""
        with self.engine.connect() as conn:
            return select_runs_with_tag(conn, tag)

    # -- merging another knowledge base's records (bakeoff.store.transfer) ----------------
    # Each takes the connection of one transaction from :meth:`exclusive_transaction`, so a
    # whole import file goes in or nothing does; database errors are the caller's to report.
    @contextmanager
    def exclusive_transaction(self, lock_key: int) -> Iterator[Any]:
        """One transaction, written by one holder of ``lock_key`` at a time: commits if the block ends
        normally, rolls back if it raises. A SQLite file is locked whole, whatever the key."""
        with self.engine.begin() as conn:
            lock_writers(conn, lock_key)
            yield conn

    def merge_requirements(self, conn: Any, workload_spec: str, updated_at: str, texts: list[str]) -> bool:
        """Keep the newer of the stored and these requirements (an upsert: trials may write them
        now); True if these went in."""
        table = schema.requirements
        statement = dialect_insert(conn, table)
        statement = statement.on_conflict_do_update(
            index_elements=["workload_spec"],
            set_={"updated_at": statement.excluded.updated_at, "texts": statement.excluded.texts},
            where=table.c.updated_at < statement.excluded.updated_at,
        ).execution_options(preserve_rowcount=True)
        values = {"workload_spec": workload_spec, "updated_at": updated_at, "texts": texts}
        return bool(conn.execute(statement.values(**values)).rowcount)

    def merge_notes(self, conn: Any, run_id: str, notes: list[dict[str, Any]]) -> int:
        """Add the notes (``{created_at, text, author}``) run ``run_id`` lacks; how many went in."""
        return insert_missing_notes(conn, run_id, notes)

    def merge_tags(self, conn: Any, run_id: str, tags: list[str]) -> int:
        """Add the tags run ``run_id`` lacks; how many went in."""
        return insert_missing_tags(conn, run_id, tags)


def _check_sqlite_path(path: Path, create: bool, write: bool = False) -> None:
    """What :meth:`Store.open` (and, with ``write``, :meth:`Store.check_writable`) refuses of a
    SQLite path, each in one line.

    Raises:
        StoreError: what is wrong with the path.
    """
    if path.is_dir():
        raise StoreError(f"database path {path} is a directory", hint="pass a file path, e.g. --db results.db")
    if not create and not path.exists():
        raise StoreError(f"no database at {path}", hint="check --db / BAKEOFF_DB, or run a trial first")
    if not create and path.is_file() and path.stat().st_size == 0:  # a reader must not make it one
        raise StoreError(f"no database at {path} (an empty file)", hint="check --db / BAKEOFF_DB, or run a trial first")
    if not path.parent.exists():
        raise StoreError(f"directory {path.parent} does not exist", hint="create it or choose another --db path")
    if not write:
        return
    if path.is_symlink() and not path.exists():
        raise StoreError(f"database path {path} is a link to nothing", hint="choose another --db path")
    if not os.access(path.parent, os.W_OK):
        raise StoreError(f"directory {path.parent} cannot be written", hint="choose another --db path")
    if path.is_file() and not os.access(path, os.W_OK):
        raise StoreError(f"database {path} cannot be written", hint="make it writable or choose another --db path")
