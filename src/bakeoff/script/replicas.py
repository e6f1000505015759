"""Each rank's final weights, as a capture: what a DDP step left on each rank after the last
value the script itself captured.

A run's captures stop at the script's last loss or output; the update after them (the last
optimizer step, the one where a collective on one rank went wrong) is in no capture. In a
torchrun-style run (``WORLD_SIZE`` set), :class:`FinalWeights` records, when each
``DistributedDataParallel`` the script made is freed (or when the script ends, for one still
alive), a digest of its module's parameters under ``params:DistributedDataParallel``: each
parameter's sum and norm in float64, in ``named_parameters`` order. The runner compares it
with the reference job's same rank, as every capture. What it cannot see: a model trained
without DDP (FSDP's sharded parameters, a hand-written all_reduce), and buffers.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

__all__ = ["NAME", "FinalWeights"]

#: The capture's name.
NAME = "params:DistributedDataParallel"


def _digest(module: Any) -> Any:
    """Each parameter's sum and norm in float64, outside any mode the run has on (the audit's
    counts and the honest reference's rounding noise are the script's, not this reading's)."""
    import torch
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes(), torch._C.DisableTorchFunction():
        rows = []
        for _, parameter in module.named_parameters():
            value = parameter.detach().to("cpu", torch.float64)
            rows.append(torch.stack([value.sum(), value.norm()]))
        return torch.stack(rows) if rows else None


class FinalWeights:
    """While installed, every ``DistributedDataParallel`` made records its module's final
    weights into ``captures`` (see the module docstring); :meth:`uninstall` records those still
    alive and puts ``__init__`` back."""

    def __init__(self, captures: Any) -> None:
        self.captures = captures
        self._finalizers: list[weakref.finalize] = []
        self._original: Any = None

    @staticmethod
    def wanted() -> bool:
        """Whether this run is a rank of a torchrun-style job."""
        return "WORLD_SIZE" in os.environ

    def _record(self, module: Any) -> None:
        try:
            digest = _digest(module)
        except Exception:  # a module whose parameters cannot be read now is left out, not fatal
            return
        if digest is not None:
            self.captures.add(NAME, digest)

    def install(self) -> None:
        from torch.nn.parallel import DistributedDataParallel

        original = DistributedDataParallel.__dict__["__init__"]
        weights = self

        def __init__(ddp: Any, *args: Any, **kwargs: Any) -> None:
            original(ddp, *args, **kwargs)
            weights._finalizers.append(weakref.finalize(ddp, weights._record, ddp.module))

        __init__.__wrapped__ = original  # type: ignore[attr-defined]
        self._original = original
        DistributedDataParallel.__init__ = __init__  # type: ignore[method-assign]

    def uninstall(self) -> None:
        from torch.nn.parallel import DistributedDataParallel

        for finalizer in self._finalizers:
            finalizer()  # those still alive: their weights as the script left them
        self._finalizers.clear()
        if self._original is not None:
            DistributedDataParallel.__init__ = self._original  # type: ignore[method-assign]
            self._original = None
