"""How many ``arch:`` architectures build tiny and run, and how long each takes.

Tries every model type of transformers' causal-LM mapping as ``arch:<type>`` with the default
options: build, then two forward passes under ``torch.no_grad`` in eval mode (the workload's own
inputs, and ``make_inputs(1, 8)`` for a second shape). Each type runs in one of two worker
processes with a per-type timeout; a type that crashes or hangs its worker is a result, and a
fresh worker takes over. Failures are grouped by reason, and each is marked expected when the
package's exception table lists it (``bakeoff.workload.tiny.known_failure``).

Usage:
    .venv/bin/python benchmarks/arch_coverage.py [--types llama,gpt2] [--quick] [--timeout 120]
        [--processes 2] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import time
from collections import defaultdict
from typing import Any

#: --quick: a handful of types from different families (plain, MLA, SSM hybrid, partial rotary).
QUICK_TYPES = ("llama", "gpt2", "deepseek_v3", "codegen", "bamba")


def try_type(model_type: str) -> dict[str, Any]:
    """Build ``arch:<model_type>`` and run two forwards; a plain dict, the error as data."""
    import torch

    from bakeoff.workload import build_workload

    start = time.perf_counter()
    stage = "build"
    try:
        workload = build_workload(f"arch:{model_type}")
        stage = "forward"
        with torch.no_grad():
            workload.model.eval()
            workload()
            if workload.make_inputs is not None:
                args, kwargs = workload.make_inputs(1, 8)
                workload.model(*args, **kwargs)
        return {
            "type": model_type,
            "ok": True,
            "seconds": time.perf_counter() - start,
            "fingerprint": workload.fingerprint,
            "parameters": workload.details["parameters"],
            "path": workload.details.get("shrink", ""),
        }
    except Exception as exc:  # any failure is a result
        cause = exc.__cause__ if stage == "build" and exc.__cause__ is not None else exc
        message = (str(cause).splitlines() or [""])[0][:160]
        return {
            "type": model_type,
            "ok": False,
            "seconds": time.perf_counter() - start,
            "error": f"{stage}: {type(cause).__name__}: {message}",
        }


def _worker(connection: Any) -> None:
    import torch

    torch.set_num_threads(1)  # two workers share two cores
    while True:
        model_type = connection.recv()
        if model_type is None:
            return
        connection.send(try_type(model_type))


def run_all(types: list[str], processes: int, timeout: float) -> list[dict[str, Any]]:
    """Try each type in a pool of worker processes; a hung or crashed worker is replaced."""
    context = multiprocessing.get_context("spawn")
    pending = list(reversed(types))
    results: list[dict[str, Any]] = []
    workers: list[dict[str, Any]] = []

    def start() -> dict[str, Any]:
        parent, child = context.Pipe()
        process = context.Process(target=_worker, args=(child,), daemon=True)
        process.start()
        return {"process": process, "pipe": parent, "type": None, "since": 0.0}

    def fail(worker: dict[str, Any], why: str) -> None:
        results.append(
            {"type": worker["type"], "ok": False, "seconds": time.monotonic() - worker["since"], "error": why}
        )
        worker["process"].kill()
        worker["process"].join()
        worker.update(start())

    workers = [start() for _ in range(max(1, min(processes, len(types))))]
    while pending or any(w["type"] for w in workers):
        for worker in workers:
            if worker["type"] is None and pending:
                worker["type"], worker["since"] = pending.pop(), time.monotonic()
                worker["pipe"].send(worker["type"])
            elif worker["type"] is not None:
                if worker["pipe"].poll(0.05):
                    try:
                        results.append(worker["pipe"].recv())
                    except EOFError:
                        fail(worker, f"crash: worker exited with code {worker['process'].exitcode}")
                    worker["type"] = None
                elif not worker["process"].is_alive():
                    fail(worker, f"crash: worker exited with code {worker['process'].exitcode}")
                    worker["type"] = None
                elif time.monotonic() - worker["since"] > timeout:
                    fail(worker, f"timeout: more than {timeout:g} s")
                    worker["type"] = None
    for worker in workers:
        worker["pipe"].send(None)
        worker["process"].join(timeout=10)
    return sorted(results, key=lambda r: r["type"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--types", help="comma-separated model types (default: every causal-LM type)")
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK_TYPES)}")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per type")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--json", help="write the per-type results here")
    options = parser.parse_args()

    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from bakeoff.workload.tiny import known_failure

    every = sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    types = QUICK_TYPES if options.quick else every
    if options.types:
        types = options.types.split(",")
    started = time.perf_counter()
    results = run_all(list(types), options.processes, options.timeout)
    wall = time.perf_counter() - started
    passed = [r for r in results if r["ok"]]
    print(f"transformers {transformers.__version__}; {len(every)} causal-LM model types, {len(types)} tried")
    print(f"built and ran (build + 2 forwards): {len(passed)} of {len(results)}")
    seconds = [r["seconds"] for r in results]
    print(f"time per type: median {statistics.median(seconds):.2f} s, max {max(seconds):.2f} s")
    print(f"total wall time: {wall:.1f} s on {options.processes} processes")
    groups: dict[str, list[str]] = defaultdict(list)
    for result in results:
        if not result["ok"]:
            groups[result["error"]].append(result["type"])
    expected = [r["type"] for r in results if not r["ok"] and known_failure(r["type"])]
    unexpected = [r["type"] for r in results if not r["ok"] and not known_failure(r["type"])]
    passing_listed = [r["type"] for r in passed if known_failure(r["type"])]
    print(f"failures: {len(results) - len(passed)} ({len(expected)} expected, {len(unexpected)} unexpected)")
    for error, names in sorted(groups.items(), key=lambda item: (-len(item[1]), item[0])):
        marks = ", ".join(f"{n}{'' if known_failure(n) else ' (unexpected)'}" for n in names)
        print(f"  {error}\n      {marks}")
    for name in expected:
        print(f"  expected {name}: {known_failure(name)}")
    if passing_listed:
        print(f"listed as expected failures but ran: {', '.join(passing_listed)}")
    if options.json:
        with open(options.json, "w") as handle:
            json.dump(results, handle, indent=1)


if __name__ == "__main__":
    main()
