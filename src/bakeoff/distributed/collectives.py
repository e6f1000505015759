"""One rank of the collectives check: every collective of :data:`~bakeoff.scenarios.dist.OPS`
at each dtype and message size, its result against its analytic value, and each call timed.

Each rank holds a rank-distinct ramp (element ``i`` of rank ``r``: ``1 + ((37 i + 101 r) mod
128) / 128``, exact in bfloat16, float16 and float32, using every mantissa bit bfloat16 has), so
the expected result of every collective is computed exactly, in float64, from what each rank
holds. A collective that only moves data (all_gather, broadcast, all_to_all) or picks (max) must
be exact; a sum may round: each of its ``world - 1`` additions by half a unit in the last place
of the result, so it is allowed ``world / 2`` units (an average half a unit more, for its
division). An error is measured in units of the dtype's spacing at the expected value.

A call is timed alone (the device synchronised after it), with the phase record, the input's
refill and the output's poisoning (NaN: a call that writes nothing is wrong) outside the timed
region; a warm call comes first, untimed. Every call's result is checked. The barrier is
checked by time: on the warm call the last rank enters it late, and every other rank must have
waited for it. A collective that raises ends the rank's job (its process group is not to
be trusted after it), naming the collective and its sequence number; a rank that made its last
collective waits for every other one before the group is torn down.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from bakeoff.distributed.ranks import enter, finished, join_group, wait_for_every_rank
from bakeoff.scenarios.dist import OPS, tolerance
from bakeoff.units import human_bytes

__all__ = ["CollectivesJob", "elements", "expected", "ramp", "tolerance"]


def ramp(rank: int, n: int) -> Any:
    """Rank ``rank``'s ``n`` values (see the module docstring), in float64 (each exact)."""
    import torch

    return 1 + ((37 * torch.arange(n, dtype=torch.float64) + 101 * rank) % 128) / 128


