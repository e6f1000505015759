"""How a shared knowledge base performs: SQLite file or PostgreSQL server, 1,000 runs.

Fills a fresh database through the Store (4 targets per run, 30-100 raw timing samples each,
a handful of environments, every tenth run tagged), then times ``history`` (newest 20, by tag,
all), one ``show``, export to JSON lines and CSV, import into a second fresh database and the
same import again (which adds nothing), and two processes writing at once.

Usage:
    .venv/bin/python benchmarks/kb_sharing.py [--runs 1000] [--db URL --db2 URL] [--quick]

Without ``--db`` it uses temporary SQLite files; for PostgreSQL pass two empty databases, e.g.
``--db postgresql://bakeoff@127.0.0.1:5432/a --db2 postgresql://bakeoff@127.0.0.1:5432/b``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from bakeoff import api
from bakeoff.env import Environment
from bakeoff.results.values import Correctness, Latency, RunResult, TargetResult
from bakeoff.store import Store
from bakeoff.target.spec import parse_target

T = TypeVar("T")
TARGETS = ("cpu", "cpu+aot_eager", "cpu+inductor", "cpu+openvino")
WORKLOADS = ("arch:llama", "arch:gpt2", "arch:bert", "py:service.py:make_model")


def _environment(index: int) -> Environment:
    return Environment(
        {"python": "3.11.7", "torch": f"2.{10 + index}.0", "cpu": "Synthetic CPU", "captured_at": "2025-01-01T00:00:00"}
    )


def synthetic_run(i: int, prefix: str = "", seed: int = 0) -> RunResult:
    rng = random.Random(seed * 1_000_003 + i)
    results = tuple(
        TargetResult(
            target=parse_target(spec),
            status="ok",
            is_reference=spec == "cpu",
            latency=Latency(tuple(rng.lognormvariate(0, 0.05) for _ in range(rng.randint(30, 100)))),
            speedup=1.0,
            checks={"correctness": Correctness("pass", "", "eager:float32", 1e-4)},
        )
        for spec in TARGETS
    )
    spec = WORKLOADS[i % len(WORKLOADS)]
    return RunResult(
        run_id=f"{prefix}{i:010x}",
        created_at=time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(1_735_689_600 + i * 60)),
        workload={"spec": spec, "kind": spec.split(":")[0], "fingerprint": "f" * 16, "dtype": "float32"},
        environment=_environment(i * 5 // 1000),
        results=results,
        settings={"reference": "cpu"},
    )


def fill(db: str, runs: int, prefix: str = "", seed: int = 0) -> None:
    store = Store.open(db)
    for i in range(runs):
        store.save_run(synthetic_run(i, prefix, seed))
        if i % 10 == 0 and not prefix:
            store.add_tag(f"{prefix}{i:010x}", "every-tenth")


def _timed(label: str, fn: Callable[[], T]) -> T:
    start = time.perf_counter()
    value = fn()
    print(f"{label:<52} {time.perf_counter() - start:8.3f} s", flush=True)
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--db", default=None, help="an empty database (default: a temporary SQLite file)")
    parser.add_argument("--db2", default=None, help="a second empty database to import into")
    parser.add_argument("--quick", action="store_true", help="20 runs (a smoke test)")
    if parser.parse_args().quick:  # smaller defaults; options given still win
        parser.set_defaults(runs=20)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bakeoff-kb-sharing-"))
    db = args.db or str(folder / "a.db")
    db2 = args.db2 or str(folder / "b.db")
    try:
        print(f"database: {Store.open(db).display_url}")
        _timed(f"fill {args.runs} runs x {len(TARGETS)} targets (one writer)", lambda: fill(db, args.runs))
        _timed("history (newest 20)", lambda: api.history(db=db))
        _timed("history --tag every-tenth (newest 20)", lambda: api.history(db=db, tag="every-tenth"))
        _timed(f"history (all {args.runs})", lambda: api.history(db=db, limit=args.runs))
        _timed("show one run", lambda: api.show(f"{args.runs // 2:010x}", db=db))
        jsonl, table = folder / "all.jsonl", folder / "all.csv"
        _timed("export --format jsonl (all)", lambda: api.export_runs(jsonl, db=db))
        print(f"{'  size':<52} {jsonl.stat().st_size / 2**20:8.1f} MiB")
        _timed("export --format csv (all)", lambda: api.export_runs(table, db=db, format="csv"))
        print(f"{'  size':<52} {table.stat().st_size / 2**20:8.1f} MiB")
        added = _timed("import into an empty database", lambda: api.import_runs(jsonl, db=db2))
        again = _timed("import the same file again (adds nothing)", lambda: api.import_runs(jsonl, db=db2))
        print(f"{'  runs added, then':<52} {added.runs:8d} {again.runs:4d}")
        each = args.runs // 4
        context = multiprocessing.get_context("spawn")
        writers = [context.Process(target=fill, args=(db2, each, p, n)) for n, p in enumerate(("w1-", "w2-"))]

        def race() -> None:
            for w in writers:
                w.start()
            for w in writers:
                w.join()

        _timed(f"two processes writing {each} runs each at once", race)
        total = api.db_status(db=db2)["runs"]
        print(f"{'  runs in the database afterwards (expected)':<52} {total:8d} ({args.runs + 2 * each})")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
