"""Put a workload on a target: move and cast it, compile it, and synchronise the device.

Nothing here measures; :mod:`bakeoff.measure` times the callable this module returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bakeoff.target.engines import engine_for
from bakeoff.target.spec import Target
from bakeoff.workload.base import BuiltWorkload

__all__ = [
    "Prepared",
    "device_peak_memory",
    "move_tensors",
    "place_inputs",
    "place_model",
    "prepare",
    "reset_device_peak_memory",
    "synchronizer",
]


@dataclass
class Prepared:
    """A workload placed on a target: ``fn()`` runs one forward pass there.

    Attributes:
        compile_events: a counter that grows with each compilation (dynamo's, or an export
            engine's), None for eager targets; the timing loop warms up until it stops growing.
        backend_signals: returns ``(fallback_ops, signals)`` from the backend's own reports
            (for the placement audit), or None when the backend has none.
        compile_summary: the compilation audit's findings so far (keyword arguments for
            :class:`~bakeoff.checks.compilation.Compilation`), None for eager targets.
        uses_dynamo: the target runs under ``torch.compile`` (dynamo's stances apply).
        close: undoes process-wide changes the backend made (log handlers, patches).
    """

    target: Target
    model: Any
    args: tuple
    kwargs: dict
    compile_events: Callable[[], int] | None = None
    backend_signals: Callable[[], tuple[dict[str, int], dict[str, Any]]] | None = None
    compile_summary: Callable[[], dict[str, Any]] | None = None
    uses_dynamo: bool = False
    close: Callable[[], None] = lambda: None

    def __call__(self) -> Any:
        return self.model(*self.args, **self.kwargs)


def move_tensors(value: Any, device: Any, dtype: Any) -> Any:
    """Every tensor in ``value`` (any nesting) moved to ``device`` (None: stays), floating ones cast."""
    import torch
    from torch.utils._pytree import tree_map_only

    def move(tensor: torch.Tensor) -> torch.Tensor:
        cast = dtype if dtype is not None and tensor.is_floating_point() else None
        return tensor.to(device=device, dtype=cast) if device is not None or cast is not None else tensor

    return tree_map_only(torch.Tensor, move, value)


def place_inputs(workload: BuiltWorkload, target: Target, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Inputs moved to the target device and cast to its dtype.

    A self-placed workload keeps its inputs where its own code put them (its factory, or next
    to its model as applications do); only the dtype cast applies.
    """
    import torch

    dtype = getattr(torch, target.dtype) if target.dtype else None
    device = None if workload.self_placed else torch.device(target.torch_device)
    return move_tensors(args, device, dtype), move_tensors(kwargs, device, dtype)


def place_model(workload: BuiltWorkload, target: Target) -> Any:
    """The workload's model moved to the target's device (in place; unless it placed itself)
    and its floating parameters and buffers cast to the target's dtype when it has one."""
    import torch

    # A self-placed workload put its model where its own code puts it: moving it here would
    # hide exactly what the placement audit must see.
    model = workload.model if workload.self_placed else workload.model.to(device=torch.device(target.torch_device))
    return model.to(dtype=getattr(torch, target.dtype)) if target.dtype else model


def prepare(workload: BuiltWorkload, target: Target) -> Prepared:
    """Move the workload's model and inputs to the target and wrap it for its execution mode.

    The model is moved in place (workloads are built fresh for each target), unless the
    workload placed itself. Floating parameters and inputs are cast to the target's dtype
    when it has one. Compiled targets get a compilation audit watching the compiler; the
    backend's adapter (:mod:`bakeoff.target.engines`) compiles it.
    """
    model = place_model(workload, target)
    args, kwargs = place_inputs(workload, target, workload.args, workload.kwargs)
    prepared = Prepared(target=target, model=model, args=args, kwargs=kwargs)
    if target.backend is not None:
        compiled = engine_for(target.backend).compile(model, target)
        prepared.model = compiled.model
        prepared.compile_events = compiled.compile_events
        prepared.backend_signals = compiled.backend_signals
        prepared.compile_summary = compiled.compile_summary
        prepared.uses_dynamo = compiled.uses_dynamo
        prepared.close = compiled.close
    return prepared


def synchronizer(target: Target) -> Callable[[], None]:
    """A function that waits for all queued work on the target's device.

    Clock reads are only honest after a synchronisation: accelerator calls return before the
    work is done. CPU work is synchronous, so its synchroniser does nothing.
    """
    import torch

    if target.device == "cpu":
        return lambda: None
    accelerator = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    if accelerator is not None and accelerator.type == target.device:
        index = target.index
        return (lambda: torch.accelerator.synchronize(index)) if index is not None else torch.accelerator.synchronize
    module = getattr(torch, target.device, None)
    sync = getattr(module, "synchronize", None)
    if sync is None:
        raise RuntimeError(f"device '{target.device}' has no synchronize(); timings would be wrong")
    return sync


def _memory_module(target: Target) -> Any:
    import torch

    if target.device == "cpu":
        return None
    module = getattr(torch, target.device, None)
    return module if module is not None and hasattr(module, "max_memory_allocated") else None


def reset_device_peak_memory(target: Target) -> None:
    module = _memory_module(target)
    if module is not None and hasattr(module, "reset_peak_memory_stats"):
        try:
            module.reset_peak_memory_stats()
        except Exception:
            pass


def device_peak_memory(target: Target) -> int | None:
    """Peak bytes allocated on the target device since the last reset, where the backend says."""
    module = _memory_module(target)
    if module is None:
        return None
    try:
        return int(module.max_memory_allocated())
    except Exception:
        return None