def elements(op: str, size: int, itemsize: int, world: int) -> int:
    """How many elements each rank's input holds for a message of ``size`` bytes (nccl-tests'
    size: see :class:`~bakeoff.scenarios.dist.CollectiveCell`), at least one per rank."""
    n = max(world, size // itemsize // world * world)
    return n // world if op == "all_gather" else n


def expected(op: str, rank: int, world: int, n: int) -> Any:
    """What rank ``rank`` must hold after ``op`` when each rank ``r`` gave ``ramp(r, n)``, in
    float64 (exact: the ramps are multiples of 1/128 far from float64's precision), built one
    rank's ramp at a time (a rank holds its expectation, not every rank's input)."""
    import torch

    chunk = n // world
    mine = slice(rank * chunk, (rank + 1) * chunk)
    if op in ("all_reduce_sum", "all_reduce_avg", "reduce_scatter", "all_reduce_max"):
        total = ramp(0, n)
        for r in range(1, world):
            total = torch.maximum(total, ramp(r, n)) if op == "all_reduce_max" else total + ramp(r, n)
        if op == "all_reduce_avg":
            return total / world
        return total[mine] if op == "reduce_scatter" else total
    if op == "all_gather":
        return torch.cat([ramp(r, n) for r in range(world)])
    if op == "broadcast":
        return ramp(world - 1, n)
    if op == "all_to_all":
        return torch.cat([ramp(r, n)[mine] for r in range(world)])
    return torch.empty(0, dtype=torch.float64)


#: How late the last rank enters the checked barrier, and how long the others must have waited.
BARRIER_LATE_S = 0.2
BARRIER_WAITED_S = 0.1


@dataclass(frozen=True)
class CollectivesJob:
    """Rank ``rank`` of ``world``: meet the others through ``rendezvous`` on the target's device
    (one device per rank where it has enough, else the target's own), on the process-group
    backend PyTorch names for that device, and run the check. Returns ``{"backend", "device",
    "cells": [...]}``: per cell the rank's largest error (ulps) with the element it was at, or
    the error the collective raised, and each timed call's microseconds."""

    target: Any
    rank: int
    world: int
    rendezvous: str
    sizes: tuple[int, ...]
    dtypes: tuple[str, ...]
    iterations: int
    pg_timeout_s: float
    phase: str = "collectives"

    def run(self) -> dict[str, Any]:
        import torch
        import torch.distributed as dist

        from bakeoff.target.execute import synchronizer
        from bakeoff.target.plugins import load_plugins

        load_plugins()
        device, backend = join_group(self.target, self.rank, self.world, self.rendezvous, self.pg_timeout_s)
        sync = synchronizer(self.target)
        seq = 0
        cells = []
        try:
            for dtype in self.dtypes:
                for size in self.sizes:
                    for op in OPS:
                        if op == "barrier" and (dtype, size) != (self.dtypes[0], self.sizes[0]):
                            continue  # a barrier has no message: once is enough
                        cell, seq = self._cell(op, getattr(torch, dtype), size, device, sync, seq)
                        cells.append({"op": op, "dtype": "" if op == "barrier" else dtype, **cell})
            finished(seq)
            wait_for_every_rank(self.world)
        finally:
            dist.destroy_process_group()
        return {"backend": backend, "device": str(device), "cells": cells}

    def _cell(self, op: str, dtype: Any, size: int, device: Any, sync: Any, seq: int) -> tuple[dict[str, Any], int]:
        import torch

        if op == "barrier":
            return self._barrier(sync, seq)
        name = str(dtype).removeprefix("torch.")
        n = elements(op, size, torch.tensor([], dtype=dtype).element_size(), self.world)
        source = ramp(self.rank, n).to(dtype).to(device)
        want = expected(op, self.rank, self.world, n)
        prepare, call, result = _collective(op, source, self.world)
        moved = (
            result.numel() * result.element_size() if op in ("all_gather",) else source.numel() * source.element_size()
        )
        what = f"{op} {name} {human_bytes(moved)}"
        samples: list[float] = []
        worst, at, got = 0.0, -1, 0.0
        for i in range(self.iterations + 1):
            seq += 1
            prepare()  # refill the input, poison the output: a call that writes nothing is wrong
            enter(seq, what)
            began = time.perf_counter()
            try:
                call()
                sync()
            except Exception as exc:  # the process group is not to be trusted after this: the job ends
                raise RuntimeError(f"{what} (#{seq}) raised {type(exc).__name__}: {str(exc)[:300]}") from exc
            spent = time.perf_counter() - began
            if i > 0:
                samples.append(round(spent * 1e6, 3))
            error, where = _error(result, want, dtype)  # every call's result, outside the timed region
            if error > worst:
                worst, at = error, where
                got = result.detach().to("cpu", torch.float64).flatten()[where].item() if where < result.numel() else 0
        detail = ""
        if at >= 0 and worst > 0:
            detail = f"rank {self.rank} element {at}: got {got:.9g}, expected {want[at].item():.9g}"
        tol = tolerance(op, self.world, name)
        return {"max_error": worst, "tolerance": tol, "detail": detail, "samples_us": samples, "size": moved}, seq

    def _barrier(self, sync: Any, seq: int) -> tuple[dict[str, Any], int]:
        """The barrier: on the warm call the last rank enters :data:`BARRIER_LATE_S` late, and
        every other rank must have waited for it (an error of 1 unit when one did not); the
        timed calls follow."""
        import torch.distributed as dist

        samples: list[float] = []
        worst, detail = 0.0, ""
        for i in range(self.iterations + 1):
            seq += 1
            if i == 0 and self.rank == self.world - 1:
                time.sleep(BARRIER_LATE_S)
            enter(seq, "barrier")
            began = time.perf_counter()
            try:
                dist.barrier()
                sync()
            except Exception as exc:
                raise RuntimeError(f"barrier (#{seq}) raised {type(exc).__name__}: {str(exc)[:300]}") from exc
            spent = time.perf_counter() - began
            if i == 0 and self.rank != self.world - 1 and spent < BARRIER_WAITED_S:
                worst = 1.0
                detail = (f"rank {self.rank} left the barrier after {spent * 1e3:.1f} ms, before rank "
                          f"{self.world - 1} entered it {BARRIER_LATE_S * 1e3:.0f} ms late")  # fmt: skip
            if i > 0:
                samples.append(round(spent * 1e6, 3))
        return {"max_error": worst, "tolerance": 0.0, "detail": detail, "samples_us": samples, "size": 0}, seq


def _collective(op: str, source: Any, world: int) -> tuple[Any, Any, Any]:
    """``(prepare, call, result)``: a function that refills the buffer from ``source`` (or
    poisons the output with NaN), one that runs ``op`` once, and the tensor holding its result."""
    import torch
    import torch.distributed as dist

    n = source.numel()
    if op.startswith("all_reduce") or op == "broadcast":
        buffer = source.clone()
        reduce_op = {"all_reduce_sum": dist.ReduceOp.SUM, "all_reduce_avg": dist.ReduceOp.AVG,
                     "all_reduce_max": dist.ReduceOp.MAX}.get(op)  # fmt: skip
        refill = lambda: buffer.copy_(source)  # noqa: E731
        if reduce_op is None:
            return refill, (lambda: dist.broadcast(buffer, src=world - 1)), buffer
        return refill, (lambda: dist.all_reduce(buffer, op=reduce_op)), buffer
    out = torch.empty(n * world if op == "all_gather" else (n // world if op == "reduce_scatter" else n),
                      dtype=source.dtype, device=source.device)  # fmt: skip
    poison = lambda: out.fill_(float("nan"))  # noqa: E731
    if op == "all_gather":  # this release's names, else the older ones
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return poison, (lambda: gather(out, source)), out
    if op == "reduce_scatter":
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return poison, (lambda: scatter(out, source)), out
    return poison, (lambda: dist.all_to_all_single(out, source)), out


def _error(result: Any, want: Any, dtype: Any) -> tuple[float, int]:
    """The largest error of ``result`` against ``want`` in units of ``dtype``'s spacing at the
    expected value, and the element where it is (a value that is not finite: 1e30 units)."""
    import torch

    got = result.detach().to("cpu", torch.float64).flatten()
    if got.numel() != want.numel():
        return 1e30, 0
    spacing = torch.finfo(dtype).eps * torch.exp2(
        torch.floor(torch.log2(want.abs().clamp_min(torch.finfo(dtype).tiny)))
    )
    units = ((got - want).abs() / spacing).nan_to_num(nan=1e30, posinf=1e30)
    at = int(units.argmax())
    return float(units[at]), at
