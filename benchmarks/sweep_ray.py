"""The same sweep on the local pool and on a local Ray cluster: same grades, and what Ray costs.

Runs a small population of tiny ``arch:`` cells (one workload each, eager CPU, one timed call)
twice, each into its own knowledge base: with the local executor (warm worker processes here)
and with ``--executor ray`` (a local Ray cluster started for the sweep, one task per cell, the
targets in warm workers inside each Ray worker). Prints whether every cell got the same grade
and category, the wall time of each sweep, Ray's start-up (from its own status line) and its
overhead per cell: (Ray wall - start-up - local wall) / cells. On a machine with fewer cores
than a cell has target workers, cells run one at a time on Ray too (see
``bakeoff.sweep.ray_executor.cell_cpus``): the figure is the cost of the executor, not a speed-up.

Usage:
    .venv/bin/python benchmarks/sweep_ray.py [--types llama,gpt2] [--quick] [--on cpu] [--json out.json]
    .venv/bin/python benchmarks/sweep_ray.py --workload py:models.py:mlp   # your own workloads instead
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TYPES = ("llama", "gpt2", "qwen2", "mistral", "opt", "gpt_neox")
QUICK_TYPES = ("llama", "gpt2")


def run(executor: str, population: Path, on: str, db: Path) -> dict[str, Any]:
    """One sweep; its grades per cell, wall time and (for Ray) the cluster's start-up."""
    from bakeoff import api

    said: list[str] = []
    start = time.perf_counter()
    found = api.sweep(str(population), on, db=db, timing="none", executor=executor, status=said.append)
    wall = time.perf_counter() - start
    startup = 0.0
    for line in said:
        if match := re.match(r"ray: local cluster started in ([\d.]+) s", line):
            startup = float(match.group(1))
    cells = {f"{c.workload} on {c.target}": (c.grade, c.category) for c in found.cells}
    return {"executor": executor, "wall_s": wall, "startup_s": startup, "cells": cells}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--types", default=None, help="comma-separated model types (default: six)")
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK_TYPES)}")
    parser.add_argument(
        "--workload", action="append", default=[], help="a workload spec instead of the arch: types (repeatable)"
    )
    parser.add_argument("--on", default="cpu", help="targets (default: cpu)")
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    types = args.types.split(",") if args.types else list(QUICK_TYPES if args.quick else TYPES)
    with tempfile.TemporaryDirectory(prefix="bakeoff-sweep-ray-") as tmp:
        population = Path(tmp) / "population.txt"
        specs = args.workload or [f"arch:{t}" for t in types]
        population.write_text("\n".join(specs) + "\n", encoding="utf-8")
        local = run("local", population, args.on, Path(tmp) / "local.db")
        ray = run("ray", population, args.on, Path(tmp) / "ray.db")
    cells = len(local["cells"])
    same = local["cells"] == ray["cells"]
    per_cell = (ray["wall_s"] - ray["startup_s"] - local["wall_s"]) / max(cells, 1)
    kind = "given" if args.workload else "arch:"
    print(f"population: {len(specs)} {kind} workload(s) on {args.on} ({cells} cells), timing none")
    print(f"identical grades and categories: {'yes' if same else 'NO'}")
    for result in (local, ray):
        grades = sorted({str(g) for g, _ in result["cells"].values()})
        print(f"{result['executor']:>5}: wall {result['wall_s']:.1f} s; grades {', '.join(grades)}")
    print(f"ray start-up: {ray['startup_s']:.1f} s; overhead per cell beyond it: {per_cell:+.2f} s")
    if not same:
        for key in sorted(local["cells"]):
            if local["cells"][key] != ray["cells"].get(key):
                print(f"  differs: {key}: local {local['cells'][key]} ray {ray['cells'].get(key)}")
    if args.json:
        figures = {"workloads": specs, "on": args.on, "identical": same, "overhead_per_cell_s": per_cell}
        figures |= {r["executor"]: {k: v for k, v in r.items() if k != "cells"} for r in (local, ray)}
        Path(args.json).write_text(json.dumps(figures, indent=2), encoding="utf-8")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
