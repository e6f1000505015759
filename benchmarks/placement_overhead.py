"""How much does the placement audit cost, relative to a plain forward pass?

The audit runs one extra forward pass under a TorchDispatchMode that records every ATen op
(devices, copies, syncs, FLOPs) with module hooks for attribution. This prints the median
time of a plain forward and of an audited forward of the same model on the CPU, measured in
alternating rounds, and their ratio. The audit runs once per target, after timing, so the
ratio is a one-off cost per target, not a distortion of the latency figures.

Usage: .venv/bin/python benchmarks/placement_overhead.py [--rounds 15] [--quick] [WORKLOAD ...]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from bakeoff.checks.placement import audit_module
from bakeoff.target.execute import prepare
from bakeoff.target.spec import Target
from bakeoff.workload.registry import build_workload

DEFAULT = [
    "arch:llama",
    "arch:llama?layers=4&hidden=256&heads=8&intermediate=1024&seq=128",
    "arch:bert?layers=6&hidden=384&heads=6&intermediate=1536&seq=128",
]
QUICK = ["arch:llama?layers=1&hidden=32&seq=8"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="*", default=None)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="one small model, two rounds (a smoke test)")
    if parser.parse_args().quick:  # smaller defaults; options given still win
        parser.set_defaults(rounds=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    target = Target("cpu")
    print(f"{'workload':68} {'params':>9} {'ops':>5} {'plain ms':>9} {'audited ms':>11} {'ratio':>6}")
    for spec in args.workloads or (QUICK if args.quick else DEFAULT):
        workload = build_workload(spec)
        prepared = prepare(workload, target)
        plain, audited = [], []
        ops = 0
        with torch.no_grad():
            prepared()
            for _ in range(args.rounds):
                start = time.perf_counter()
                prepared()
                plain.append(time.perf_counter() - start)
                start = time.perf_counter()
                recorder = audit_module(prepared.model, prepared, lambda d: d.type == "cpu")
                audited.append(time.perf_counter() - start)
                ops = recorder.ops_total
        a, b = statistics.median(plain) * 1e3, statistics.median(audited) * 1e3
        params = workload.details.get("parameters", 0)
        print(f"{spec:68} {params / 1e6:8.2f}M {ops:5d} {a:9.2f} {b:11.2f} {b / a:6.2f}")


if __name__ == "__main__":
    main()
