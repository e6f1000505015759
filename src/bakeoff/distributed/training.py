"""The training steps of ``bakeoff dist WORKLOAD``: the same K optimiser steps taken three ways.

- the **golden**: one process on the CPU in float64 on the *global* batch (every rank's slice,
  concatenated), as PyTorch's own DDP tests compare against;
- the **reference**: the same N-rank DDP job on the CPU with gloo, in the target's dtype;
- the **target**: the N-rank DDP job on the target's device and process-group backend.

Every run builds the workload from its spec (the same seed: the same weights), and rank ``r`` at
step ``k`` trains on the recipe's batch ``k * N + r`` (:mod:`bakeoff.workload.training`), so the
golden's step ``k`` sees exactly the union of the ranks' batches. With a mean-reduced loss and
equal slices, DDP's averaged gradient is the global batch's gradient: the runs differ only by
rounding and by what the backend does.

Each run returns per step its loss (the ranks' mean), the global gradient norm after the
all-reduce, the update norm, and per parameter two checksums (float64 sum and sum of squares)
of the weights after the step; rank 0 of each run (and the golden) writes its weights after each
step to a safetensors file, from which the parent measures distances.

A rank records what it enters (:class:`Entered`): each step, and under DDP each gradient
all_reduce it issues (a comm hook, PyTorch's own ``allreduce_hook``: the gradient divided by the
world size, then summed, as DDP's built-in reduction does), so that a hang inside DDP's own
collectives is named by the step and bucket it waits in, not by its step alone; under FSDP2, each
all_gather and gradient reduce_scatter by its step and unit (:func:`record_fsdp`).

That hook is Python: gloo's worker thread, completing a bucket's all_reduce, releases the hook's
Python callback, for which it takes the GIL. Destroying the process group joins that thread, and
the rank whose job ended dropped DDP's reducer (the group's last holder) with the GIL held: when
the thread had not yet released the callback, both waited for ever (py-spy: the main thread in
``~ProcessGroupGloo``'s join under ``Reducer`` deallocation, the gloo thread in
``gil_scoped_acquire``). A rank's job therefore keeps its wrapped model (:data:`_KEPT`) until its
process ends (every rank process is killed after its one job).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from bakeoff.distributed.ranks import enter, finished, join_group, wait_for_every_rank

__all__ = ["DdpJob", "Entered", "GoldenJob", "global_batch", "record_fsdp"]

#: The wrapped models of this rank process's jobs, never released (see the module docstring).
_KEPT: list[Any] = []


class Entered:
    """A rank's count of what it entered, in its phase file (:func:`~bakeoff.distributed.ranks.enter`):
    each training step, and each DDP gradient all_reduce (:func:`recorded_all_reduce`)."""

    def __init__(self) -> None:
        self.seq = 0
        self.step = 0

    def set_up(self, what: str) -> None:
        self.seq += 1
        enter(self.seq, what)

    def step_begins(self, step: int) -> None:
        self.step, self.seq = step, self.seq + 1
        enter(self.seq, f"training step {step}")

    def all_reduce(self, bucket: int) -> None:
        self.seq += 1
        enter(self.seq, f"step {self.step}: DDP gradient all_reduce (bucket {bucket})")

    def fsdp(self, collective: str, unit: str) -> None:
        self.seq += 1
        enter(self.seq, f"step {self.step}: FSDP {collective} ({unit})")


def recorded_all_reduce(entered, bucket):
    """DDP's comm hook: record the bucket's all_reduce, then reduce it as DDP does. (Unannotated:
    DDP refuses a hook whose ``bucket`` is annotated as anything but ``GradBucket``, and under
    postponed annotations even that is a string.)"""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    entered.all_reduce(bucket.index())
    return allreduce_hook(None, bucket)


def global_batch(batches: list[tuple[tuple, dict]]) -> tuple[tuple, dict]:
    """The ranks' batches as one: every tensor concatenated along its first dimension, every
    other value taken as it is (it must be the same in each).

    Raises:
        ValueError: a non-tensor value that differs between the batches.
    """
    import torch

    def joined(values: list[Any]) -> Any:
        if isinstance(values[0], torch.Tensor):
            return torch.cat(values, dim=0)
        if any(v != values[0] for v in values[1:]):
            raise ValueError("the ranks' batches differ in a value that is not a tensor")
        return values[0]

    args = tuple(joined([b[0][i] for b in batches]) for i in range(len(batches[0][0])))
    kwargs = {key: joined([b[1][key] for b in batches]) for key in batches[0][1]}
    return args, kwargs


def _local(t: Any) -> Any:
    """A parameter's or gradient's values held by this process (an FSDP shard's own part)."""
    return t.to_local() if hasattr(t, "to_local") else t


def _host(t: Any) -> Any:
    import torch

    return _local(t).detach().to("cpu", torch.float64)


def _flat(params: list[Any]) -> Any:
    import torch

    return torch.cat([_host(p).flatten() for p in params])


def _checksums(params: list[Any]) -> list[list[float]]:
    out = []
    for p in params:
        host = _host(p)
        out.append([float(host.sum()), float(host.pow(2).sum())])
    return out


def _squares(tensors: list[Any]) -> float:
    return float(sum(float((t**2).sum()) for t in tensors)) if tensors else 0.0


@dataclass(frozen=True)
class _Steps:
    """What one run does at each step, shared by the golden and the ranks. ``summed`` adds a
    sum of squares over the ranks when each holds a shard (FSDP); the identity otherwise."""

    workload_spec: str
    steps: int
    lr: float

    def train(self, model: Any, params: list[Any], batch_of: Any, loss_of: Any, weights_file: str | None,
              entered: Entered | None = None, summed: Any = None) -> dict[str, Any]:  # fmt: skip
        import math

        import torch
        from safetensors.torch import save_file

        total = summed or (lambda x: x)
        optimizer = torch.optim.SGD(params, lr=self.lr)
        rows = []
        kept = {}
        for step in range(self.steps):
            if entered is not None:
                entered.step_begins(step + 1)
            args, kwargs = batch_of(step)
            optimizer.zero_grad(set_to_none=True)
            torch.manual_seed(1000 + step)
            loss = loss_of(model(*args, **kwargs), args, kwargs)
            loss.backward()
            grads = [_host(p.grad) for p in params if p.grad is not None]
            before = [_host(p).clone() for p in params]
            optimizer.step()
            update = [_host(p) - b for p, b in zip(params, before, strict=True)]
            norms = math.sqrt(total(_squares(grads))), math.sqrt(total(_squares(update)))
            rows.append({"loss": float(loss.detach().to("cpu", torch.float64)), "grad_norm": norms[0],
                         "update_norm": norms[1], "checksums": _checksums(params)})  # fmt: skip
            if weights_file is not None:
                kept[f"step{step + 1}"] = _flat(params).contiguous()
        if weights_file is not None:
            save_file(kept, weights_file)
        return {"steps": rows, "shard_sizes": [_local(p).numel() for p in params]}


def _built(spec: str) -> tuple[Any, Any]:
    from bakeoff.target.plugins import load_plugins
    from bakeoff.workload.registry import build_workload

    load_plugins()
    workload = build_workload(spec)
    workload.model.train()
    return workload, workload.training_recipe()


@dataclass(frozen=True)
class GoldenJob:
    """One process, float64, on the global batch of ``world`` ranks (see the module docstring)."""

    workload_spec: str
    world: int
    steps: int
    lr: float
    weights_file: str
    phase: str = "golden training"

    def run(self) -> dict[str, Any]:
        import torch

        from bakeoff.target.execute import move_tensors

        torch.set_num_threads(1)
        workload, recipe = _built(self.workload_spec)
        model = workload.model.to(torch.float64)
        params = [p for p in model.parameters() if p.requires_grad]

        def batch_of(step: int) -> tuple[tuple, dict]:
            batch = global_batch([recipe.batch(step * self.world + r) for r in range(self.world)])
            return move_tensors(batch, None, torch.float64)

        steps = _Steps(self.workload_spec, self.steps, self.lr)
        done = steps.train(model, params, batch_of, recipe.loss, self.weights_file)
        names = [n for n, p in model.named_parameters() if p.requires_grad]
        return {**done, "names": names, "sizes": [p.numel() for p in params], "loss_kind": recipe.kind}


def _unit(fsdp_params: Any) -> str:
    """The FSDP unit whose parameters ``fsdp_params`` are: their names' common prefix."""
    parts = [name.split(".")[:-1] for p in fsdp_params if (name := getattr(p, "_param_fqn", None))]
    common = []
    for level in zip(*parts, strict=False):
        if len(set(level)) != 1:
            break
        common.append(level[0])
    return ".".join(common) or "the root"


def record_fsdp(entered: Entered) -> None:
    """Record, in this rank, each FSDP2 all_gather and gradient reduce_scatter by its step and
    unit, by wrapping the two functions FSDP2's parameter groups call for them
    (``torch.distributed.fsdp._fully_shard._fsdp_param_group``); where they are not found (another
    PyTorch), a hang inside them is named by its step alone."""
    try:
        from torch.distributed.fsdp._fully_shard import _fsdp_param_group as group
    except ImportError:
        return
    for name, collective in (("foreach_all_gather", "all_gather"), ("foreach_reduce", "gradient reduce_scatter")):
        original = getattr(group, name, None)
        if original is None:
            continue

        def recorded(fsdp_params: Any, *args: Any, _original: Any = original, _what: str = collective, **kw: Any):
            entered.fsdp(_what, _unit(fsdp_params))
            return _original(fsdp_params, *args, **kw)

        setattr(group, name, recorded)


def _fully_sharded(model: Any, device: Any, world: int) -> Any:
    """``model`` under FSDP2: each block of every ``ModuleList`` (a transformer's layers) a unit
    of its own, then the root."""
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (world,))
    for module in list(model.modules()):
        if isinstance(module, nn.ModuleList):
            for block in module:
                if any(p.requires_grad for p in block.parameters()):
                    fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


