"""The ladder of world sizes: for each, a :class:`~bakeoff.distributed.ranks.RankGroup` runs the
collectives check, and the ranks' figures become one :class:`~bakeoff.scenarios.dist.WorldRun`
(each call's latency is the last-entering rank's; a cell's largest error the worst rank's). A world
size that fails, hangs or errs does not stop the ladder: "works at 2, hangs at 8" is the finding."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from bakeoff.distributed.collectives import CollectivesJob, elements
from bakeoff.distributed.ranks import RANK_PRELOAD, RankGroup, RanksEnded, rank_server
from bakeoff.launch.forkserver import ForkServer
from bakeoff.scenarios.dist import CollectiveCell, DistResult, WorldRun, busbw_factor, steps_words, world_verdict
from bakeoff.stats import percentile

__all__ = ["ONE_RANK_PER_DEVICE", "backend_for", "check_collectives", "check_training", "shared_device_refusal"]

#: Process-group backends that refuse two ranks on one device: NCCL ends a group whose ranks share
#: a GPU with "Duplicate GPU detected" (ncclInvalidUsage) at its first collective.
ONE_RANK_PER_DEVICE = frozenset({"nccl"})

#: What a training check's fork server imports beyond PyTorch: the workloads' builders (the
#: golden run and every rank build the model) and DDP's and FSDP2's modules; with it, what the
#: workload's own build imports (:func:`~bakeoff.workload.base.preload_for`: an architecture's
#: configuration and modeling modules), once rather than in every rank.
TRAINING_PRELOAD = ("bakeoff.workload.registry", "transformers", "torch.nn.parallel", "torch.distributed.fsdp")


def backend_for(device: str) -> str | None:
    """The process-group backend PyTorch names for ``device`` (gloo for the CPU, nccl for CUDA,
    the one a plugin registered for its device); None when it names none, or this PyTorch has no
    ``torch.distributed``."""
    import torch.distributed as dist

    from bakeoff.target.plugins import load_plugins

    load_plugins()
    if not dist.is_available():
        return None
    try:
        return str(dist.get_default_backend_for_device(device))
    except (ValueError, RuntimeError, KeyError):
        return None


def shared_device_refusal(target: Any, worlds: Sequence[int], backend: str) -> str | None:
    """Why the largest of ``worlds`` cannot run on ``target`` here with ``backend``, a backend that
    puts one rank on each device (:data:`ONE_RANK_PER_DEVICE`), where the ranks would share one
    (the target names one device, or this machine has fewer than ranks); None when they need not."""
    largest = max(worlds, default=1)
    if backend not in ONE_RANK_PER_DEVICE or target.device == "cpu" or largest < 2:
        return None
    if target.index is not None:
        return f"{backend} cannot put two ranks on one device, and {target.spec} names one device for {largest} ranks"
    from bakeoff.target.detect import device_status

    count = device_status(target.device).count
    if count >= largest:
        return None
    return (f"{backend} cannot put two ranks on one device, and this machine has {count} {target.device} "
            f"device(s) for {largest} ranks")  # fmt: skip


def check_collectives(
    target: Any, settings: dict[str, Any], progress: Callable[[str], None] | None = None
) -> DistResult:
    """Every world size of ``settings["ranks"]`` in turn (see the module docstring)."""
    worlds = []
    with rank_server() as server:
        for world in settings["ranks"]:
            if progress is not None:
                progress(f"{world} ranks on {target.spec}: collectives")
            worlds.append(_world(target, world, settings, backend_for(target.device) or "", server))
    notes: tuple[str, ...] = ()
    if any(w.cells for w in worlds):  # about the table of calls: none where every world size failed before it
        notes = ("each call's latency is the time of the rank that entered it last (the others' include waiting "
                 "for it); bus bandwidth from the median call by nccl-tests' factors; ranks meet through a file "
                 "store and run one thread each",)  # fmt: skip
        calls = settings["iterations"]
        if calls < 100:
            notes += (f"p99 of {calls} calls is close to the slowest one" if calls > 1 else "p99 is the one call",)
        notes += rounded_sizes(settings)
    return DistResult("collectives", target.spec, "collectives", tuple(worlds), notes)


def rounded_sizes(settings: dict[str, Any]) -> tuple[str, ...]:
    """A note per world size whose messages are not the sizes asked for: each rank holds a whole
    number of elements, the same on every rank, so a size is rounded down to a multiple of the
    ranks' elements (64 B of float32 at 3 ranks: 60 B)."""
    import torch

    notes = []
    for world in settings["ranks"]:
        moved = []
        for dtype in settings["dtypes"]:
            itemsize = torch.finfo(getattr(torch, dtype)).bits // 8
            for size in settings["sizes"]:
                held = elements("all_reduce_sum", size, itemsize, world) * itemsize
                if held != size:
                    moved.append(f"{size:,} B {dtype} -> {held:,} B")
        if moved:
            notes.append(f"at {world} ranks a message holds a whole number of elements per rank: {', '.join(moved)}")
    return tuple(notes)


