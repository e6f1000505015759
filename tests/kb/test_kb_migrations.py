"""Older databases open and upgrade; newer ones are refused. The fixture kb_v1.db was written by
the last release at schema version 1 (before requirements, notes and tags): two real runs of a
2-layer llama and their baseline; kb_v1.json is what that release read back from it."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import MetaData, Table, create_engine, inspect, select, text
from sqlalchemy.engine import make_url
from tests.conftest import bakeoff_cli
from tests.kb.runs import V1_CONTENT, V1_DB, recorded_baseline, variant

from bakeoff.errors import StoreError
from bakeoff.results.values import RunResult
from bakeoff.store import Store
from bakeoff.store import schema as tables
from bakeoff.store.migrations import MIGRATIONS, SCHEMA_VERSION, current_version

V1_TABLES = ("meta", "environments", "baselines", "runs", "target_results", "timing_samples")


def bakeoff(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return bakeoff_cli(*args, cwd=cwd, timeout=120)


@pytest.fixture
def v1_copy(tmp_path: Path) -> Path:
    path = tmp_path / "old.db"
    shutil.copyfile(V1_DB, path)
    return path


def _assert_v1_content(store: Store) -> None:
    for doc in V1_CONTENT["runs"]:
        assert store.get_run(doc["run_id"]) == RunResult.from_dict(doc)
    assert store.latest_baseline("arch:llama") == recorded_baseline()
    assert [s.run_id for s in store.list_runs()] == [d["run_id"] for d in reversed(V1_CONTENT["runs"])]


def test_fixture_is_a_version_1_database() -> None:
    with sqlite3.connect(f"file:{V1_DB}?mode=ro", uri=True) as conn:
        assert conn.execute("select value from meta where key='schema_version'").fetchone() == ("1",)
        names = {r[0] for r in conn.execute("select name from sqlite_master where type='table'")}
    assert names == set(V1_TABLES)


def test_version_1_file_opens_upgrades_and_reads_back_intact(v1_copy: Path) -> None:
    store = Store.open(v1_copy)
    with store.engine.connect() as conn:
        assert current_version(conn) == SCHEMA_VERSION
    assert set(tables.metadata.tables) <= set(inspect(store.engine).get_table_names())
    _assert_v1_content(store)
    # and the new tables work on it
    run_id = V1_CONTENT["runs"][0]["run_id"]
    store.add_tag(run_id, "before-upgrade")
    store.save_requirements("arch:llama", ["p50<=5ms"], "2026-01-01T00:00:00+00:00")
    assert [s.run_id for s in Store.open(v1_copy).list_runs(tag="before-upgrade")] == [run_id]


def test_db_status_and_upgrade_commands_on_the_version_1_file(v1_copy: Path) -> None:
    status = bakeoff("db", "status", "--db", str(v1_copy), cwd=v1_copy.parent)
    assert status.returncode == 0, status.stderr
    assert status.stdout.splitlines() == [
        f"database  {v1_copy} (sqlite)",
        "runs      2",
        f"schema    version 1; this bakeoff uses version {SCHEMA_VERSION}: {SCHEMA_VERSION - 1} migrations pending; "
        "run `bakeoff db upgrade`",
        *[f"  pending {i + 1}: {name}" for i, (name, _) in enumerate(MIGRATIONS) if i >= 1],
    ]
    with sqlite3.connect(v1_copy) as conn:  # status looked without upgrading
        assert conn.execute("select value from meta where key='schema_version'").fetchone() == ("1",)
    upgraded = bakeoff("db", "upgrade", "--db", str(v1_copy), cwd=v1_copy.parent)
    assert upgraded.returncode == 0, upgraded.stderr
    assert upgraded.stdout.splitlines() == [
        f"upgraded {v1_copy} from schema version 1 to {SCHEMA_VERSION}:",
        *[f"  applied {i + 1}: {name}" for i, (name, _) in enumerate(MIGRATIONS) if i >= 1],
    ]
    again = bakeoff("db", "upgrade", "--db", str(v1_copy), cwd=v1_copy.parent)
    assert again.stdout.strip() == f"{v1_copy} is up to date (schema version {SCHEMA_VERSION})"
    _assert_v1_content(Store.open(v1_copy))


def test_db_upgrade_of_a_missing_file_is_refused(tmp_path: Path) -> None:
    done = bakeoff("db", "upgrade", "--db", str(tmp_path / "typo.db"), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"bakeoff: error: no database at {tmp_path / 'typo.db'} (check --db / BAKEOFF_DB, or run a trial first)"
    )
    assert not (tmp_path / "typo.db").exists()


def _copy_v1_to_postgresql(url: str) -> None:
    """A server database as the version-1 release left it: the fixture's rows in version-1 tables."""
    source = create_engine(f"sqlite:///{V1_DB}")
    target = Store.open(url, upgrade=False).engine
    with source.connect() as src, target.begin() as dst:
        MIGRATIONS[0][1](dst)
        for name in V1_TABLES:
            as_written = Table(name, MetaData(), autoload_with=src)  # version 1's columns, not today's
            rows = [dict(r) for r in src.execute(select(as_written)).mappings()]
            if rows:
                dst.execute(tables.metadata.tables[name].insert(), rows)
        for name in ("environments", "target_results"):  # ids were copied: move the sequences on
            dst.execute(text(f"SELECT setval(pg_get_serial_sequence('{name}', 'id'), (SELECT max(id) FROM {name}))"))
    source.dispose()


