"""How much does ``bakeoff exec``'s whole-script audit cost, on a real training script?

Runs ``bakeoff exec`` on the CUDA-style training script of the tests
(``tests/fixtures/scripts/train_cuda.py``, a small model, a loss per step) with ``--repeats``:
each target's first run is audited (every ATen op recorded, module hooks), and the repeats run
the same script without the audit. It prints, per target and step count, the audited run's wall
time, the median of the clean runs, their ratio (the audit's overhead on this script, measured
in the same run), and the seconds the audit says it spent recording ops. The reference's first
run is not audited: its first-run / clean ratio is the control (what a first run costs anyway).

Usage: .venv/bin/python benchmarks/exec_audit_overhead.py [--on emu] [--steps 30 300]
       [--repeats 5] [--quick]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
from pathlib import Path

from bakeoff.api import exec_script

SCRIPT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "scripts" / "train_cuda.py"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--on", default="emu", help="target devices (emu: the bundled test device)")
    parser.add_argument("--steps", type=int, nargs="+", default=[30, 300])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="3 steps, 2 repeats (a smoke test)")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.repeats = [3], 2
    if "emu" in args.on.split(","):
        os.environ.setdefault("BAKEOFF_EMU", "1")  # the bundled test device, in this process and its runs
    print(f"{'steps':>6} {'target':<8} {'first run':>10} {'clean p50':>10} {'ratio':>7} {'audit says':>11}")
    for steps in args.steps:
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copy(SCRIPT, Path(tmp) / SCRIPT.name)
            here = os.getcwd()
            os.chdir(tmp)
            try:
                run = exec_script(
                    SCRIPT.name, ["--steps", str(steps)], on=args.on, db=Path(tmp) / "b.db", repeats=args.repeats
                )
            finally:
                os.chdir(here)
        for result in run.results:
            timing = (result.conditions or {}).get("timing") or {}
            if result.status != "ok" or result.latency is None or not timing.get("runs"):
                print(f"{steps:>6} {result.target.spec:<8} {result.status}: {result.reason or result.error}")
                continue
            first_s = timing.get("first_run_s")
            clean_ms = statistics.median(result.latency.samples_ms)
            placement = result.placement
            spent = ((placement.signals.get("script") or {}).get("audit_s")) if placement is not None else None
            ratio = f"{first_s * 1e3 / clean_ms:.2f}x" if first_s is not None else "-"
            said = f"{spent:.3f} s" if spent is not None else "not audited"
            first_text = f"{first_s:.3f} s" if first_s is not None else "-"
            print(f"{steps:>6} {result.target.spec:<8} {first_text:>10} {clean_ms / 1e3:>8.3f} s {ratio:>7} {said:>11}")


if __name__ == "__main__":
    main()