def _world(target: Any, world: int, settings: dict[str, Any], backend: str, server: ForkServer | None) -> WorldRun:
    began = time.monotonic()
    group = RankGroup(world, server=server)
    jobs = [
        CollectivesJob(
            target,
            rank,
            world,
            group.rendezvous,
            tuple(settings["sizes"]),
            tuple(settings["dtypes"]),
            settings["iterations"],
            pg_timeout_s=settings["hang_s"] * 4 + 60,
        )
        for rank in range(world)
    ]
    ended = group.run(jobs, settings["timeout_s"], settings["hang_s"])
    return world_verdict(_combined(ended, world, round(time.monotonic() - began, 2), backend))


def _combined(ended: RanksEnded, world: int, seconds: float, backend: str) -> WorldRun:
    values = [o.value if o is not None and o.ok else None for o in ended.outcomes]
    first = next((v for v in values if v is not None), None)
    backend = first["backend"] if first else backend  # what the ranks ran, else what PyTorch names
    devices = tuple(v["device"] if v else "?" for v in values)
    stopped = ended.stopped(world, backend, seconds, devices=devices)
    if stopped is not None:
        return stopped
    startup = tuple(ended.startup_s)
    cells = tuple(_cell([v["cells"][i] for v in values], world) for i in range(len(first["cells"])))  # type: ignore[index]
    return WorldRun(world, "pass", backend=backend, devices=devices, cells=cells, startup_s=startup, seconds=seconds)


def _cell(per_rank: list[dict[str, Any]], world: int) -> CollectiveCell:
    head = per_rank[0]
    op, dtype, size = head["op"], head["dtype"], head["size"]
    worst = max(range(world), key=lambda r: per_rank[r]["max_error"])
    # each call as the rank that entered it last timed it: every other rank's time holds its wait
    # for that one (each rank checks the previous call's result between calls, untimed, and the
    # ranks drift apart by it)
    calls = [min(column) for column in zip(*(c["samples_us"] for c in per_rank), strict=False)]
    p50 = percentile(calls, 50) if calls else None
    p99 = percentile(calls, 99) if calls else None
    algbw = size / (p50 * 1e-6) / 1e9 if p50 and op != "barrier" else None
    factor = busbw_factor(op, world)
    return CollectiveCell(
        op, dtype, size, "pass",
        max_error=per_rank[worst]["max_error"], tolerance=head["tolerance"],
        worst_rank=worst if per_rank[worst]["max_error"] > 0 else None, detail=per_rank[worst]["detail"],
        p50_us=p50, p99_us=p99, algbw_gbs=algbw,
        busbw_gbs=algbw * factor if algbw is not None and factor is not None else None,
        iterations=len(calls),
    )  # fmt: skip


def check_training(
    target: Any, workload: str, settings: dict[str, Any], progress: Callable[[str], None] | None = None
) -> DistResult:
    """DDP and/or FSDP2 parity of ``workload`` at every world size of ``settings["ranks"]`` in turn
    (each of ``settings["modes"]``): the golden
    (one float64 process on the global batch), the same job on the CPU with gloo and on the
    target (:mod:`bakeoff.distributed.parity`)."""
    from dataclasses import replace

    from bakeoff.distributed.parity import training_world

    reference = replace(target, device="cpu", index=None)
    worlds = []
    from bakeoff.workload.base import parse_workload, preload_for

    with rank_server((*RANK_PRELOAD, *TRAINING_PRELOAD, *preload_for(parse_workload(workload)))) as server:
        for world in settings["ranks"]:
            for mode in settings["modes"]:
                if progress is not None:
                    steps = steps_words(settings["steps"], mode.upper())
                    progress(f"{world} ranks on {target.spec}: {steps} of {workload}")
                backend = backend_for(target.device) or ""
                worlds.append(training_world(target, reference, workload, world, settings, backend, mode, server))
    notes = (
        f"{steps_words(settings['steps'], 'SGD')} (lr {settings['lr']:g}); rank r trains on batch k*N+r at step k, "
        "the golden on their concatenation in float64; the reference is the same job on the CPU with gloo",
        "judged by the training check's band around the golden without its local re-run of a step: a model whose "
        "training amplifies rounding can leave it (docs/dist.md)",
    )
    return DistResult(workload, target.spec, ",".join(settings["modes"]), tuple(worlds), notes)
