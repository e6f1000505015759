"""Do bakeoff dist's bandwidth figures agree with a plain torch.distributed loop, and what does a
two-rank check cost?

For each message size, ``bakeoff dist collectives`` on the CPU (gloo) at ``--ranks`` measures the
all_reduce's median call and its nccl-tests bus bandwidth; the reference, measured in the same
run: a plain loop (``--ranks`` spawned processes, gloo, a file rendezvous, one thread each) that
times the same number of all_reduce calls of the same size one by one, the slowest rank's per
call, its median turned into bus bandwidth the same way. Printed: both, and their ratio (1 = the
same figure). Then the cost of a check: each rank's start (forked from the check's warm process, to ready; the
first world waits for that process to import PyTorch) and
the wall time of a two-rank collectives check and of a two-rank DDP parity run of the tiny Llama
(``--quick`` leaves the DDP run out). Last, the start of ``bakeoff exec --nproc 2``'s ranks: a
two-rank script that only meets its peer (gloo, a barrier) run as one exec run does, forked from
the warm process and as fresh interpreters, in turns: the median wall time of each and their ratio.

Usage: .venv/bin/python benchmarks/dist_collectives.py [--sizes 1MiB,4MiB] [--iterations 50] [--ranks 2] [--quick]
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

import bakeoff
from bakeoff.scenarios.dist import busbw_factor
from bakeoff.stats import percentile


def _plain_rank(rank: int, world: int, rendezvous: str, size: int, iterations: int, out: object) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world)
    source = torch.ones(size // 4)
    buffer = source.clone()
    times = []
    for i in range(iterations + 1):
        buffer.copy_(source)
        began = time.perf_counter()
        dist.all_reduce(buffer)
        if i:
            times.append((time.perf_counter() - began) * 1e6)
    dist.barrier()
    dist.destroy_process_group()
    out.put((rank, times))  # type: ignore[attr-defined]


def plain_loop(world: int, size: int, iterations: int) -> float:
    """The median all_reduce call (us), the slowest rank's per call, of a plain gloo loop."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    with tempfile.TemporaryDirectory() as here:
        ranks = [ctx.Process(target=_plain_rank, args=(r, world, str(Path(here) / "rdv"), size, iterations, out))
                 for r in range(world)]  # fmt: skip
        for p in ranks:
            p.start()
        got = dict(out.get(timeout=300) for _ in ranks)
        for p in ranks:
            p.join(60)
    calls = [max(column) for column in zip(*got.values(), strict=True)]
    return percentile(calls, 50)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1MiB,4MiB")
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="one size, few calls, no DDP run (a smoke test)")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.iterations = "256KiB", 10
    with tempfile.TemporaryDirectory() as here:
        db = Path(here) / "b.db"
        began = time.monotonic()
        found = bakeoff.dist("collectives", "cpu", db=db, ranks=str(args.ranks), sizes=args.sizes, dtypes="float32",
                             iterations=args.iterations)  # fmt: skip
        check_s = time.monotonic() - began
        (world,) = found.worlds
        print(f"bakeoff dist collectives on cpu (gloo), {args.ranks} ranks, {args.iterations} calls per size")
        heads = ("size", "bakeoff p50 us", "plain p50 us", "bakeoff busbw", "plain busbw", "ratio")
        print(" ".join(f"{h:>{w}}" for h, w in zip(heads, (10, 15, 13, 14, 12, 6), strict=True)))
        factor = busbw_factor("all_reduce_sum", args.ranks) or 1.0
        for cell in world.cells:
            if cell.op != "all_reduce_sum" or cell.p50_us is None:
                continue
            plain = plain_loop(args.ranks, cell.size, args.iterations)
            plain_bw = cell.size / (plain * 1e-6) / 1e9 * factor
            ratio = (cell.busbw_gbs or 0) / plain_bw
            print(f"{cell.size:>10} {cell.p50_us:>15.1f} {plain:>13.1f} {cell.busbw_gbs:>14.4f} {plain_bw:>12.4f} "
                  f"{ratio:>6.3f}")  # fmt: skip
        starts = ", ".join(f"{s:.2f}" for s in world.startup_s)
        print(f"rank start (forked from the check's warm process, to ready; the first world waits for its import of "
              f"torch): {starts} s")  # fmt: skip
        print(f"collectives check, {args.ranks} ranks, every collective at {args.sizes}: {check_s:.1f} s wall")
        if not args.quick:
            began = time.monotonic()
            trained = bakeoff.dist("arch:llama", "cpu", db=db, ranks="2", steps=3)
            print(f"DDP parity, tiny Llama, 2 ranks, 3 steps: {time.monotonic() - began:.1f} s wall "
                  f"({trained.verdict})")  # fmt: skip
    forked, fresh = exec_rank_start(1 if args.quick else 5)
    print(f"exec --nproc 2 run of a script that meets its peer: forked {forked:.2f} s, fresh {fresh:.2f} s "
          f"(forked / fresh {forked / fresh:.2f})")  # fmt: skip
    sys.stdout.flush()


if __name__ == "__main__":
    main()
