"""The knowledge base on a real PostgreSQL server: same schema, same values, same errors as SQLite."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest
from sqlalchemy import func, inspect, select
from tests.kb.runs import environment, recorded_baseline, recorded_run, variant

from bakeoff.errors import StoreError
from bakeoff.store import Store
from bakeoff.store import schema as tables
from bakeoff.store.artifacts import baseline_name
from bakeoff.store.migrations import SCHEMA_VERSION, current_version


def _count(store: Store, table) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def test_round_trip_of_a_run_baseline_requirements_notes_and_tags(pg_url: str) -> None:
    store = Store.open(pg_url)
    assert store.engine.dialect.name == "postgresql"
    assert store.engine.url.drivername == "postgresql+psycopg"
    assert set(tables.metadata.tables) <= set(inspect(store.engine).get_table_names())
    with store.engine.connect() as conn:
        assert current_version(conn) == SCHEMA_VERSION

    baseline = recorded_baseline()
    run = recorded_run(0)
    skipped = recorded_run(1)
    store.save_baseline(baseline, run.environment)
    store.save_run(run)
    store.save_run(skipped)
    store.save_requirements("arch:llama", ["p90<=50ms", "throughput>=200/s"], "2026-01-01T00:00:00+00:00")

    again = Store.open(pg_url)
    assert again.get_run(run.run_id) == run  # every field, every raw sample in order, the environment
    assert again.get_run(run.run_id[:4]) == run
    assert again.get_run(skipped.run_id) == skipped
    # kept as a name inside the artifact store, never as the path of the machine that wrote it
    assert again.latest_baseline("arch:llama") == replace(baseline, path=baseline_name(baseline))
    assert again.requirements("arch:llama") == ["p90<=50ms", "throughput>=200/s"]
    assert [s.run_id for s in again.list_runs()] == [skipped.run_id, run.run_id]
    [summary] = again.list_runs(limit=1)
    assert (summary.targets, summary.ok, summary.passed, summary.skipped) == (2, 1, 1, 1)
    assert summary.environment_fingerprint == run.environment.fingerprint
    assert _count(again, tables.environments) == 1
    samples = sum(len(r.latency.samples_ms) for r in run.results + skipped.results if r.latency)
    assert _count(again, tables.timing_samples) == samples

    note = again.add_note(run.run_id[:6], "  OOM at batch 8 with <b>driver</b> 560  ", author="ana")
    assert (note.run_id, note.text, note.author) == (run.run_id, "OOM at batch 8 with <b>driver</b> 560", "ana")
    assert note.created_at.endswith("+00:00")
    assert again.add_tag(run.run_id, "driver-560") == ["driver-560"]
    assert again.add_tag(run.run_id, "driver-560") == ["driver-560"]  # tagging twice is harmless
    again.add_tag(run.run_id, "baseline-week")
    assert Store.open(pg_url).notes(run.run_id) == [note]
    assert Store.open(pg_url).tags(run.run_id) == ["baseline-week", "driver-560"]
    assert again.run_ids_with_tag("driver-560") == [run.run_id]
    assert [s.run_id for s in again.list_runs(tag="driver-560")] == [run.run_id]
    assert again.remove_tag(run.run_id, "driver-560") is True
    assert again.remove_tag(run.run_id, "driver-560") is False
    assert again.list_runs(tag="driver-560") == []


def test_runs_are_never_overwritten(pg_url: str) -> None:
    store = Store.open(pg_url)
    store.save_run(variant("same"))
    with pytest.raises(StoreError, match="could not be read or written"):
        store.save_run(variant("same", env=environment(2)))
    assert store.get_run("same").environment.fingerprint == recorded_run().environment.fingerprint
    assert _count(store, tables.runs) == 1


def test_unreachable_server_is_one_line() -> None:
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(StoreError) as info:
        Store.open(f"postgresql://someone:secret@127.0.0.1:{port}/kb")
    line = info.value.one_line()
    assert line.startswith(f"cannot open database postgresql://someone:***@127.0.0.1:{port}/kb: connection failed")
    assert "secret" not in line
    assert line.endswith(
        "(check that the server is running and the URL's host, port, user, password and database name)"
    )


def test_missing_driver_is_one_line_on_the_cli(tmp_path) -> None:
    code = (
        "import sys\nsys.modules['psycopg'] = None  # as if psycopg were not installed\n"
        "from bakeoff.cli.main import main\nmain(['history', '--db', 'postgresql://u:pw@127.0.0.1:9/kb'])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("bakeoff: error: cannot use postgresql://u:***@127.0.0.1:9/kb: the PostgreSQL driver")
    assert lines[0].endswith("(pip install 'bakeoff[postgres]' (psycopg 3))")


def test_other_database_kinds_are_refused() -> None:
    with pytest.raises(StoreError) as info:
        Store.open("mysql://u@h/db")
    assert info.value.one_line() == (
        "bakeoff keeps runs in SQLite or PostgreSQL, not 'mysql' (mysql://u@h/db) "
        "(use a file path or a postgresql://user@host/dbname URL)"
    )


def test_role_without_create_privilege_is_told_what_to_do(pg_url: str) -> None:
    import uuid

    import psycopg
    from sqlalchemy.engine import make_url

    role = f"reader_{uuid.uuid4().hex[:8]}"
    admin = make_url(pg_url)
    plain = admin.set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        with psycopg.connect(plain, autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {role} LOGIN")  # PostgreSQL 15: no CREATE on schema public
    except psycopg.Error as exc:
        pytest.skip(f"the test server's role cannot create roles: {exc}")
    try:
        url = admin.set(username=role, password=None).render_as_string(hide_password=False)
        with pytest.raises(StoreError) as info:
            Store.open(url)
        assert info.value.one_line() == (
            f"cannot open database {url}: permission denied for schema public "
            "(bakeoff's role must be able to create tables there: make it the database's owner, "
            "e.g. createdb -O ROLE DBNAME, or ALTER DATABASE DBNAME OWNER TO ROLE)"
        )
    finally:
        with psycopg.connect(plain, autocommit=True) as conn:
            conn.execute(f"DROP ROLE {role}")
