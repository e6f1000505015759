"""Does bakeoff's latency agree with torch.utils.benchmark on the same model, in one process?

Two statistics, each compared with its own kind, because they differ under load (a block mean
spreads a stall over its block; a per-call median ignores it):

* **per-call median**: bakeoff's p50 of its raw samples (one synchronised call per sample)
  against the median of torch's single-call ``Timer.timeit(1)`` measurements;
* **median of block means**: torch's ``Timer.blocked_autorange().median`` (each block the mean
  of ``number_per_run`` calls) against bakeoff's samples cut into blocks of that same size,
  each block averaged, the median taken.

The tools run in alternating order (bakeoff first in even rounds, torch first in odd ones), so
drift in machine speed and warm caches favour neither. A ratio near 1.00 means bakeoff's timing
loop adds nothing material at this scale. It also prints bakeoff's own per-sample overhead: the
p50 of timing a function that does nothing, which bounds what the loop adds to every sample.

Usage: .venv/bin/python benchmarks/timing_fidelity.py [--rounds 5] [--seconds 1.0] [--quick] [WORKLOAD ...]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.utils.benchmark as tb

from bakeoff.measure.timing import TimingSettings, time_callable
from bakeoff.stats import percentile
from bakeoff.target.execute import prepare, synchronizer
from bakeoff.target.spec import Target
from bakeoff.workload.registry import build_workload

DEFAULT_WORKLOADS = ["arch:llama", "arch:llama?layers=4&hidden=256&intermediate=512&seq=64", "arch:bert"]
QUICK_WORKLOADS = ["arch:llama?layers=1&hidden=32&seq=8"]


def block_means(samples: Sequence[float], size: int) -> list[float]:
    """Consecutive blocks of ``size`` samples (the last, shorter one dropped unless it is the only one), averaged."""
    size = max(1, size)
    blocks = [samples[i : i + size] for i in range(0, len(samples), size)]
    full = [b for b in blocks if len(b) == size] or blocks[:1]
    return [sum(b) / len(b) for b in full]


def bakeoff_samples(fn: Callable[[], Any], sync: Callable[[], None], seconds: float) -> list[float]:
    return list(time_callable(fn, sync, TimingSettings(min_samples=30, min_seconds=seconds)).samples_s)


def torch_round(fn: Callable[[], Any], seconds: float) -> tuple[list[float], float, int]:
    """Per-call times from ``timeit(1)``, then ``blocked_autorange``'s median of block means and block size."""
    timer = tb.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    calls: list[float] = []
    deadline = time.perf_counter() + seconds
    while len(calls) < 30 or time.perf_counter() < deadline:
        calls.append(timer.timeit(1).median)
    blocked = timer.blocked_autorange(min_run_time=seconds)
    return calls, blocked.median, blocked.number_per_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="*", default=None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0, help="timing per round, tool and statistic")
    parser.add_argument("--quick", action="store_true", help="one small model, two short rounds (a smoke test)")
    if parser.parse_args().quick:  # smaller defaults; options given still win
        parser.set_defaults(rounds=2, seconds=0.05)
    args = parser.parse_args()
    workloads = args.workloads or (QUICK_WORKLOADS if args.quick else DEFAULT_WORKLOADS)
    torch.set_num_threads(1)
    target = Target("cpu")
    sync = synchronizer(target)

    overhead = time_callable(lambda: None, sync, TimingSettings(min_samples=1000, min_seconds=args.seconds / 2))
    print(
        f"bakeoff per-sample overhead (empty callable): p50 {percentile(overhead.samples_s, 50) * 1e6:.2f} us, "
        f"{len(overhead.samples_s)} samples"
    )
    print(
        f"{'workload':58} {'per-call p50 ms':>28} {'median of block means ms':>32}  per-round per-call ratios\n"
        f"{'':58} {'bakeoff':>9} {'torch':>9} {'ratio':>8} {'bakeoff':>9} {'torch':>9} {'ratio':>8} {'block':>5}"
    )
    for spec in workloads:
        prepared = prepare(build_workload(spec), target)
        per_call, blocked, ratios = ([], []), ([], []), []
        with torch.no_grad():
            for index in range(args.rounds):
                if index % 2 == 0:
                    ours = bakeoff_samples(prepared, sync, args.seconds)
                    calls, theirs_blocked, size = torch_round(prepared, args.seconds)
                else:
                    calls, theirs_blocked, size = torch_round(prepared, args.seconds)
                    ours = bakeoff_samples(prepared, sync, args.seconds)
                a, b = percentile(ours, 50) * 1e3, percentile(calls, 50) * 1e3
                per_call[0].append(a)
                per_call[1].append(b)
                ratios.append(a / b)
                blocked[0].append(statistics.median(block_means(ours, size)) * 1e3)
                blocked[1].append(theirs_blocked * 1e3)
        ours_pc, theirs_pc = statistics.median(per_call[0]), statistics.median(per_call[1])
        ours_bm, theirs_bm = statistics.median(blocked[0]), statistics.median(blocked[1])
        print(
            f"{spec:58} {ours_pc:9.4f} {theirs_pc:9.4f} {ours_pc / theirs_pc:8.3f} "
            f"{ours_bm:9.4f} {theirs_bm:9.4f} {ours_bm / theirs_bm:8.3f} {size:5}  "
            + " ".join(f"{r:.3f}" for r in ratios)
        )


if __name__ == "__main__":
    main()
