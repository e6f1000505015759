"""Does forking a trial's target workers from a warm server save time, and change what they measure?

Runs the same trial (the bundled tiny Llama by default, on ``cpu`` and ``cpu+aot_eager``) with
its workers spawned (a fresh interpreter per target session, importing PyTorch and
transformers) and forked (from this process's warm server, :func:`bakeoff.launch.warm.shared_server`),
in alternating order, ``--rounds`` times each. It prints per round and way: the trial's wall
time, the machine's CPU seconds over it (from ``/proc/stat``: every process, this one included),
each target's median latency and peak host memory; then the medians' ratios forked / spawned.
The first forked round includes the server's own start; later rounds of this process reuse it.

Usage: .venv/bin/python benchmarks/trial_workers.py [--workload arch:llama] [--on cpu,cpu+aot_eager]
       [--rounds 3] [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from bakeoff.api import trial
from bakeoff.runner.isolation import SessionPool
from bakeoff.runner.workers import preload_for
from bakeoff.workload.base import parse_workload


def machine_cpu_s() -> float | None:
    """CPU seconds spent by the whole machine so far (user, nice, system), None off Linux."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:4]
    except OSError:
        return None
    return sum(int(f) for f in fields) / os.sysconf("SC_CLK_TCK")


def one_trial(workload: str, on: str, db: Path, forked: bool, samples: int) -> dict:
    workers = None if forked else SessionPool(preload_for(parse_workload(workload)), reuse=False, server=None)
    cpu, began = machine_cpu_s(), time.perf_counter()
    run = trial(workload, on, db=db, workers=workers, min_samples=samples, min_seconds=0.0)
    wall = time.perf_counter() - began
    spent = machine_cpu_s()
    row = {"wall_s": wall, "cpu_s": None if cpu is None or spent is None else spent - cpu}
    for result in run.results:
        latency = statistics.median(result.latency.samples_ms) if result.latency is not None else None
        peak = result.peak_host_rss_bytes
        row[result.target.spec] = (result.status, latency, peak / 2**20 if peak else None)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="arch:llama")
    parser.add_argument("--on", default="cpu,cpu+aot_eager")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=30, help="timed calls per target")
    parser.add_argument("--quick", action="store_true", help="one round, 5 samples (a smoke test)")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.samples = 1, 5
    rows: dict[str, list[dict]] = {"spawned": [], "forked": []}
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(args.rounds):
            order = ("spawned", "forked") if index % 2 == 0 else ("forked", "spawned")
            for way in order:
                row = one_trial(args.workload, args.on, Path(tmp) / "b.db", way == "forked", args.samples)
                rows[way].append(row)
                cpu = "-" if row["cpu_s"] is None else f"{row['cpu_s']:.1f}"
                each = "  ".join(
                    f"{spec} {v[0]} p50 {v[1]:.3f} ms peak {v[2]:.0f} MiB"
                    if v[1] is not None and v[2] is not None
                    else f"{spec} {v[0]}"
                    for spec, v in row.items()
                    if isinstance(v, tuple)
                )
                print(f"round {index + 1} {way:<8} wall {row['wall_s']:6.1f} s  cpu {cpu:>6} s  {each}", flush=True)
    print("\nmedians, forked / spawned:")
    for figure in ("wall_s", "cpu_s"):
        values = {w: [r[figure] for r in rows[w] if r[figure] is not None] for w in rows}
        if all(values.values()):
            spawned, forked = (statistics.median(values[w]) for w in ("spawned", "forked"))
            print(f"  {figure:<8} {forked:7.2f} / {spawned:7.2f} = {forked / spawned:.2f}")
    for spec in [k for k in rows["spawned"][0] if isinstance(rows["spawned"][0][k], tuple)]:
        for position, name in ((1, "p50 ms"), (2, "peak MiB")):
            values = {w: [r[spec][position] for r in rows[w] if r.get(spec) and r[spec][position]] for w in rows}
            if all(values.values()):
                spawned, forked = (statistics.median(values[w]) for w in ("spawned", "forked"))
                print(f"  {spec:<16} {name:<9} {forked:9.3f} / {spawned:9.3f} = {forked / spawned:.2f}")


if __name__ == "__main__":
    main()
