"""DDP or FSDP2 parity at one world size: the golden (one float64 process on the global batch), the CPU's
gloo job and the target's job (:mod:`bakeoff.distributed.training`), combined step by step into
a :class:`~bakeoff.scenarios.dist.WorldRun` whose verdict :func:`~bakeoff.scenarios.dist.world_verdict`
judges: every rank's weights must equal rank 0's after every step (DDP applies one averaged
gradient everywhere: the first step, rank and parameter that differ are named), and rank 0's
trajectory must stay in the training check's band around the golden, with the CPU's gloo job as
the reference's noise (the parameter furthest off at the first step outside it is named)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bakeoff.distributed.ranks import RankGroup, RanksEnded
from bakeoff.distributed.training import DdpJob, GoldenJob
from bakeoff.errors import WorkloadError
from bakeoff.launch.launchers import FreshProcess
from bakeoff.launch.tempdirs import owned_tempdir
from bakeoff.scenarios.dist import Divergence, TrainingStep, WorldRun, world_verdict

__all__ = ["training_world"]


def _group(
    target: Any, spec: str, world: int, settings: dict[str, Any], weights: Path, mode: str, server: Any
) -> RanksEnded:
    """The job's ranks; rank r keeps its weights in ``weights`` + ``.r`` (DDP: rank 0 alone)."""
    group = RankGroup(world, server=server)
    jobs = [
        DdpJob(target, spec, rank, world, group.rendezvous, settings["steps"], settings["lr"],
               settings["hang_s"] * 4 + 60, f"{weights}.{rank}" if rank == 0 or mode == "fsdp" else None, mode)
        for rank in range(world)
    ]  # fmt: skip
    return group.run(jobs, settings["timeout_s"], settings["hang_s"])


def _weights(path: Path, values: list[dict[str, Any]], mode: str) -> dict[str, Any]:
    """Each step's whole weights (float64, flat, in parameter order): rank 0's for DDP, the ranks'
    shards put back together for FSDP (each parameter's shards in rank order)."""
    import torch
    from safetensors.torch import load_file

    if mode != "fsdp":
        return load_file(f"{path}.0")
    shards = [load_file(f"{path}.{rank}") for rank in range(len(values))]
    sizes = [v["shard_sizes"] for v in values]
    whole = {}
    for key in shards[0]:
        offsets = [0] * len(values)
        pieces = []
        for index in range(len(sizes[0])):
            for rank in range(len(values)):
                size = sizes[rank][index]
                pieces.append(shards[rank][key][offsets[rank] : offsets[rank] + size])
                offsets[rank] += size
        whole[key] = torch.cat(pieces)
    return whole


def _distance(a: Any, b: Any, scale: Any) -> float:
    import torch

    norm = float(torch.linalg.vector_norm(scale)) or 1.0
    return float(torch.linalg.vector_norm(a - b)) / norm


def _replicas(values: list[dict[str, Any]], names: list[str]) -> Divergence | None:
    """The first step, rank and parameter whose checksums differ from rank 0's."""
    for step in range(len(values[0]["steps"])):
        first = values[0]["steps"][step]["checksums"]
        for rank in range(1, len(values)):
            mine = values[rank]["steps"][step]["checksums"]
            for index, (a, b) in enumerate(zip(first, mine, strict=True)):
                if a != b:
                    return Divergence(step + 1, rank, names[index] if index < len(names) else f"#{index}", "rank 0")
    return None


def _furthest(golden: Any, reference: Any, target: Any, names: list[str], sizes: list[int]) -> str:
    """The parameter whose target weights are furthest from the golden's against how far the
    reference's are."""
    worst, name, at = -1.0, "", 0
    for parameter, size in zip(names, sizes, strict=True):
        part = slice(at, at + size)
        at += size
        ratio = _distance(target[part], golden[part], golden[part]) / (
            _distance(reference[part], golden[part], golden[part]) + 1e-12
        )
        if ratio > worst:
            worst, name = ratio, parameter
    return name


def training_world(
    target: Any,
    reference: Any,
    spec: str,
    world: int,
    settings: dict[str, Any],
    backend: str,
    mode: str,
    server: Any = None,
) -> WorldRun:
    """One world size of DDP or FSDP parity (see the module docstring); every process forked from
    ``server`` where one is given.

    Raises:
        WorkloadError: the workload does not build (the golden run said so): bad input, nothing
            to store.
    """
    import torch
    from safetensors.torch import load_file

    began = time.monotonic()
    here = owned_tempdir("dist")
    try:
        files = {name: here / f"{name}.safetensors" for name in ("golden", "reference", "target")}
        golden = FreshProcess(("torch",), who="the golden run", server=server).run(
            GoldenJob(spec, world, settings["steps"], settings["lr"], str(files["golden"])), settings["timeout_s"]
        )
        if not golden.ok:
            if golden.error is not None and golden.error.type in ("SpecError", "WorkloadError"):
                hint = "run `bakeoff workloads` to see what builds"
                raise WorkloadError(f"{spec}: {golden.error.message}", hint=hint)
            return WorldRun(world, "error", f"the golden run: {golden.reason()}"[:600], backend, mode=mode)
        ran = {}
        for which, on in (("reference", reference), ("target", target)):
            ended = _group(on, spec, world, settings, files[which], mode, server)
            stopped = ended.stopped(world, backend, round(time.monotonic() - began, 2), mode, f"the {which} job")
            if stopped is not None:
                return stopped
            ran[which] = ([o.value for o in ended.outcomes if o is not None], ended.startup_s)
        values, startup = ran["target"]
        ref_values, _ = ran["reference"]
        names, sizes = golden.value["names"], golden.value["sizes"]
        weights = {"golden": load_file(str(files["golden"]))}
        weights["reference"] = _weights(files["reference"], ref_values, mode)
        weights["target"] = _weights(files["target"], values, mode)
        steps = []
        for number in range(1, settings["steps"] + 1):
            key = f"step{number}"
            g, r, t = (weights[name][key] for name in ("golden", "reference", "target"))

            def row(figure: str, number: int = number) -> tuple[float, float, float]:
                mean = lambda vs: sum(v["steps"][number - 1][figure] for v in vs) / len(vs)  # noqa: E731
                return golden.value["steps"][number - 1][figure], mean(ref_values), mean(values)

            distances = (_distance(r, g, g), _distance(t, g, g), _distance(t, r, g))
            furthest = _furthest(g, r, t, names, sizes)
            steps.append(TrainingStep(number, row("loss"), row("grad_norm"), row("update_norm"), distances, furthest))
        divergence = _replicas(values, names) if mode == "ddp" else None  # FSDP's ranks hold shards, not replicas
        dtype = target.dtype or str(torch.get_default_dtype()).removeprefix("torch.")
        run = WorldRun(world, "pass", backend=backend, devices=tuple(v["device"] for v in values),
                       startup_s=tuple(startup), seconds=round(time.monotonic() - began, 2), mode=mode, dtype=dtype,
                       training=tuple(steps), divergence=divergence)  # fmt: skip
        return world_verdict(run)
    finally:
        import shutil

        shutil.rmtree(here, ignore_errors=True)
