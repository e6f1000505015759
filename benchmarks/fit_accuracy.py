"""How close ``bakeoff fit``'s prediction is to the device, and how long a map takes.

Accuracy: for the tiny Llama and GPT-2, inference and training (two AdamW steps), each point's
peak is predicted under fake tensors on the test device's type and then measured on the test
device, whose allocator is exact (``max_memory_allocated`` counts every byte a tensor holds):
the error of the prediction before any calibration, per point, and the largest per mode.

Speed: the whole map of 64 points (8 batch sizes x 8 lengths) of the tiny Llama predicted on the
host, against the reference measured in the same run: running the same 64 steps for real on the
test device (what "run it and see" costs, without its out-of-memory failures).

The edge: a fit with its probes at a capacity the map crosses; the edge it reports is measured
on the device, and so is the first batch beyond it: the first must fit, the second must not.

Usage: .venv/bin/python benchmarks/fit_accuracy.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def _points(quick: bool) -> list[tuple[int, int]]:
    return [(1, 64), (8, 128)] if quick else [(1, 64), (4, 128), (8, 256), (16, 512), (32, 256)]


def accuracy(quick: bool) -> None:
    from bakeoff.fit.predict import predict_points
    from bakeoff.fit.probe import Probe
    from bakeoff.target.spec import parse_target

    target = parse_target("emu", extra_devices=("emu",))
    workloads = ["arch:llama"] if quick else ["arch:llama", "arch:gpt2"]
    print(f"{'workload':<12} {'mode':<10} {'point':>10} {'predicted':>12} {'measured':>12} {'error':>8}")
    worst = {"inference": 0.0, "training": 0.0}
    for spec in workloads:
        for training in (False, True):
            mode = "training" if training else "inference"
            points = _points(quick)
            predicted = predict_points(spec, points, device="emu", training=training)
            for (batch, seq), guess in zip(points, predicted, strict=True):
                measured = Probe(spec, target, batch, seq, training).run()["peak"]
                error = guess.peak / measured - 1
                worst[mode] = max(worst[mode], abs(error))
                point = f"{batch}x{seq}"
                print(f"{spec:<12} {mode:<10} {point:>10} {guess.peak:>12,} {measured:>12,} {error:>+8.2%}")
    print(f"largest error before calibration: inference {worst['inference']:.2%}, training {worst['training']:.2%}")


def speed(quick: bool) -> None:
    from bakeoff.fit.predict import predict_points
    from bakeoff.fit.probe import Probe
    from bakeoff.target.spec import parse_target

    sizes = [1, 2] if quick else [1, 2, 4, 8, 16, 32, 64, 128]
    lengths = [16, 32] if quick else [4, 8, 16, 32, 64, 128, 256, 512]
    points = [(b, s) for s in lengths for b in sizes]
    started = time.perf_counter()
    predict_points("arch:llama", points, device="emu")
    predicted_s = time.perf_counter() - started
    target = parse_target("emu", extra_devices=("emu",))
    started = time.perf_counter()
    for batch, seq in points:
        Probe("arch:llama", target, batch, seq).run()
    measured_s = time.perf_counter() - started
    print(
        f"map of {len(points)} points: predicted in {predicted_s:.1f} s on the host; running them on the device "
        f"{measured_s:.1f} s ({predicted_s / measured_s:.2f}x of it)"
    )


def edge(quick: bool) -> None:
    from bakeoff.fit.probe import Probe
    from bakeoff.fit.run import fit_workload
    from bakeoff.target.spec import parse_target

    target = parse_target("emu", extra_devices=("emu",))
    grid = "batch=1,2,...,16&seq=64" if quick else "batch=1,2,...,64&seq=128,256"
    capacity = 3 * 1024**2 if quick else 48 * 1024**2
    settings = {
        "grid": grid,
        "training": False,
        "optimizer": "adamw",
        "memory": capacity,
        "probes": not quick,  # quick: the prediction's own edge, measured below all the same
        "timeout_s": 600.0,
    }
    result = fit_workload("arch:llama", target, settings)
    for found in result.edges:
        if found.batch is None:
            continue
        inside = Probe("arch:llama", target, found.batch, found.seq).run()["peak"]
        beyond = Probe("arch:llama", target, found.beyond, found.seq).run()["peak"] if found.beyond else None
        shown = f"{beyond:,}" if beyond is not None else "none in the grid"
        holds = inside <= capacity and (beyond is None or beyond > capacity)
        print(
            f"edge at seq {found.seq}: batch {found.batch} measured {inside:,} of {capacity:,}; next batch {shown}: "
            f"{'the edge holds' if holds else 'THE EDGE IS WRONG'}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few points of the tiny Llama (for the suite)")
    args = parser.parse_args()
    os.environ["BAKEOFF_EMU"] = "1"  # the fit's probe processes find the test device too
    from bakeoff import emu

    emu.enable()
    accuracy(args.quick)
    speed(args.quick)
    edge(args.quick)
    sys.stdout.flush()
    os._exit(0)  # as bakeoff's own CLI ends: torch's device threads can abort an interpreter's normal exit


if __name__ == "__main__":
    main()
