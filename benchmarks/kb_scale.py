"""How the knowledge base and its reports scale: 1,000 synthetic runs in a temporary SQLite file.

Fills the database through the Store (several workloads, targets and environments; 30-100 raw
timing samples per target, as trials keep them), then times:

* ``history`` (the newest 20 runs; all of them; one workload's),
* ``regressions`` over the whole database,
* the HTML, Markdown and JSON reports of the whole database (time and size).

Usage: .venv/bin/python benchmarks/kb_scale.py [--runs 1000] [--keep DIR] [--quick]
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from bakeoff import api
from bakeoff.analysis.compare import ratio_of_medians
from bakeoff.env import Environment
from bakeoff.results.values import Compilation, Correctness, ErrorInfo, Latency, Placement, RunResult, TargetResult
from bakeoff.store import Store
from bakeoff.target.spec import parse_target

WORKLOADS = ["arch:llama", "arch:gpt2", "arch:bert", "arch:mistral", "py:service.py:make_model"]
TARGETS = {"cpu": 1.0, "cpu+aot_eager": 0.95, "cpu+inductor": 0.55, "cpu+openvino": 0.6}
T = TypeVar("T")
TORCH = ["2.11.0", "2.12.0", "2.13.0", "2.14.0"]


def _environment(index: int) -> Environment:
    torch = TORCH[index % len(TORCH)]
    return Environment(
        {
            "python": "3.11.7",
            "torch": torch,
            "cpu": "Synthetic CPU",
            "os": "Linux 6.1",
            "packages": {"torch": torch, "numpy": "2.1.0", "openvino": f"2025.{index % 3}.0"},
            "env": {"OMP_NUM_THREADS": "1"},
            "threads": {"intra_op": 1, "inter_op": 1},
            "captured_at": "2025-01-01T00:00:00+00:00",
        }
    )


def _result(
    spec: str, base_ms: float, env_index: int, rng: random.Random, reference: tuple[float, ...]
) -> TargetResult:
    target = parse_target(spec)
    if spec == "cpu+openvino" and rng.random() < 0.05:
        return TargetResult(
            target=target,
            status="error",
            error=ErrorInfo("RuntimeError", "conversion failed for aten::foo", category="exception", phase="compile"),
        )
    drift = 1.0 + (0.3 if spec == "cpu+inductor" and env_index % len(TORCH) == 3 else 0.0)
    median = base_ms * TARGETS[spec] * drift
    n = rng.randint(30, 100)
    samples = reference if spec == "cpu" else tuple(median * rng.lognormvariate(0, 0.05) for _ in range(n))
    speed = ratio_of_medians(reference, samples, resamples=100)
    compiled = target.is_compiled
    return TargetResult(
        target=target,
        status="ok",
        is_reference=spec == "cpu",
        latency=Latency(samples),
        first_call_ms=900.0 if compiled else median * 2,
        speedup=speed.value,
        speedup_ci=None if spec == "cpu" else speed.to_dict(),
        checks={
            "correctness": Correctness("pass", "", "eager:float32", 1e-4),
            "placement": Placement("not_applicable", "", ops_total=120, ops_on_device=120, device_op_share=1.0),
            "compilation": Compilation(
                graphs=2,
                recompiles=1,
                per_shape=({"shape": "1x16", "first_call_ms": 800.0}, {"shape": "1x32", "first_call_ms": 650.0}),
            )
            if compiled
            else None,
        },
    )


def fill(store: Store, runs: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    start = time.mktime((2025, 1, 1, 0, 0, 0, 0, 0, 0))
    for i in range(runs):
        workload = WORKLOADS[i % len(WORKLOADS)]
        env_index = i * len(TORCH) // runs  # environments follow one another in time, like updates
        base = 1.0 + WORKLOADS.index(workload)
        reference = tuple(base * rng.lognormvariate(0, 0.05) for _ in range(rng.randint(30, 100)))
        results = tuple(_result(spec, base, env_index, rng, reference) for spec in TARGETS)
        created = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(start + i * 3600))
        store.save_run(
            RunResult(
                run_id=f"{i:012x}",
                created_at=created,
                workload={
                    "spec": workload,
                    "kind": workload.split(":")[0],
                    "fingerprint": "f" * 16,
                    "dtype": "float32",
                },
                environment=_environment(env_index),
                results=results,
                settings={"reference": "cpu"},
            )
        )


def _timed(label: str, fn: Callable[[], T]) -> T:
    start = time.perf_counter()
    value = fn()
    print(f"{label:<44} {time.perf_counter() - start:8.3f} s")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--keep", type=Path, default=None, help="write the database and reports here")
    parser.add_argument("--quick", action="store_true", help="20 runs (a smoke test)")
    if parser.parse_args().quick:  # smaller defaults; options given still win
        parser.set_defaults(runs=20)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bakeoff-kb-")) if args.keep is None else args.keep
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "kb.db"
    try:
        store = Store.open(db)
        _timed(f"fill {args.runs} runs x {len(TARGETS)} targets", lambda: fill(store, args.runs))
        print(f"{'database size':<44} {db.stat().st_size / 2**20:8.1f} MiB")
        _timed("history (newest 20)", lambda: api.history(db=db))
        _timed(f"history (all {args.runs})", lambda: api.history(db=db, limit=args.runs))
        _timed("history (one workload, 20)", lambda: api.history(db=db, workload=WORKLOADS[0]))
        found = _timed("regressions (whole database)", lambda: api.regressions(db=db))
        outcomes = {o: sum(1 for c in found if c.outcome == o) for o in {c.outcome for c in found}}
        print(f"{'  comparisons':<44} {len(found):8d}  {outcomes}")
        _timed(
            "regressions (one workload, one target)",
            lambda: api.regressions(db=db, workload=WORKLOADS[0], target="cpu"),
        )
        for kind in ("html", "markdown", "json"):
            out = folder / f"report.{ {'markdown': 'md'}.get(kind, kind) }"
            _timed(f"report --{kind} (whole database)", lambda out=out, kind=kind: api.report(db=db, **{kind: out}))
            print(f"{'  size':<44} {out.stat().st_size / 2**20:8.1f} MiB")
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
