"""Do bakeoff dist's bandwidth figures agree with a plain torch.distributed loop, and what does a
two-rank check cost?

For each message size, ``bakeoff dist collectives`` on ``--on`` (the CPU with gloo by default;
``cuda`` with nccl, ``emu`` or a plugin's device with the backend PyTorch names for it) at
``--ranks`` measures the all_reduce's median call and its nccl-tests bus bandwidth; the reference:
a plain loop (``--ranks`` spawned processes on the same backend, a file rendezvous, one thread
each, one device per rank where the device type has as many as ranks, else its first, the device
synchronised after each call) that times the same number of all_reduce calls of the same size
one by one, each call as the rank that entered it last timed it (the lowest of the ranks' times:
bakeoff's own estimator), its median turned into bus bandwidth the same way. nccl cannot put two
ranks on one GPU: on ``cuda`` the ranks need a GPU each. The two are measured in turns,
``--rounds`` times (the check, then the loop), and the medians over the rounds compared:
printed, each round's ratio and the ratio of the medians (1 = the same figure). The plain loop
runs a second time in each round, and the same ratio between its two runs is printed: how far
two runs of one loop differ here, the floor under which a difference between bakeoff and the
loop is not a finding. Then the cost of a
check: each rank's start (forked from the check's warm process, to ready; the first world waits
for that process to import PyTorch) and the wall time of a two-rank collectives check and of a
two-rank DDP parity run of the tiny Llama (``--quick`` leaves the DDP run out). Last, the start
of ``bakeoff exec --nproc 2``'s ranks: a two-rank script that only meets its peer (gloo, a
barrier) run as one exec run does, forked from the warm process and as fresh interpreters, in
turns: the median wall time of each and their ratio.

Usage: .venv/bin/python benchmarks/dist_collectives.py [--on cpu] [--sizes 1MiB,4MiB] [--iterations 50]
       [--ranks 2] [--rounds 5] [--quick]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

import bakeoff
from bakeoff.scenarios.dist import busbw_factor
from bakeoff.stats import percentile


def _plain_rank(
    rank: int, world: int, rendezvous: str, sizes: list[int], iterations: int, device: str, out: object
) -> None:
    import torch
    import torch.distributed as dist

    if device != "cpu":  # a plugin's device and its backend, as the user's own code would load them
        from bakeoff.target.plugins import load_plugins

        load_plugins()
    torch.set_num_threads(1)
    module = getattr(torch, device, None) if device != "cpu" else None
    count = module.device_count() if module is not None and hasattr(module, "device_count") else 1
    index = rank if count >= world else 0
    if module is not None and hasattr(module, "set_device"):
        module.set_device(index)
    place = torch.device(device, index) if module is not None else torch.device("cpu")
    sync = module.synchronize if module is not None else (lambda: None)
    backend = dist.get_default_backend_for_device(device)
    dist.init_process_group(backend, init_method=f"file://{rendezvous}", rank=rank, world_size=world)
    times: dict[int, list[float]] = {}
    for size in sizes:
        source = torch.ones(size // 4, device=place)
        buffer = source.clone()
        times[size] = []
        for i in range(iterations + 1):
            buffer.copy_(source)
            sync()
            began = time.perf_counter()
            dist.all_reduce(buffer)
            sync()
            if i:
                times[size].append((time.perf_counter() - began) * 1e6)
    dist.barrier()
    dist.destroy_process_group()
    out.put((rank, times))  # type: ignore[attr-defined]


def plain_loop(world: int, sizes: list[int], iterations: int, device: str = "cpu") -> dict[int, float]:
    """Each size's median all_reduce call (us) in a plain loop on ``device`` and its backend, each
    call as the rank that entered it last timed it (the lowest of the ranks' times, as bakeoff
    takes it)."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    with tempfile.TemporaryDirectory() as here:
        rendezvous = str(Path(here) / "rdv")
        ranks = [ctx.Process(target=_plain_rank, args=(r, world, rendezvous, sizes, iterations, device, out))
                 for r in range(world)]  # fmt: skip
        for p in ranks:
            p.start()
        got = dict(out.get(timeout=300) for _ in ranks)
        for p in ranks:
            p.join(60)
    return {size: percentile([min(call) for call in zip(*(got[r][size] for r in got), strict=True)], 50)
            for size in sizes}  # fmt: skip


_MEET = """import torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
dist.destroy_process_group()
"""


def exec_rank_start(repeats: int) -> tuple[float, float]:
    """The median wall time (s) of one ``exec --nproc 2`` run of a script that only meets its
    peer: forked from the warm process, and as fresh interpreters, measured in turns."""
    from bakeoff.launch.forkserver import ForkServer
    from bakeoff.runner.script_run import run_environment, run_script
    from bakeoff.runner.script_worker import PRELOAD

    forked, fresh = [], []
    with tempfile.TemporaryDirectory() as here, ForkServer(PRELOAD, run_environment(0)) as server:
        work = Path(here)
        (work / "meet.py").write_text(_MEET)
        for _ in range(repeats):
            for server_or_none, times in ((server, forked), (None, fresh)):
                began = time.monotonic()
                ran = run_script(work / "meet.py", [], work, {}, files=False, server=server_or_none, nproc=2,
                                 timeout_s=120)  # fmt: skip
                times.append(time.monotonic() - began)
                assert ran.status == "ok", ran.error
    return percentile(forked, 50), percentile(fresh, 50)


