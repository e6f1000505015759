"""One grid point measured on the target: the workload built and placed there as a trial places
it, the step of :mod:`bakeoff.fit.step` run once, and the device allocator's own peak read
(``max_memory_allocated``: every tensor the step held at once, parameters included). A probe runs
in a fresh process of its own (:class:`Probe` is a launcher's job), so that one that runs out of
memory, crashes or hangs is an outcome, and no probe inherits another's allocations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Probe"]


@dataclass(frozen=True)
class Probe:
    """Measure ``batch`` x ``seq`` on ``target``: ``{"peak": bytes, "capacity": bytes or None}``,
    or ``{"out_of_memory": message}`` when the device refused an allocation (a finding, not a
    failure)."""

    workload_spec: str
    target: Any
    batch: int
    seq: int | None
    training: bool = False
    optimizer: str = "adamw"
    phase: str = "memory probe"

    def run(self) -> dict[str, Any]:
        import torch

        from bakeoff.fit.step import run_step
        from bakeoff.target.execute import device_peak_memory, place_inputs, place_model, reset_device_peak_memory
        from bakeoff.target.plugins import load_plugins
        from bakeoff.units import clip
        from bakeoff.workload.registry import build_workload

        load_plugins()
        target = self.target
        if target.effective_threads is not None:
            torch.set_num_threads(target.effective_threads)
        workload = build_workload(self.workload_spec, device=target.torch_device)
        model = place_model(workload, target)
        if self.training:
            model.train()
        reset_device_peak_memory(target)
        try:
            run_step(workload, model, self.batch, self.seq, self.training,
                     lambda args, kwargs: place_inputs(workload, target, args, kwargs), self.optimizer,
                     amp=(target.device, target.amp) if target.amp else None)  # fmt: skip
        except (torch.OutOfMemoryError, MemoryError) as exc:
            return {"out_of_memory": clip(str(exc).splitlines()[0], 300) if str(exc) else type(exc).__name__}
        peak = device_peak_memory(target)
        if peak is None:
            raise RuntimeError(f"{target.device} reports no allocator peak")
        if peak == 0:
            raise RuntimeError(f"the step allocated nothing on {target.device}: the workload does not run there")
        return {"peak": peak, "capacity": _capacity(target)}


def _capacity(target: Any) -> int | None:
    """The device's total memory where it reports one (cuda, xpu: their properties; mps: the
    recommended maximum), else None."""
    import torch

    module = getattr(torch, target.device, None)
    try:
        if hasattr(module, "get_device_properties"):
            return int(module.get_device_properties(target.index or 0).total_memory)
        if hasattr(module, "recommended_max_memory"):
            return int(module.recommended_max_memory())
    except Exception:  # a device that cannot say: the caller asks for --memory
        return None
    return None
