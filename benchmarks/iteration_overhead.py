"""What does bakeoff itself add to each timed iteration?

Prints three figures, each against a reference measured in the same run:

1. The timing loop (one synchronised, clock-bracketed call per sample, as every round runs it):
   wall time per iteration of ``time_block`` over a plain ``for`` loop making the same calls,
   for an empty callable (the absolute cost in microseconds) and a tiny model's forward (the
   ratio a user sees; ``--workload``, by default a one-layer llama).
2. Interleaved worker rounds: for two isolated targets timed in turns, the parent's wall time
   for all rounds against the time the samples themselves cover; the difference, per round and
   per sample, is the cost of asking each worker for a round (pipe round trip, bookkeeping).
3. The server scenario's dispatch lateness: for requests that arrive at an idle server, how
   long after their arrival time the call starts (the sleep-then-spin wait's precision).

Usage: .venv/bin/python benchmarks/iteration_overhead.py [--calls 20000] [--rounds 5] [--samples 300]
       [--requests 1000] [--workload arch:llama?layers=1&hidden=32&seq=8] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from bakeoff.analysis.queueing import poisson_arrivals
from bakeoff.measure.clock import PerfClock
from bakeoff.measure.loops import serve
from bakeoff.measure.timing import TimingSettings, time_block
from bakeoff.runner.isolation import IsolatedSession
from bakeoff.runner.job import TargetJob
from bakeoff.stats import percentile
from bakeoff.target.execute import prepare, synchronizer
from bakeoff.target.spec import Target, parse_target
from bakeoff.workload.registry import build_workload

TINY = "arch:llama?layers=1&hidden=32&seq=8"


def _per_call_s(fn, calls: int, loop: str) -> float:
    sync, clock = synchronizer(Target("cpu")), PerfClock()
    start = time.perf_counter()
    if loop == "bakeoff":
        time_block(fn, sync, clock, calls, 0.0, 1e9)
    else:
        for _ in range(calls):
            fn()
    return (time.perf_counter() - start) / calls


def timing_loop(calls: int, rounds: int, workload: str) -> None:
    prepared = prepare(build_workload(workload), Target("cpu"))
    for name, fn, n in (("empty callable", lambda: None, calls), ("tiny model forward", prepared, calls // 20)):
        extra, ratios = [], []
        with torch.no_grad():
            for _ in range(rounds):  # alternate, so drift affects both loops alike
                ours, bare = _per_call_s(fn, n, "bakeoff"), _per_call_s(fn, n, "bare")
                extra.append((ours - bare) * 1e6)
                ratios.append(ours / bare)
        print(
            f"timing loop, {name:20}: +{statistics.median(extra):.2f} us per iteration over a bare loop, "
            f"ratio {statistics.median(ratios):.3f} (median of {rounds} alternating rounds, {n} calls each)"
        )


def worker_rounds(samples: int, workload: str) -> None:
    timing = TimingSettings(min_samples=samples, min_seconds=0.5)
    sessions = [
        IsolatedSession(
            TargetJob(workload, parse_target(spec), "", None, timing=timing, is_reference=spec == "cpu"), 600
        )
        for spec in ("cpu", "cpu?threads=1")
    ]
    for session in sessions:
        session.start()
    started, count = time.perf_counter(), 0
    active = list(sessions)
    while active:
        count += len(active)
        active = [s for s in active if not s.round()]
    wall = time.perf_counter() - started
    results = [s.finish() for s in sessions]
    timed = sum(sum(r.latency.samples_ms) for r in results) / 1e3
    n = sum(r.latency.count for r in results)
    print(
        f"interleaved rounds: {count} rounds, {n} samples; wall {wall:.3f} s for {timed:.3f} s of timed calls; "
        f"outside the calls {(wall - timed) / count * 1e3:.2f} ms per round, {(wall - timed) / n * 1e6:.1f} us "
        f"per sample ({timed / wall:.1%} of the wall time is measured work)"
    )


def server_dispatch(requests: int) -> None:
    arrivals = poisson_arrivals(500.0, requests, seed=0)
    run = serve([lambda: None] * requests, arrivals, lambda: None, 500.0)
    late = [(s - a) * 1e6 for s, a, d in zip(run.starts, run.arrivals, run.depths, strict=True) if d == 0]
    print(
        f"server dispatch: start - arrival at an idle server p50 {percentile(late, 50):.1f} us, "
        f"p99 {percentile(late, 99):.1f} us over {len(late)} requests (empty calls at 500/s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=300, help="per worker, in the interleaved rounds")
    parser.add_argument("--requests", type=int, default=1000, help="for the server dispatch")
    parser.add_argument("--workload", default=TINY, help="the model timed in the loop and in the worker rounds")
    parser.add_argument("--quick", action="store_true", help="a few hundred calls, one round (a smoke test)")
    if parser.parse_args().quick:  # smaller defaults; options given still win
        parser.set_defaults(calls=400, rounds=1, samples=20, requests=100)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"workload: {args.workload}")
    timing_loop(args.calls, args.rounds, args.workload)
    worker_rounds(samples=args.samples, workload=args.workload)
    server_dispatch(requests=args.requests)


if __name__ == "__main__":
    main()
