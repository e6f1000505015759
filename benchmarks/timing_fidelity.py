"""Does bakeoff's latency agree with torch.utils.benchmark on the same model, in one process?

Prints, per workload, bakeoff's median (the p50 of its raw samples) and torch.utils.benchmark's
median (``Timer.blocked_autorange``), measured in alternating rounds so that drift in machine
speed affects both alike, and the ratio bakeoff / torch. A ratio near 1.00 means bakeoff's
timing loop (one synchronised call per sample) adds nothing material at this scale.

It also prints bakeoff's own per-sample overhead: the p50 of timing a function that does
nothing, which bounds what the loop adds to every sample.

Usage: .venv/bin/python benchmarks/timing_fidelity.py [--rounds 5] [WORKLOAD ...]
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.utils.benchmark as tb

from bakeoff.analysis.stats import percentile
from bakeoff.measure.timing import TimingSettings, time_callable
from bakeoff.target.execute import prepare, synchronizer
from bakeoff.target.spec import Target
from bakeoff.workload.registry import build_workload

DEFAULT_WORKLOADS = ["arch:llama", "arch:llama?layers=4&hidden=256&intermediate=512&seq=64", "arch:bert"]


def bakeoff_median_ms(fn, sync, seconds: float) -> float:
    run = time_callable(fn, sync, TimingSettings(min_samples=30, min_seconds=seconds))
    return percentile(run.samples_s, 50) * 1e3


def torch_median_ms(fn, seconds: float) -> float:
    timer = tb.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=seconds).median * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="*", default=DEFAULT_WORKLOADS)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0, help="timing per round and tool")
    args = parser.parse_args()
    torch.set_num_threads(1)
    target = Target("cpu")
    sync = synchronizer(target)

    overhead = time_callable(lambda: None, sync, TimingSettings(min_samples=10_000, min_seconds=0.5))
    print(
        f"bakeoff per-sample overhead (empty callable): p50 {percentile(overhead.samples_s, 50) * 1e6:.2f} us, "
        f"{len(overhead.samples_s)} samples"
    )
    print(f"{'workload':58} {'bakeoff p50 ms':>15} {'torch median ms':>16} {'ratio':>7}  per-round ratios")
    for spec in args.workloads:
        prepared = prepare(build_workload(spec), target)
        with torch.no_grad():
            ratios, ours, theirs = [], [], []
            for _ in range(args.rounds):
                a = bakeoff_median_ms(prepared, sync, args.seconds)
                b = torch_median_ms(prepared, args.seconds)
                ours.append(a)
                theirs.append(b)
                ratios.append(a / b)
        print(
            f"{spec:58} {statistics.median(ours):15.4f} {statistics.median(theirs):16.4f} "
            f"{statistics.median(ratios):7.3f}  " + " ".join(f"{r:.3f}" for r in ratios)
        )


if __name__ == "__main__":
    main()
