"""What localisation costs against a plain forward pass: wall time and peak memory.

Each measurement runs in a fresh process (peak memory is per process): the workload is built,
the peak resident set is reset, then either one plain forward pass runs (the first call, as the
localisation makes its runs once each) or the localisation of
a target whose activation kernel is seeded 1% wrong (the test device's wrong-result switch).
It prints the time, the peak memory above the built model, and how many module calls were
compared, for the tiny Llama and a mid-size one (4 layers x 256 hidden, 128 tokens).

Usage: .venv/bin/python benchmarks/localize_cost.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

WORKLOADS = ["arch:llama", "arch:llama?layers=4&hidden=256&intermediate=1024&heads=8&kv_heads=4&seq=128"]

CHILD = """
import json, sys, time
from bakeoff import emu
emu.enable(wrong={"aten::silu": 1.01})
import torch
from bakeoff.measure.memory import peak_rss_bytes, reset_peak_rss
from bakeoff.workload.registry import build_workload
spec, mode = sys.argv[1], sys.argv[2]
built = build_workload(spec)
reset_peak_rss()
base = peak_rss_bytes()
started = time.perf_counter()
calls = 0
if mode == "forward":
    with torch.no_grad():
        built()
else:
    from bakeoff.checks.base import CheckContext
    from bakeoff.checks.correctness import Correctness
    from bakeoff.checks.localization import LocalizationCheck
    from bakeoff.runner.job import TargetJob
    from bakeoff.target.spec import parse_target
    target = parse_target("emu", extra_devices=("emu",))
    context = CheckContext(TargetJob(spec, target, built.fingerprint, None), target, None, {}, None, "float32",
                           "float32", built.fingerprint)
    context.results["correctness"] = Correctness("fail")
    value = LocalizationCheck().run(context)
    calls = value.calls_compared
    assert value.origins and value.origins[0].module.endswith("layers.0.mlp.act_fn"), value
wall = time.perf_counter() - started
print(json.dumps({"wall": wall, "peak": peak_rss_bytes() - base, "calls": calls}))
"""


def measure(spec: str, mode: str) -> dict:
    env = {**os.environ, "BAKEOFF_EMU": "1"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, spec, mode], capture_output=True, text=True, env=env, timeout=900
    )
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the tiny Llama only (a smoke test)")
    args = parser.parse_args()
    print(f"{'workload':<40} {'forward':>9} {'localize':>9} {'ratio':>7} {'peak fwd':>9} {'peak loc':>9} {'calls':>6}")
    for spec in WORKLOADS[:1] if args.quick else WORKLOADS:
        forward, localize = measure(spec, "forward"), measure(spec, "localize")
        print(
            f"{spec[:40]:<40} {forward['wall']:>8.3f}s {localize['wall']:>8.3f}s "
            f"{localize['wall'] / max(forward['wall'], 1e-9):>6.1f}x {forward['peak'] / 2**20:>7.1f}MB "
            f"{localize['peak'] / 2**20:>7.1f}MB {localize['calls']:>6}"
        )


if __name__ == "__main__":
    main()
