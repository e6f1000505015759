"""A coverage sweep's own figures: wall time, cells per minute, coverage at each grade, the top
failure reasons, and what the orchestration costs per cell against the model work it wraps.

The sweep runs through the API as a user's would (a warm cell runner builds each workload and
its baseline, warm workers per target run it, the sweep's process stores every cell). The
orchestration overhead is measured against the same trials run without any worker
(``isolate=False``) on the first few workloads, in a fresh process that has imported torch and
transformers but no model's module: the difference per cell is what the processes (each
model's module imported in the runner and in the target's worker), their messages, the cell's
scratch store and the transfer of its baseline, and the sweep's bookkeeping add. It is taken
twice: a cell's time inside the runner, and the gap between two cells' stored times, which also
holds whatever the sweep's own process did between them that the runner did not overlap. The
first cell is left out of both (it pays the workers' start).

Figures (quiet 2-core machine, transformers 5.24, timing none, 176 architectures):
``--on cpu``: 92.4-113.6 s over six runs, median cell 0.15-0.20 s, every grade 167/176 (95%)
once workloads built with one thread (arch:rwkv had been not_comparable); overhead per cell 0.01-0.05 s
against an in-process trial of 0.12-0.18 s (cells 2-40), the gap-based figure 0-8 ms above the
runner's one. The sum over those cells is within +-12% of the in-process sum, either way: the
bigger architectures' cells vary more than the overhead. ``--on cpu+aot_eager``: 1,600.7 s,
6.6 cells per minute, median cell 4.61 s, longest 137 s; the in-process trials (median 5.0 s)
were slower than the sweep's cells, so no overhead shows.

Usage: .venv/bin/python benchmarks/sweep_coverage.py [--population arch:causal_lm]
       [--on cpu,cpu+aot_eager] [--overhead-cells 20] [--quick]
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUICK = ["arch:llama", "arch:gpt2", "arch:gpt_neox", "arch:qwen2"]


CHILD = """
import json, sys, time
import torch, transformers  # what a sweep's workers preload: imported before any cell, as there
from bakeoff.runner.trial import run_trial
from bakeoff.settings import TrialSettings
from bakeoff.store.db import Store
from bakeoff.target.spec import parse_target
db, targets, specs = sys.argv[1], sys.argv[2].split(","), sys.argv[3:]
store = Store.open(db)
settings = TrialSettings.from_options(min_samples=1, min_seconds=0.0, isolate=False, checks=["greedy"])
parsed = [parse_target(t) for t in targets]
seconds = []
for spec in specs:
    started = time.perf_counter()
    try:
        run_trial(store, spec, parsed, settings)
    except Exception:  # a workload that does not build costs what a failed cell costs
        pass
    seconds.append(time.perf_counter() - started)
print(json.dumps(seconds))
"""


def in_process_seconds(specs: list[str], targets: list[str], db: Path) -> list[float]:
    """Each workload as a trial without workers, in a fresh process that has imported torch and
    transformers (as the sweep's workers have) but no model's module: per cell, the same work
    (the model module's first import included) without isolation."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(db), ",".join(targets), *specs],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if done.returncode != 0:
        raise SystemExit(f"the in-process trials failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--population", default="arch:causal_lm")
    parser.add_argument("--on", default="cpu,cpu+aot_eager")
    parser.add_argument("--overhead-cells", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="four tiny architectures on cpu")
    args = parser.parse_args()

    here = Path(tempfile.mkdtemp(prefix="bakeoff-sweep-bench-"))
    try:
        _measure(args, here)
    finally:
        shutil.rmtree(here, ignore_errors=True)


def _measure(args: argparse.Namespace, here: Path) -> None:
    import bakeoff

    population, targets = args.population, args.on
    if args.quick:
        population = str(here / "quick.txt")
        Path(population).write_text("\n".join(QUICK) + "\n", encoding="utf-8")
        targets, args.overhead_cells = "cpu", len(QUICK)
    started = time.perf_counter()
    coverage = bakeoff.sweep(population, on=targets, db=here / "kb.db", timing="none")
    wall = time.perf_counter() - started
    store = bakeoff.api.Store.open(here / "kb.db")
    cells = store.sweep_cells(coverage.sweep_id)
    p = coverage.population
    print(f"population {p['name']}: {coverage.size} {p['unit']}s, transformers {p['transformers']}")
    print(f"targets {targets}; timing none (one timed call per target)")
    print(f"wall {wall:.1f} s for {len(cells)} cells: {len(cells) / wall * 60:.1f} cells per minute")
    seconds = [c.duration_s for c in cells]
    print(f"cell time: median {statistics.median(seconds):.2f} s, max {max(seconds):.1f} s")
    for target, figure in coverage.figures.items():
        shares = ", ".join(
            f"{grade} {g['count']}/{coverage.size} ({g['share']:.0%})" for grade, g in figure["grades"].items()
        )
        print(f"coverage on {target}: {shares}")
    print("top failure reasons:")
    for reason in coverage.reasons[:10]:
        print(f"  {reason['count']:4d}  {reason['reason'][:110]}  (after {', '.join(reason['stopped_at'])})")
    first = [c.workload_spec for c in cells[: args.overhead_cells]]
    swept = [c.duration_s for c in cells[: args.overhead_cells]]
    direct = in_process_seconds(first, targets.split(","), here / "direct.db")
    # A cell's share of the sweep's wall time: from the previous cell's storing to its own, which
    # holds the runner's work on it and whatever the sweep's process did in between (storing the
    # previous cell, progress) that the runner did not overlap.
    stamps = [datetime.datetime.fromisoformat(c.finished_at) for c in cells[: args.overhead_cells]]
    walls = [(b - a).total_seconds() for a, b in itertools.pairwise(stamps)]
    # the first cell pays the workers' start: left out of both figures
    for label, seconds in (("as the sweep's wall time", walls), ("inside the runner", swept[1:])):
        overhead = [s - d for s, d in zip(seconds, direct[1:], strict=True)]
        per_cell = statistics.median(overhead) if overhead else float("nan")
        share = sum(overhead) / sum(seconds) if overhead else float("nan")
        print(
            f"orchestration overhead per cell {label} (cells 2-{len(first)}): median {per_cell:.3f} s, "
            f"{share:.0%} of that time (in-process trial median {statistics.median(direct[1:]):.3f} s)"
        )
    print(f"workers' start paid by the first cell: {swept[0] - direct[0]:.1f} s")


if __name__ == "__main__":
    main()