def test_older_server_database_is_refused_until_db_upgrade(pg_url: str, tmp_path: Path) -> None:
    _copy_v1_to_postgresql(pg_url)
    shown = make_url(pg_url).render_as_string(hide_password=True)
    with pytest.raises(StoreError) as info:
        Store.open(pg_url)
    assert info.value.one_line() == (
        f"database {shown} has schema version 1; this bakeoff needs version {SCHEMA_VERSION} "
        "(run `bakeoff db upgrade` once for everyone who shares it; older bakeoff releases will then refuse it)"
    )
    history = bakeoff("history", "--db", pg_url, cwd=tmp_path)
    assert (history.returncode, history.stderr.strip()) == (2, f"bakeoff: error: {info.value.one_line()}")

    upgraded = bakeoff("db", "upgrade", "--db", pg_url, cwd=tmp_path)
    assert upgraded.returncode == 0, upgraded.stderr
    assert upgraded.stdout.splitlines()[0] == f"upgraded {shown} from schema version 1 to {SCHEMA_VERSION}:"
    store = Store.open(pg_url)
    _assert_v1_content(store)
    store.save_run(variant("after-upgrade"))  # new rows get new ids after the copied ones
    assert len(store.get_run("after-upgrade").results) == 2


def test_new_empty_server_database_is_created_by_ordinary_commands(pg_url: str) -> None:
    store = Store.open(pg_url)
    assert store.schema_status()["schema_version"] == SCHEMA_VERSION


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_newer_database_is_refused_but_status_reads_it(kind: str, request, tmp_path: Path) -> None:
    url = request.getfixturevalue("pg_url") if kind == "postgresql" else str(tmp_path / "kb.db")
    store = Store.open(url)
    store.save_run(variant("keep"))
    with store.engine.begin() as conn:
        conn.execute(tables.meta.update().values(value=str(SCHEMA_VERSION + 1)))
    line = (
        f"database {store.display_url} has schema version {SCHEMA_VERSION + 1}, newer than this bakeoff "
        f"understands ({SCHEMA_VERSION}) (upgrade bakeoff to use it)"
    )
    for args in (["history"], ["db", "upgrade"], ["note", "keep", "hello"]):
        done = bakeoff(*args, "--db", url, cwd=tmp_path)
        assert (done.returncode, done.stderr.strip()) == (2, f"bakeoff: error: {line}")
    status = bakeoff("db", "status", "--db", url, cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    assert status.stdout.splitlines()[2] == (
        f"schema    version {SCHEMA_VERSION + 1}; this bakeoff uses version {SCHEMA_VERSION}: "
        "written by a newer bakeoff; upgrade bakeoff to use it"
    )
    with store.engine.connect() as conn:  # nothing was touched
        assert conn.execute(select(tables.runs.c.id)).scalars().all() == ["keep"]
