"""The test device's process-group backend: ``torch.distributed`` collectives on ``emu`` tensors.

An out-of-tree device brings its own process-group backend and registers it for its device the
way this one does (``dist.Backend.register_backend("emu", ..., devices=["emu"])``: Neuron's
registers ``"neuron"``). This one is gloo over host copies: every collective copies its emu
tensors to the host, runs gloo's collective there, and copies the results back, so
``init_process_group("emu")``, DDP and FSDP run their real device path on a machine without an
accelerator, with the host's exact arithmetic.

Each collective completes before it returns (its work is already done): a rank that never
arrives blocks the others in gloo until the process group's timeout, as on a real device.

Seeded faults, for the tests of ``bakeoff dist`` (``BAKEOFF_EMU_DIST_FAULT``, comma-separated):

- ``avg_twice@R``: on rank ``R``, every all_reduce's result is divided by the world size once
  more (a sum comes back averaged, an average averaged twice);
- ``bf16_low_bits``: every bfloat16 reduction (all_reduce, reduce_scatter) drops the low four
  bits of each result's mantissa;
- ``skip@R:N``: rank ``R`` leaves the job's collectives at its ``N``-th: it returns from it, and
  from every later one, at once without joining them (the other ranks wait in it: a hang);
- ``stall@R:N``: rank ``R`` never returns from its ``N``-th collective (a collective that hangs
  on one rank: the others wait in their next one);
- ``unreduced@N``: the ``N``-th reduce_scatter of every rank returns the rank's own share of
  its input, not reduced over the ranks (FSDP: one unit's gradients are not reduced).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bakeoff.errors import SpecError

__all__ = ["ENV_FAULT", "Faults", "register_process_group"]

NAME = "emu"
ENV_FAULT = "BAKEOFF_EMU_DIST_FAULT"
_FAULT = re.compile(r"avg_twice@(\d+)|bf16_low_bits|skip@(\d+):([1-9]\d*)|unreduced@([1-9]\d*)|stall@(\d+):([1-9]\d*)")


@dataclass(frozen=True)
class Faults:
    """The seeded faults of one rank (see the module docstring)."""

    avg_twice: bool = False
    bf16_low_bits: bool = False
    skip: int | None = None  # the 1-based number of the first collective this rank does not join
    unreduced: int | None = None  # the 1-based number of the reduce_scatter left unreduced
    stall: int | None = None  # the 1-based number of the collective this rank never returns from

    @classmethod
    def parse(cls, text: str, rank: int) -> Faults:
        """``text`` (``BAKEOFF_EMU_DIST_FAULT``) for ``rank``.

        Raises:
            SpecError: an item that is not one of the faults.
        """
        found: dict[str, Any] = {}
        for item in filter(None, (part.strip() for part in text.split(","))):
            matched = _FAULT.fullmatch(item)
            if matched is None:
                hint = "use avg_twice@RANK, bf16_low_bits, skip@RANK:N, stall@RANK:N or unreduced@N"
                raise SpecError(f"{ENV_FAULT}: {item!r} is not a fault", hint=hint)
            if item == "bf16_low_bits":
                found["bf16_low_bits"] = True
            elif matched[4] is not None:
                found["unreduced"] = int(matched[4])
            elif matched[1] is not None and int(matched[1]) == rank:
                found["avg_twice"] = True
            elif matched[2] is not None and int(matched[2]) == rank:
                found["skip"] = int(matched[3])
            elif matched[5] is not None and int(matched[5]) == rank:
                found["stall"] = int(matched[6])
        return cls(**found)


def _low_bits_dropped(tensors: Sequence[Any]) -> None:
    import torch

    for t in tensors:
        if t.dtype == torch.bfloat16:
            t.view(torch.int16).bitwise_and_(~0xF)


def _done(result: Any) -> Any:
    from torch._C._distributed_c10d import _create_work_from_future
    from torch.futures import Future

    future: Future = Future()
    future.set_result(result)
    return _create_work_from_future(future)


def _host(tensors: Sequence[Any]) -> list[Any]:
    return [t.detach().to("cpu") for t in tensors]


def _back(devices: Sequence[Any], hosts: Sequence[Any]) -> None:
    for device, host in zip(devices, hosts, strict=True):
        device.copy_(host)


def _process_group_class() -> type:
    import torch.distributed as dist

    class EmuProcessGroup(dist.ProcessGroup):
        """gloo over host copies (see the module docstring)."""

        def __init__(self, store: Any, rank: int, size: int, timeout: Any) -> None:
            super().__init__(rank, size)
            self._gloo = dist.ProcessGroupGloo(store, rank, size, timeout)
            self._faults = Faults.parse(os.environ.get(ENV_FAULT, ""), rank)
            self._calls = 0
            self._scatters = 0

        def _unreduced(self, output: Any, input: Any) -> Any | None:
            """The seeded unreduced reduce_scatter: this rank's own share of ``input``, as is."""
            self._scatters += 1
            if self._faults.unreduced != self._scatters:
                return None
            share = input.numel() // self.size()
            output.copy_(input.flatten()[self.rank() * share : (self.rank() + 1) * share].view_as(output))
            return _done([output])

        def _skipped(self) -> bool:
            """Count this collective; True when a seeded fault makes this rank leave it out."""
            self._calls += 1
            while self._faults.stall == self._calls:  # the seeded hang: never back
                time.sleep(1.0)
            return self._faults.skip is not None and self._calls >= self._faults.skip

        def getBackendName(self) -> str:
            return NAME

        # a Python process group keeps its own name (a device mesh, FSDP's, looks groups up by it)
        def _set_group_name(self, name: str) -> None:
            self._emu_group_name = name

        def getGroupName(self) -> str:
            return getattr(self, "_emu_group_name", "")

        @property
        def group_name(self) -> str:
            return self.getGroupName()

        def _on_host(self, run: Callable[[], Any], devices: Sequence[Any], hosts: Sequence[Any],
                     reduced: bool = False) -> Any:  # fmt: skip
            if self._skipped():
                return _done(list(devices))
            run().wait()
            if reduced and self._faults.bf16_low_bits:
                _low_bits_dropped(hosts)
            _back(devices, hosts)
            return _done(list(devices))

        def allreduce(self, tensors: list[Any], opts: Any) -> Any:
            hosts = _host(tensors)
            work = self._on_host(lambda: self._gloo.allreduce(hosts, opts), tensors, hosts, reduced=True)
            if self._faults.avg_twice:
                for t in tensors:
                    t.div_(self.size())
            return work

        def broadcast(self, tensors: list[Any], opts: Any) -> Any:
            hosts = _host(tensors)
            return self._on_host(lambda: self._gloo.broadcast(hosts, opts), tensors, hosts)

        def allgather(self, outputs: list[list[Any]], inputs: list[Any], opts: Any) -> Any:
            if self._skipped():
                return _done(outputs)
            host_out = [_host(row) for row in outputs]
            host_in = _host(inputs)
            self._gloo.allgather(host_out, host_in, opts).wait()
            for row, host_row in zip(outputs, host_out, strict=True):
                _back(row, host_row)
            return _done(outputs)

        def _allgather_base(self, output: Any, input: Any, opts: Any) -> Any:
            (host_out,), (host_in,) = _host([output]), _host([input])
            return self._on_host(lambda: self._gloo._allgather_base(host_out, host_in, opts), [output], [host_out])

        def reduce_scatter(self, outputs: list[Any], inputs: list[list[Any]], opts: Any) -> Any:
            host_out = _host(outputs)
            host_in = [_host(row) for row in inputs]
            run = lambda: self._gloo.reduce_scatter(host_out, host_in, opts)  # noqa: E731
            return self._on_host(run, outputs, host_out, reduced=True)

        def _reduce_scatter_base(self, output: Any, input: Any, opts: Any) -> Any:
            seeded = self._unreduced(output, input)
            if seeded is not None:
                return seeded
            (host_out,), (host_in,) = _host([output]), _host([input])
            run = lambda: self._gloo._reduce_scatter_base(host_out, host_in, opts)  # noqa: E731
            return self._on_host(run, [output], [host_out], reduced=True)

        def alltoall_base(self, output: Any, input: Any, out_splits: list[int], in_splits: list[int],
                          opts: Any) -> Any:  # fmt: skip
            (host_out,), (host_in,) = _host([output]), _host([input])
            run = lambda: self._gloo.alltoall_base(host_out, host_in, out_splits, in_splits, opts)  # noqa: E731
            return self._on_host(run, [output], [host_out])

        # the names torch.distributed's functions call in this release, beside the older ones
        def all_gather_single(self, output: Any, input: Any, opts: Any = None) -> Any:
            return self._allgather_base(output, input, opts if opts is not None else dist.AllgatherOptions())

        def reduce_scatter_single(self, output: Any, input: Any, opts: Any = None) -> Any:
            return self._reduce_scatter_base(output, input, opts if opts is not None else dist.ReduceScatterOptions())

        def all_to_all_single(self, output: Any, input: Any, out_splits: list[int], in_splits: list[int],
                              opts: Any = None) -> Any:  # fmt: skip
            opts = opts if isinstance(opts, dist.AllToAllOptions) else dist.AllToAllOptions()
            return self.alltoall_base(output, input, list(out_splits), list(in_splits), opts)

        def barrier(self, opts: Any) -> Any:
            if self._skipped():
                return _done(None)
            self._gloo.barrier(opts).wait()
            return _done(None)

    return EmuProcessGroup


def register_process_group() -> None:
    """Register the ``emu`` process-group backend for the ``emu`` device (idempotent; nothing
    where this torch has no ``torch.distributed``)."""
    import torch.distributed as dist

    if not dist.is_available() or NAME in dist.Backend.backend_list:
        return
    made: list[type] = []

    def create(store: Any, rank: int, size: int, timeout: Any) -> Any:
        if not made:
            made.append(_process_group_class())
        return made[0](store, rank, size, timeout)

    dist.Backend.register_backend(NAME, create, devices=[NAME])
