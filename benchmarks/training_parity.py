"""The training parity check: what it costs, and how wide its band is against the drift it sees.

For each seed of a tiny Llama (random weights, the causal-LM loss) and each clean target, the
check runs ``--steps`` AdamW steps in float64, in the reference dtype and on the target, and this
prints the wall time, the verdict, the target's weight error against float64 at the last step
beside the reference's own, the band it had to stay under (m x the reference's own error, grown,
+ 2 ulp), ``worst``: the largest error/band ratio of the free-running figures over all steps
(above 1: it drifted beyond the reference's own band), and ``local``: the largest error/allowed
ratio of the steps judged on their own inputs (above 1 would fail the target).
Every target here is clean, so every verdict should be pass or drift: a fail is a false alarm,
and the last line counts them.

Usage: .venv/bin/python benchmarks/training_parity.py [--seeds 5] [--steps 20]
       [--on emu,emu?dtype=bf16,cpu+aot_eager] [--quick]
"""

from __future__ import annotations

import argparse
import math
import os
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--on", default="emu,emu?dtype=bf16,cpu+aot_eager")
    parser.add_argument("--workload", default="arch:llama")
    parser.add_argument("--quick", action="store_true", help="1 seed, 3 steps, the test device only (a smoke test)")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.steps, args.on = 1, 3, "emu,emu?dtype=bf16"
    os.environ.setdefault("BAKEOFF_EMU", "1")
    from bakeoff import emu

    emu.enable()
    from bakeoff.analysis.trajectory import LOCAL_FIGURES
    from bakeoff.checks.base import CheckContext
    from bakeoff.checks.training import TrainingCheck
    from bakeoff.runner.job import TargetJob
    from bakeoff.target.spec import parse_target
    from bakeoff.workload.registry import build_workload

    head = ("seed", "target", "wall", "verdict", "target err", "ref err", "band", "worst", "local")
    print("{:>4} {:<18} {:>7} {:<8} {:>10} {:>9} {:>9} {:>7} {:>7}".format(*head))
    alarms = runs = 0
    for seed in range(args.seeds):
        spec = f"{args.workload}{'&' if '?' in args.workload else '?'}seed={seed}"
        built = build_workload(spec)
        for text in args.on.split(","):
            target = parse_target(text, extra_devices=("emu",))
            dtype = target.dtype or "float32"
            job = TargetJob(spec, target, built.fingerprint, None)
            context = CheckContext(job, target, None, {}, None, dtype, "float32", built.fingerprint)
            context.options = {"steps": args.steps, "optimizer": "adamw", "lr": 1e-3}
            started = time.perf_counter()
            value = TrainingCheck().run(context)
            wall = time.perf_counter() - started
            target_err, reference_err = value.curve[-1].weights[1::-1] if value.curve else (math.nan, math.nan)
            grown = max((s.weights[0] for s in value.curve), default=0.0)
            band = value.multiple * grown + value.floor
            local = max(
                (e / a for step in value.local for f in LOCAL_FIGURES for e, a in [step.check(f, dtype)] if a > 0),
                default=math.nan,
            )
            runs += 1
            alarms += value.verdict == "fail"
            print(
                f"{seed:>4} {text:<18} {wall:>6.2f}s {value.verdict:<8} "
                f"{target_err:>10.3g} {reference_err:>9.3g} "
                f"{band:>9.3g} {value.worst:>7.3g} {local:>7.3g}"
            )
    print(f"false alarms (fail on a clean target): {alarms} of {runs}")


if __name__ == "__main__":
    main()