@dataclass(frozen=True)
class DdpJob:
    """Rank ``rank`` of a ``world``-rank DDP (``mode`` ``ddp``: every rank a replica) or FSDP2
    (``fsdp``: every rank a shard) job of ``target`` (see the module docstring); ``weights_file``
    where the rank keeps its weights after each step (DDP: rank 0's; FSDP: every rank its shard)."""

    target: Any
    workload_spec: str
    rank: int
    world: int
    rendezvous: str
    steps: int
    lr: float
    pg_timeout_s: float
    weights_file: str | None = None
    mode: str = "ddp"
    phase: str = "distributed training"

    def run(self) -> dict[str, Any]:

        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        from bakeoff.target.execute import move_tensors

        workload, recipe = _built(self.workload_spec)
        device, backend = join_group(self.target, self.rank, self.world, self.rendezvous, self.pg_timeout_s)
        dtype = getattr(torch, self.target.dtype) if self.target.dtype else None
        entered = Entered()
        try:
            model = workload.model.to(device=device, dtype=dtype)
            summed = None
            if self.mode == "fsdp":
                entered.set_up("FSDP2 set-up (fully_shard)")
                wrapped = _fully_sharded(model, device, self.world)
                record_fsdp(entered)

                def summed(x: float) -> float:  # each rank holds a shard: the squares add up over the ranks
                    t = torch.tensor([x], dtype=torch.float64, device=device)
                    dist.all_reduce(t)
                    return float(t.cpu()[0])

            else:
                entered.set_up("DDP set-up (the weights checked and broadcast)")
                wrapped = DistributedDataParallel(model)
                wrapped.register_comm_hook(entered, recorded_all_reduce)
            _KEPT.append(wrapped)
            params = [p for p in model.parameters() if p.requires_grad]

            def batch_of(step: int) -> tuple[tuple, dict]:
                return move_tensors(recipe.batch(step * self.world + self.rank), device, dtype)

            began = time.monotonic()
            steps = _Steps(self.workload_spec, self.steps, self.lr)
            done = steps.train(wrapped, params, batch_of, recipe.loss, self.weights_file, entered, summed)
            finished(entered.seq)
            wait_for_every_rank(self.world)
        finally:
            dist.destroy_process_group()
        return {**done, "backend": backend, "device": str(device), "seconds": round(time.monotonic() - began, 3)}
