"""Each grid point's peak, predicted on the host without the device: the workload built under
PyTorch's fake tensors (shapes and dtypes, no storage), one step run under PyTorch's memory
tracker (``torch.distributed._tools.mem_tracker.MemTracker``), which sorts every live tensor
into parameters, buffers, gradients, activations, temporaries and optimiser state, and reports
the peak of their sum with its parts.

What it cannot see: the device allocator's rounding, caching and fragmentation, workspaces a
kernel library allocates outside PyTorch's tensors (the probes on the target calibrate for
both), and memory a compiled graph saves or frees differently from eager (the step runs
eagerly).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["PARTS", "Predicted", "predict_points"]

#: The tracker's categories as the answer names them.
PARTS = {
    "Parameter": "parameters",
    "Buffer": "buffers",
    "Gradient": "gradients",
    "Activation": "activations",
    "Temp": "temporaries",
    "Optstate": "optimizer state",
    "Other": "other",
}


@dataclass(frozen=True)
class Predicted:
    """One point's predicted peak in bytes, with its parts at the peak (``PARTS`` values)."""

    batch: int
    seq: int | None
    peak: int
    parts: dict[str, int]


def predict_points(
    workload_spec: str,
    points: Sequence[tuple[int, int | None]],
    *,
    dtype: str | None = None,
    device: str = "cpu",
    amp: str | None = None,
    training: bool = False,
    optimizer: str = "adamw",
    checkpointing: bool = False,
) -> list[Predicted]:
    """Predict the peak of each ``(batch, seq)`` point (see the module docstring); the model is
    cast to ``dtype`` first, runs under ``amp``'s autocast where a mixed-precision target would,
    and with ``checkpointing`` its activation checkpointing is on (a Hugging Face model's
    ``gradient_checkpointing_enable``).

    Raises:
        WorkloadError: the workload cannot be built under fake tensors or cannot vary its
            input shape; ValueError: ``checkpointing`` for a model without it.
    """
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    from bakeoff.fit.step import run_step
    from bakeoff.workload.registry import build_workload

    found = []
    with warnings.catch_warnings(), FakeTensorMode():
        warnings.simplefilter("ignore")  # the tracker warns of module hierarchies it re-enters
        workload = build_workload(workload_spec)
        model = workload.model
        _cast(model, torch.device(device), getattr(torch, dtype) if dtype else None)
        if training:
            model.train()
            if checkpointing:
                enable = getattr(model, "gradient_checkpointing_enable", None)
                if enable is None:
                    raise ValueError("the model has no gradient_checkpointing_enable")
                enable()

        def place(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
            from bakeoff.target.execute import move_tensors

            cast = getattr(torch, dtype) if dtype else None
            return move_tensors(args, device, cast), move_tensors(kwargs, device, cast)

        for batch, seq in points:
            tracker = _tracker(MemTracker, model)
            tracker.track_external(model)
            with tracker:
                run_step(workload, model, batch, seq, training, place, optimizer, tracker.reset_mod_stats,
                         (torch.device(device).type, amp) if amp else None)  # fmt: skip
            found.append(_read(tracker, batch, seq, torch.device(device).type))
    return found


class _NoHook:
    """The handle of a gradient hook never installed."""

    def remove(self) -> None:
        return None


def _tracker(tracker_class: Any, model: Any) -> Any:
    """PyTorch's memory tracker for ``model``, told that its frozen parameters already have their
    gradient hooks: it hooks every parameter's gradient, and a parameter that does not require
    one (a frozen layer, a fine-tuning's base) refuses a hook. A frozen parameter never gets a
    gradient, so no hook of it would ever run."""
    tracker = tracker_class()
    handles = getattr(tracker, "_param_to_grad_hook_handles", None)
    if handles is not None:
        for param in model.parameters():
            if not param.requires_grad:
                handles[param] = (_NoHook(), _NoHook())
    return tracker


def _cast(model: Any, device: Any, dtype: Any) -> None:
    """``model``'s parameters and buffers as new ones on ``device``, the floating ones of ``dtype``
    (None: as they are; tied ones stay tied). ``Module.to`` would swap each fake parameter in
    place, which the fake mode's own weak references to it refuse."""
    import torch

    def moved(tensor: Any) -> Any:
        return tensor.detach().to(device=device, dtype=dtype if dtype and tensor.is_floating_point() else None)

    made: dict[int, Any] = {}
    for module in model.modules():
        for name, param in list(module._parameters.items()):
            if param is not None:
                if id(param) not in made:
                    made[id(param)] = torch.nn.Parameter(moved(param), requires_grad=param.requires_grad)
                module._parameters[name] = made[id(param)]
        for name, buffer in list(module._buffers.items()):
            if buffer is not None:
                if id(buffer) not in made:
                    made[id(buffer)] = moved(buffer)
                module._buffers[name] = made[id(buffer)]


def _read(tracker: Any, batch: int, seq: int | None, device_type: str) -> Predicted:
    """The peak on the target's device: inputs built on the host and moved there are counted
    once, where they are used."""
    snapshot = tracker.get_tracker_snapshot("peak")
    parts: dict[str, int] = {}
    for device, by_kind in snapshot.items():  # one entry per device the step touched
        if getattr(device, "type", str(device)) != device_type:
            continue
        for kind, size in by_kind.items():
            if kind == "Total":
                continue
            name = PARTS.get(getattr(kind, "value", str(kind)), "other")
            parts[name] = parts.get(name, 0) + int(size)
    return Predicted(batch, seq, sum(parts.values()), parts)
