"""The knowledge base: schema migration, runs with raw samples, baselines, environments."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, func, inspect, select
from sqlalchemy.exc import IntegrityError

from bakeoff.env import Environment
from bakeoff.errors import StoreError
from bakeoff.results.values import BaselineInfo, Correctness, ErrorInfo, Latency, RunResult, TargetResult
from bakeoff.store import Store, resolve_db_url
from bakeoff.store import schema as tables
from bakeoff.store.migrations import MIGRATIONS, SCHEMA_VERSION, current_version, migrate
from bakeoff.target.spec import parse_target

ENV_A = Environment(
    {"python": "3.11.7", "torch": "2.13.0", "captured_at": "2025-01-01T00:00:00+00:00", "load_average": [1.0, 1.0, 1.0]}
)
ENV_B = Environment({"python": "3.11.7", "torch": "2.14.0", "captured_at": "2025-01-01T00:00:00+00:00"})
TABLES = {"meta", "environments", "baselines", "runs", "target_results", "timing_samples", "requirements"}


def _result(
    spec: str, status: str = "ok", verdict: str | None = "pass", samples: tuple[float, ...] = (1.0,), **extra: Any
) -> TargetResult:
    correctness = Correctness(verdict, "", "eager:float32", 1e-4) if verdict else None
    latency = Latency(samples) if status == "ok" else None
    return TargetResult(
        target=parse_target(spec), status=status, latency=latency, **extra, checks={"correctness": correctness}
    )


def _run(
    run_id: str,
    created_at: str = "2025-01-01T00:00:00+00:00",
    spec: str = "arch:llama",
    env: Environment = ENV_A,
    results: tuple[TargetResult, ...] | None = None,
    **extra: Any,
) -> RunResult:
    if results is None:
        results = (_result("cpu"),)
    workload = {
        "spec": spec,
        "kind": spec.split(":")[0],
        "fingerprint": "f" * 16,
        "seed": 0,
        "dtype": "float32",
        "details": {},
        "notes": [],
    }
    return RunResult(
        run_id=run_id,
        created_at=created_at,
        workload=workload,
        environment=env,
        results=results,
        settings={"reference": "cpu"},
        **extra,
    )


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.open(tmp_path / "kb.db")


def _count(store: Store, table: Any) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


# -- opening and migrating --------------------------------------------------------------


def test_open_new_file_creates_schema(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    assert not path.exists()
    store = Store.open(path)
    assert path.is_file()
    assert store.url == f"sqlite:///{path.resolve()}"
    assert store.display_url == str(path.resolve())
    assert store.artifacts_dir == path.resolve().with_name("new.db.artifacts")
    assert TABLES <= set(inspect(store.engine).get_table_names())
    with store.engine.connect() as conn:
        assert current_version(conn) == SCHEMA_VERSION
        value = conn.execute(select(tables.meta.c.value).where(tables.meta.c.key == "schema_version")).scalar_one()
    assert value == str(SCHEMA_VERSION)
    # and plain sqlite agrees: it is a real database file
    with sqlite3.connect(path) as conn:
        assert conn.execute("select value from meta where key='schema_version'").fetchone() == (str(SCHEMA_VERSION),)


def test_open_twice_keeps_data(tmp_path: Path) -> None:
    path = tmp_path / "kb.db"
    Store.open(path).save_run(_run("run1"))
    again = Store.open(path)
    assert again.resolve_run_id("run1") == "run1"
    with again.engine.connect() as conn:
        rows = conn.execute(select(tables.meta).where(tables.meta.c.key == "schema_version")).all()
    assert len(rows) == 1


def test_migrate_from_empty_database() -> None:
    engine = create_engine("sqlite://")
    with engine.begin() as conn:
        assert current_version(conn) == 0
        applied = migrate(conn, 0)
        assert applied == [f"{i + 1}: {name}" for i, (name, _) in enumerate(MIGRATIONS)]
        assert len(applied) == SCHEMA_VERSION
        assert current_version(conn) == SCHEMA_VERSION
        assert migrate(conn, SCHEMA_VERSION) == []  # nothing left to do
    assert TABLES <= set(inspect(engine).get_table_names())


def test_open_empty_existing_file_migrates_it(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.write_bytes(b"")
    store = Store.open(path)
    with store.engine.connect() as conn:
        assert current_version(conn) == SCHEMA_VERSION


def test_newer_schema_version_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    Store.open(path).save_run(_run("keepme"))
    with sqlite3.connect(path) as conn:
        conn.execute("update meta set value=? where key='schema_version'", (str(SCHEMA_VERSION + 1),))
    with pytest.raises(StoreError, match="newer") as info:
        Store.open(path)
    assert str(SCHEMA_VERSION + 1) in str(info.value)
    assert "upgrade" in (info.value.hint or "")
    # the refusal left the database alone
    with sqlite3.connect(path) as conn:
        assert conn.execute("select value from meta where key='schema_version'").fetchone() == (
            str(SCHEMA_VERSION + 1),
        )
        assert conn.execute("select id from runs").fetchall() == [("keepme",)]


@pytest.mark.parametrize(
    "content",
    [
        b"this is a text file, not a database\n" * 50,
        b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8,
        b"SQLite format 2\x00" + b"\x00" * 200,
    ],
)
def test_non_database_file_refused_and_untouched(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(content)
    with pytest.raises(StoreError, match="cannot open database") as info:
        Store.open(path)
    assert info.value.hint
    assert path.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]  # no journal or artifacts left


def test_directory_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="directory"):
        Store.open(tmp_path)


def test_missing_parent_directory_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        Store.open(tmp_path / "no" / "such" / "kb.db")
    assert not (tmp_path / "no").exists()


def test_artifacts_dir_override(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "kb.db", artifacts_dir=tmp_path / "art")
    assert store.artifacts_dir == tmp_path / "art"


def test_resolve_db_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_db_url(tmp_path / "x.db") == f"sqlite:///{(tmp_path / 'x.db').resolve()}"
    assert resolve_db_url("postgresql://u@h/db") == "postgresql://u@h/db"
    assert resolve_db_url("sqlite:///rel.db") == "sqlite:///rel.db"
    monkeypatch.setenv("BAKEOFF_DB", str(tmp_path / "env.db"))
    assert resolve_db_url(None) == f"sqlite:///{(tmp_path / 'env.db').resolve()}"
    monkeypatch.delenv("BAKEOFF_DB")
    monkeypatch.chdir(tmp_path)
    assert resolve_db_url(None) == f"sqlite:///{(tmp_path / 'bakeoff.db').resolve()}"


# -- runs -------------------------------------------------------------------------------


def test_save_and_get_run_round_trip(store: Store) -> None:
    samples = (3.25, 1.0, 2.5, 1.0, 0.125, 7.75, 2.0)  # unsorted, with a repeat: order must survive
    results = (
        _result(
            "cpu",
            samples=samples,
            is_reference=True,
            first_call_ms=5.5,
            warmup_calls=2,
            settled=True,
            speedup=1.0,
            threads=1,
            notes=("a note",),
            load_average=(0.5, 0.25, 0.0),
        ),
        _result("cpu+inductor?dtype=bf16", verdict="fail", samples=(0.5, 0.25), speedup=4.0, settled=False),
        TargetResult(
            target=parse_target("cpu+aot_eager"),
            status="error",
            error=ErrorInfo("RuntimeError", "boom", phase="compile", traceback="tb"),
        ),
        TargetResult(target=parse_target("cuda"), status="skipped", reason="no CUDA here"),
    )
    run = _run("a1b2c3d4e5f6", results=results)
    store.save_run(run)
    loaded = store.get_run("a1b2c3d4e5f6")
    assert loaded == run
    assert loaded.results[0].latency is not None
    assert loaded.results[0].latency.samples_ms == samples
    assert [r.target.spec for r in loaded.results] == ["cpu", "cpu+inductor?dtype=bfloat16", "cpu+aot_eager", "cuda"]


def test_every_raw_sample_is_a_row(store: Store) -> None:
    samples = tuple(float(i % 7) + i / 1000 for i in range(500))
    store.save_run(_run("many", results=(_result("cpu", samples=samples), _result("cpu+inductor", samples=(9.0,)))))
    assert _count(store, tables.timing_samples) == 501
    assert store.get_run("many").results[0].latency.samples_ms == samples  # type: ignore[union-attr]
    with store.engine.connect() as conn:
        p50 = conn.execute(select(tables.target_results.c.p50_ms).order_by(tables.target_results.c.position)).scalars()
        assert list(p50) == [Latency(samples).p50_ms, 9.0]


def test_get_run_by_prefix(store: Store) -> None:
    run = _run("deadbeef0001")
    store.save_run(run)
    assert store.get_run("dead") == run


def test_get_run_unknown(store: Store) -> None:
    with pytest.raises(StoreError, match="no run 'nope'"):
        store.get_run("nope")


def test_resolve_run_id(store: Store) -> None:
    for run_id in ("abc123", "abd456", "xyz789"):
        store.save_run(_run(run_id))
    assert store.resolve_run_id("abc") == "abc123"
    assert store.resolve_run_id("abd456") == "abd456"
    assert store.resolve_run_id("x") == "xyz789"
    with pytest.raises(StoreError, match="ambiguous") as info:
        store.resolve_run_id("ab")
    assert "more characters" in (info.value.hint or "")
    with pytest.raises(StoreError, match="no run") as info:
        store.resolve_run_id("abz")
    assert "bakeoff history" in (info.value.hint or "")
    for empty in ("", "  "):  # every id starts with '': it is no prefix of one run, not an ambiguous one
        with pytest.raises(StoreError, match=r"^an empty run id$") as info:
            store.resolve_run_id(empty)
        assert "bakeoff history" in (info.value.hint or "")


@pytest.mark.parametrize("prefix", ["a%", "_bc", "%", "a_c"])
def test_resolve_run_id_treats_wildcards_literally(store: Store, prefix: str) -> None:
    store.save_run(_run("abc123"))
    with pytest.raises(StoreError, match="no run"):
        store.resolve_run_id(prefix)


def test_resolve_run_id_empty_store(store: Store) -> None:
    with pytest.raises(StoreError, match="no run"):
        store.resolve_run_id("a")


def test_list_runs_counts(store: Store) -> None:
    results = (
        _result("cpu", verdict="pass"),
        _result("cpu+inductor", verdict="pass"),
        _result("cpu+aot_eager", verdict="fail"),
        TargetResult(target=parse_target("cpu?dtype=bf16"), status="error", error=ErrorInfo("E", "m")),
        TargetResult(target=parse_target("cuda"), status="skipped", reason="none"),
        TargetResult(target=parse_target("mps"), status="skipped", reason="none"),
    )
    store.save_run(_run("r1", results=results))
    [summary] = store.list_runs()
    assert summary.run_id == "r1"
    assert summary.workload_spec == "arch:llama"
    assert summary.fingerprint == "f" * 16
    assert summary.environment_fingerprint == ENV_A.fingerprint
    assert (summary.targets, summary.ok, summary.passed, summary.failed, summary.errors, summary.skipped) == (
        6,
        3,
        2,
        1,
        1,
        2,
    )
    assert summary.to_dict()["targets"] == 6


def test_list_runs_order_limit_and_filter(store: Store) -> None:
    store.save_run(_run("old", created_at="2025-01-01T00:00:00+00:00"))
    store.save_run(_run("new", created_at="2025-03-01T00:00:00+00:00", spec="arch:gpt2"))
    store.save_run(_run("mid", created_at="2025-02-01T00:00:00+00:00"))
    assert [s.run_id for s in store.list_runs()] == ["new", "mid", "old"]
    assert [s.run_id for s in store.list_runs(limit=2)] == ["new", "mid"]
    assert [s.run_id for s in store.list_runs(workload_spec="arch:llama")] == ["mid", "old"]
    assert [s.run_id for s in store.list_runs(workload_spec="arch:llama", limit=1)] == ["mid"]
    assert store.list_runs(workload_spec="arch:bert") == []


def test_list_runs_empty_and_run_without_results(store: Store) -> None:
    assert store.list_runs() == []
    store.save_run(_run("bare", results=()))
    [summary] = store.list_runs()
    assert (summary.targets, summary.ok, summary.passed) == (0, 0, 0)


def test_environment_stored_once_per_fingerprint(store: Store) -> None:
    later_a = Environment({**ENV_A.data, "captured_at": "2025-06-01T00:00:00+00:00", "load_average": [3.0]})
    assert later_a.fingerprint == ENV_A.fingerprint
    store.save_run(_run("r1", env=ENV_A))
    store.save_run(_run("r2", env=later_a))
    store.save_run(_run("r3", env=ENV_B))
    assert _count(store, tables.environments) == 2
    with store.engine.connect() as conn:
        fps = set(conn.execute(select(tables.environments.c.fingerprint)).scalars())
    assert fps == {ENV_A.fingerprint, ENV_B.fingerprint}
    # the environment is read back, linked from each run, with that run's own time and load
    assert store.get_run("r2").environment == later_a
    assert store.get_run("r2").environment.fingerprint == ENV_A.fingerprint
    assert store.get_run("r1").environment == ENV_A
    assert store.get_run("r3").environment == ENV_B
    assert [s.environment_fingerprint for s in store.list_runs()] == [
        ENV_B.fingerprint,
        ENV_A.fingerprint,
        ENV_A.fingerprint,
    ]


def test_runs_are_never_overwritten(store: Store) -> None:
    store.save_run(_run("same", results=(_result("cpu", samples=(1.0, 2.0)),)))
    with pytest.raises((StoreError, IntegrityError)):
        store.save_run(_run("same", results=(_result("cpu", samples=(5.0,)),)))
    assert store.get_run("same").results[0].latency.samples_ms == (1.0, 2.0)  # type: ignore[union-attr]
    assert _count(store, tables.runs) == 1
    assert _count(store, tables.timing_samples) == 2


# -- baselines --------------------------------------------------------------------------


def _baseline(baseline_id: str, created_at: str, spec: str = "arch:llama", env: Environment = ENV_A) -> BaselineInfo:
    return BaselineInfo(
        id=baseline_id,
        workload_spec=spec,
        fingerprint="f" * 16,
        seed=0,
        created_at=created_at,
        environment_fingerprint=env.fingerprint,
        references=("eager:float32", "repeat:float32", "golden"),
        deterministic=True,
        repeat_max_abs_err=0.0,
        path=f"baselines/ffffffffffffffff/{baseline_id}.safetensors",  # as the store keeps it
    )


def test_latest_baseline_none(store: Store) -> None:
    assert store.latest_baseline("arch:llama") is None


def test_save_and_latest_baseline(store: Store) -> None:
    first = _baseline("b1", "2025-01-01T00:00:00+00:00")
    second = BaselineInfo(
        **{
            **_baseline("b2", "2025-02-01T00:00:00+00:00", env=ENV_B).__dict__,
            "deterministic": False,
            "repeat_max_abs_err": 0.125,
            "seed": 7,
        }
    )
    other = _baseline("b3", "2025-03-01T00:00:00+00:00", spec="arch:gpt2")
    store.save_baseline(first, ENV_A)
    assert store.latest_baseline("arch:llama") == first
    store.save_baseline(second, ENV_B)
    store.save_baseline(other, ENV_A)
    assert store.latest_baseline("arch:llama") == second
    assert store.latest_baseline("arch:gpt2") == other
    assert store.latest_baseline("arch:bert") is None
    assert _count(store, tables.environments) == 2


def test_run_links_to_baseline(store: Store) -> None:
    store.save_baseline(_baseline("base1", "2025-01-01T00:00:00+00:00"), ENV_A)
    store.save_run(_run("withbase", baseline_id="base1"))
    assert store.get_run("withbase").baseline_id == "base1"


def test_requirements_are_kept_per_workload_and_replaced_whole(tmp_path):
    store = Store.open(tmp_path / "r.db")
    assert store.requirements("arch:llama") == []
    store.save_requirements("arch:llama", ["p90<=50ms", "throughput>=200/s"], "2026-01-01T00:00:00+00:00")
    store.save_requirements("arch:bert", ["ttft<=200ms"], "2026-01-01T00:00:00+00:00")
    store.save_requirements("arch:llama", ["p99<=80ms"], "2026-01-02T00:00:00+00:00")
    reopened = Store.open(tmp_path / "r.db")
    assert reopened.requirements("arch:llama") == ["p99<=80ms"]
    assert reopened.requirements("arch:bert") == ["ttft<=200ms"]


def test_version_1_database_gains_the_requirements_table(tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path / 'v1.db'}")
    with engine.begin() as conn:
        MIGRATIONS[0][1](conn)  # exactly what version 1 created
        conn.execute(tables.meta.insert().values(key="schema_version", value="1"))
    with engine.connect() as conn:
        assert "requirements" not in inspect(conn).get_table_names()
    store = Store.open(tmp_path / "v1.db")
    store.save_requirements("arch:llama", ["p50<=1s"], "2026-01-01T00:00:00+00:00")
    assert store.requirements("arch:llama") == ["p50<=1s"]
    with store.engine.connect() as conn:
        assert current_version(conn) == SCHEMA_VERSION


def test_a_run_that_a_locked_database_cannot_take_is_kept_for_import(tmp_path: Path, monkeypatch: Any) -> None:
    # a lock held past SQLite's wait threw a finished trial away, and the hint spoke of a damaged database
    from bakeoff import api
    from bakeoff.store import connection

    monkeypatch.setattr(connection, "BUSY_TIMEOUT_S", 0.2)
    db = tmp_path / "kb.db"
    store = Store.open(db)
    store.save_run(_run("before"))  # the control: nothing holds the lock, the run is stored and nothing kept
    assert not list(tmp_path.glob("bakeoff-unsaved-*"))
    holder = sqlite3.connect(db)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreError) as raised:
            store.save_run(_run("locked"))
    finally:
        holder.rollback()
        holder.close()
    kept = tmp_path / "bakeoff-unsaved-locked.jsonl"
    assert (
        str(raised.value)
        == f"database {store.display_url} stayed locked by another process for 0.2 s: run locked is kept in {kept}"
    )
    assert raised.value.hint == f"bakeoff import {kept} --db {db} stores it once the other process lets go"
    assert [r["id"] for r in store.run_index()] == ["before"]  # nothing half-stored
    api.import_runs(kept, db=db)
    assert sorted(r["id"] for r in store.run_index()) == ["before", "locked"]
    assert store.get_run("locked").to_dict() == _run("locked").to_dict()
