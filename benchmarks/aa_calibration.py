"""A/A calibration: how often does bakeoff call identical targets different, and which way?

Runs N trials of the same CPU target twice (by default ``--on cpu,cpu?threads=1``: the eager
reference and an identical target, each in its own worker process, timed in turns) and prints,
over the trials:

* the **false-positive rate**: the share of A/A ratios whose 95% interval excludes 1, for the
  interval bakeoff reports (the bootstrap widened by the between-process spread) and for the
  bootstrap over rounds alone. A calibrated interval gives about 5%;
* the **bias**: the geometric mean of the A/A ratios (reference p50 / target p50; 1.000 is none)
  and how often the reference was the slowest of the identical targets (1 in k by chance);
* the **spread**: the standard deviation of log(ratio) over the trials, the part the bootstrap
  explains, and the between-process spread per process that remains,
  ``sqrt(max(0, sd^2 - bootstrap^2) / 2)``: the value for ``--process-spread`` on this machine
  (also from the median absolute deviation and the median bootstrap width, which a few wild
  trials on a busy machine do not dominate);
* the **per-round first-sample excess**: each timing round's first sample over the median of its
  others (median and p90 over every round of every target; 1.00 means the first sample is like
  the rest), and beside it the **round-start penalty** the untimed warm call absorbed (its time
  over the same median). ``--round-warmup 0`` times each round's first call, as bakeoff did
  before every round opened with an untimed call.

Usage: .venv/bin/python benchmarks/aa_calibration.py [--trials 20] [--on cpu,cpu?threads=1]
       [--workload arch:llama] [--samples 30] [--min-time 0.5] [--round-warmup 1] [--quick]
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
from pathlib import Path

from bakeoff.analysis.compare import PROCESS_SPREAD
from bakeoff.measure.timing import TimingSettings
from bakeoff.results.values import TargetResult
from bakeoff.runner.trial import run_trial
from bakeoff.settings import TrialSettings
from bakeoff.stats import percentile
from bakeoff.store import Store
from bakeoff.target.spec import parse_targets

QUICK = {"trials": 2, "workload": "arch:llama?layers=1&hidden=32&seq=8", "samples": 10, "min_time": 0.05}


def round_starts(result: TargetResult) -> tuple[list[float], list[float], list[float]]:
    """Per round with at least three samples: its first sample over the median of the others,
    its second sample over the median of the others (the control: any sample's excess under the
    machine's noise), and its untimed warm call (``warm_ms``, where it had one) over the first's
    median."""
    samples = result.latency.samples_ms if result.latency else ()
    excess, control, penalty, at = [], [], [], 0
    for round_ in (result.conditions or {}).get("rounds", ()):
        block = samples[at : at + round_["samples"]]
        at += round_["samples"]
        if len(block) >= 3 and percentile(block[1:], 50) > 0:
            excess.append(block[0] / percentile(block[1:], 50))
            control.append(block[1] / percentile([block[0], *block[2:]], 50))
            if round_.get("warm_ms"):
                penalty.append(round_["warm_ms"] / percentile(block[1:], 50))
    return excess, control, penalty


def inside(low: float | None, high: float | None) -> bool:
    return low is not None and high is not None and low <= 1.0 <= high


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--on", default="cpu,cpu?threads=1", help="identical targets; the first is the reference")
    parser.add_argument("--workload", default="arch:llama")
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--min-time", type=float, default=0.5)
    parser.add_argument("--round-warmup", type=int, default=TimingSettings().round_warmup)
    parser.add_argument("--process-spread", type=float, default=PROCESS_SPREAD)
    parser.add_argument("--quick", action="store_true", help="two short trials of a smaller model (a smoke test)")
    if parser.parse_args().quick:  # smaller defaults; options given still win
        parser.set_defaults(**QUICK)
    args = parser.parse_args()
    targets = parse_targets([args.on])
    settings = TrialSettings(
        timing=TimingSettings(min_samples=args.samples, min_seconds=args.min_time, round_warmup=args.round_warmup),
        process_spread=args.process_spread,
    )
    print(
        f"{args.trials} A/A trial(s) of {args.workload} on {args.on}; {args.samples} samples, "
        f"{args.min_time:g} s per target; round warm-up {args.round_warmup}; process spread {args.process_spread:g}"
    )
    ratios, reported_in, bootstrap_in, boot_sd, slowest = [], [], [], [], 0
    excess, control, penalty = [], [], []
    with tempfile.TemporaryDirectory(prefix="bakeoff-aa-") as tmp:
        store = Store.open(Path(tmp) / "aa.db")
        for index in range(args.trials):
            run = run_trial(store, args.workload, targets, settings)
            ok = [r for r in run.results if r.status == "ok" and r.latency and r.latency.count]
            ref = next(r for r in ok if r.is_reference)
            slowest += ref.latency.p50_ms >= max(r.latency.p50_ms for r in ok)
            line = []
            for r in ok:
                starts = round_starts(r)
                excess.extend(starts[0])
                control.extend(starts[1])
                penalty.extend(starts[2])
                if r.is_reference or not r.speedup_ci:
                    continue
                ci = r.speedup_ci
                low, high = ci.get("bootstrap_low") or ci["low"], ci.get("bootstrap_high") or ci["high"]
                ratios.append(r.speedup)
                reported_in.append(inside(ci["low"], ci["high"]))
                bootstrap_in.append(inside(low, high))
                boot_sd.append((math.log(high) - math.log(low)) / (2 * 1.96))
                line.append(f"{r.speedup:.3f} [{ci['low']:.3f}, {ci['high']:.3f}] (bootstrap {low:.3f}-{high:.3f})")
            print(f"trial {index + 1:3}: ref p50 {ref.latency.p50_ms:.4f} ms; " + "; ".join(line), flush=True)
    logs = [math.log(r) for r in ratios]
    sd = statistics.stdev(logs) if len(logs) > 1 else float("nan")
    boot = math.sqrt(statistics.fmean(s * s for s in boot_sd)) if boot_sd else float("nan")
    between = math.sqrt(max(0.0, sd * sd - boot * boot) / 2) if len(logs) > 1 else float("nan")
    n = len(ratios)
    print(f"A/A ratios: {n}")
    print(f"false-positive rate (reported interval excludes 1): {1 - sum(reported_in) / n:.1%}")
    print(f"false-positive rate (bootstrap alone excludes 1): {1 - sum(bootstrap_in) / n:.1%}")
    bias = math.exp(statistics.fmean(logs))
    print(f"bias: geometric mean ratio {bias:.4f}; reference slowest in {slowest} of {args.trials}")
    print(f"spread: sd of log ratio {sd:.4f}; bootstrap explains {boot:.4f}; between-process spread {between:.4f}")
    if len(logs) > 1:  # a busy machine's outliers dominate the sd: the same from medians
        center = statistics.median(logs)
        robust = 1.4826 * statistics.median(abs(x - center) for x in logs)
        robust_boot = statistics.median(boot_sd)
        robust_between = math.sqrt(max(0.0, robust * robust - robust_boot * robust_boot) / 2)
        print(
            f"robust spread (1.4826 MAD): sd of log ratio {robust:.4f}; bootstrap explains {robust_boot:.4f}; "
            f"between-process spread {robust_between:.4f}"
        )
    if excess:
        print(
            f"per-round first-sample excess: median {statistics.median(excess):.3f}x, "
            f"p90 {percentile(excess, 90):.3f}x over {len(excess)} rounds; the second sample's (control): "
            f"median {statistics.median(control):.3f}x, p90 {percentile(control, 90):.3f}x"
        )
    if penalty:
        print(
            f"round-start penalty kept out of the samples (untimed warm call / round median): "
            f"median {statistics.median(penalty):.3f}x, p90 {percentile(penalty, 90):.3f}x"
        )


if __name__ == "__main__":
    main()
