"""Several processes writing to one knowledge base at once lose nothing and duplicate nothing.

Two writer processes start together on a database that does not exist yet (so they also race
to create the schema), then each saves the same sequence of environments: run ``i`` of both
writers carries environment ``i``, so every environment is first inserted by two writers at
about the same moment. After each run both declare the workload's requirements again.

A file barrier before every run makes both writers start it together (neither may go on until
the other has arrived), and each reports when its save began and ended: the test asserts that
the saves really overlapped, so a race that the timing happened to avoid cannot pass unseen.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy import func, select
from tests.kb.runs import environment, recorded_run

from bakeoff.store import Store
from bakeoff.store import schema as tables

ROOT = Path(__file__).parents[2]
RUNS_PER_WRITER = 40

WRITER = """
import sys, time
from pathlib import Path
from bakeoff.store import Store
from tests.kb.runs import environment, variant

url, prefix, n, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
other = "b" if prefix == "a" else "a"
while not go.exists():
    time.sleep(0.001)
store = Store.open(url)
for i in range(n):
    (go.parent / f"{prefix}{i}").touch()  # the barrier: arrive, then wait for the other writer
    deadline = time.monotonic() + 60
    while not (go.parent / f"{other}{i}").exists() and time.monotonic() < deadline:
        time.sleep(0.0002)
    began = time.time()
    store.save_run(variant(f"{prefix}{i:04d}", env=environment(i), created_at=f"2026-01-01T00:00:{i:02d}+00:00"))
    store.save_requirements("arch:llama", [f"p50<={i}ms"], f"2026-01-01T00:00:{i:02d}+00:00")
    print(i, began, time.time(), flush=True)
"""


def _count(store: Store, table) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def _write_concurrently(url: str, tmp_path: Path) -> None:
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, url, prefix, str(RUNS_PER_WRITER), str(go)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for prefix in ("a", "b")
    ]
    time.sleep(1.5)  # both have imported bakeoff and are waiting
    go.touch()
    spans = []
    for writer in writers:
        out, err = writer.communicate(timeout=300)
        assert writer.returncode == 0, err
        spans.append({int(i): (float(a), float(b)) for i, a, b in (row.split() for row in out.splitlines())})
    first, second = spans
    overlapped = sum(1 for i in range(RUNS_PER_WRITER) if first[i][0] < second[i][1] and second[i][0] < first[i][1])
    # the barrier puts both saves of run i side by side; most must truly have run at once
    assert overlapped >= RUNS_PER_WRITER // 2, f"only {overlapped} of {RUNS_PER_WRITER} saves overlapped"


def _check(store: Store) -> None:
    run = recorded_run()
    samples_per_run = sum(len(r.latency.samples_ms) for r in run.results if r.latency)
    runs = 2 * RUNS_PER_WRITER
    assert _count(store, tables.runs) == runs
    assert _count(store, tables.environments) == RUNS_PER_WRITER
    assert _count(store, tables.target_results) == runs * len(run.results)
    assert _count(store, tables.timing_samples) == runs * samples_per_run
    with store.engine.connect() as conn:
        versions = conn.execute(select(tables.meta.c.value).where(tables.meta.c.key == "schema_version")).all()
    assert len(versions) == 1
    assert _count(store, tables.requirements) == 1  # both declared requirements for it, over and over
    assert store.requirements("arch:llama") == [f"p50<={RUNS_PER_WRITER - 1}ms"]
    summaries = store.list_runs(limit=1000)
    assert sorted(s.run_id for s in summaries) == sorted(f"{p}{i:04d}" for p in "ab" for i in range(RUNS_PER_WRITER))
    for summary in summaries:
        assert summary.environment_fingerprint == environment(int(summary.run_id[1:])).fingerprint
    for run_id in ("a0000", f"b{RUNS_PER_WRITER - 1:04d}"):
        stored = store.get_run(run_id)
        assert stored.results == run.results
        assert stored.environment == environment(int(run_id[1:]))


def test_two_processes_writing_to_postgresql(pg_url: str, tmp_path: Path) -> None:
    _write_concurrently(pg_url, tmp_path)
    _check(Store.open(pg_url))


def test_two_processes_writing_to_postgresql_whose_default_is_serializable(pg_url: str, tmp_path: Path) -> None:
    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(pg_url)
    with psycopg.connect(url.set(drivername="postgresql").render_as_string(hide_password=False)) as conn:
        conn.execute(f"ALTER DATABASE \"{url.database}\" SET default_transaction_isolation = 'serializable'")
        conn.commit()
    _write_concurrently(pg_url, tmp_path)
    _check(Store.open(pg_url))


def test_two_processes_writing_to_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    _write_concurrently(str(path), tmp_path)
    _check(Store.open(path))