def _all_reduce_p50(world: object) -> dict[int, float]:
    return {c.size: c.p50_us for c in world.cells if c.op == "all_reduce_sum" and c.p50_us is not None}  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--on", default="cpu", help="the device: cpu (gloo), cuda (nccl, a GPU per rank), emu...")
    parser.add_argument("--sizes", default="1MiB,4MiB")
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="one size, ten calls, one round, no DDP run")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.iterations, args.rounds = "256KiB", 10, 1
    if args.on.split(":")[0] == "emu":
        os.environ.setdefault("BAKEOFF_EMU", "1")  # the bundled test device, in this process and its ranks
    ours: dict[int, list[float]] = {}
    plain: dict[int, list[float]] = {}
    again: dict[int, list[float]] = {}  # the plain loop a second time: the comparison's own noise
    with tempfile.TemporaryDirectory() as here:
        db = Path(here) / "b.db"
        for _ in range(args.rounds):
            began = time.monotonic()
            found = bakeoff.dist("collectives", args.on, db=db, ranks=str(args.ranks), sizes=args.sizes,
                                 dtypes="float32", iterations=args.iterations)  # fmt: skip
            check_s = time.monotonic() - began
            (world,) = found.worlds
            if world.verdict != "pass":  # no figure to compare: say why, and stop
                sys.exit(f"bakeoff dist collectives on {args.on}: {world.verdict}: {world.reason or world.hang}")
            for size, p50 in _all_reduce_p50(world).items():
                ours.setdefault(size, []).append(p50)
            for runs in (plain, again):
                for size, p50 in plain_loop(args.ranks, sorted(ours), args.iterations, args.on).items():
                    runs.setdefault(size, []).append(p50)
        factor = busbw_factor("all_reduce_sum", args.ranks) or 1.0
        print(f"bakeoff dist collectives on {args.on} ({world.backend}) and a plain loop, {args.ranks} ranks, "
              f"all_reduce sum, "
              f"{args.iterations} calls per size, {args.rounds} rounds in turns")  # fmt: skip
        heads = ("size", "bakeoff p50 us", "plain p50 us", "bakeoff busbw", "plain busbw", "ratio", "each round")
        print(" ".join(f"{h:>{w}}" for h, w in zip(heads, (10, 15, 13, 14, 12, 6, 0), strict=True)))
        for size in sorted(ours):
            mine, theirs = percentile(ours[size], 50), percentile(plain[size], 50)
            mine_bw, their_bw = (size / (us * 1e-6) / 1e9 * factor for us in (mine, theirs))
            rounds = " ".join(f"{b / a:.2f}" for a, b in zip(ours[size], plain[size], strict=True))
            print(f"{size:>10} {mine:>15.1f} {theirs:>13.1f} {mine_bw:>14.4f} {their_bw:>12.4f} "
                  f"{mine_bw / their_bw:>6.3f} {rounds}")  # fmt: skip
        print("the plain loop against itself (run again after it in each round: how far two runs of the same loop "
              "differ here)")  # fmt: skip
        for size in sorted(ours):
            rounds = " ".join(f"{b / a:.2f}" for a, b in zip(plain[size], again[size], strict=True))
            ratio = percentile(again[size], 50) / percentile(plain[size], 50)
            print(f"{size:>10} plain / plain again, bus bandwidth: {ratio:.3f} (each round: {rounds})")
        starts = ", ".join(f"{s:.2f}" for s in world.startup_s)
        print(f"rank start (forked from the check's warm process, to ready; the first world waits for its import of "
              f"torch): {starts} s")  # fmt: skip
        print(f"collectives check, {args.ranks} ranks, every collective at {args.sizes}: {check_s:.1f} s wall "
              f"(the last round)")  # fmt: skip
        if not args.quick:
            began = time.monotonic()
            trained = bakeoff.dist("arch:llama", args.on, db=db, ranks="2", steps=3)
            print(f"DDP parity, tiny Llama, 2 ranks, 3 steps: {time.monotonic() - began:.1f} s wall "
                  f"({trained.verdict})")  # fmt: skip
    forked, fresh = exec_rank_start(1 if args.quick else 5)
    print(f"exec --nproc 2 run of a script that meets its peer: forked {forked:.2f} s, fresh {fresh:.2f} s "
          f"(forked / fresh {forked / fresh:.2f})")  # fmt: skip
    sys.stdout.flush()


if __name__ == "__main__":
    main()
