"""One step of a workload at one grid point, the same code for the fake prediction and the real
probes: inference is one forward pass without gradients; training is two AdamW steps (forward,
backward, optimiser step, gradients set to None), so that the second carries the optimiser
state a steady run holds. The inputs are built inside the step, so that they count.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["inputs_at", "run_step"]


def inputs_at(workload: Any, batch: int, seq: int | None) -> tuple[tuple, dict]:
    """The workload's inputs at ``batch`` x ``seq`` (its own length when ``seq`` is None).

    Raises:
        WorkloadError: the workload cannot build inputs of other shapes.
    """
    if seq is None:
        seq = _own_length(workload)
    return workload.inputs_for(batch, seq)


def _own_length(workload: Any) -> int:
    """A language model's own length (its ``input_ids``); any other workload's is not known."""
    from bakeoff.errors import WorkloadError

    ids = workload.kwargs.get("input_ids")
    if ids is not None and getattr(ids, "dim", lambda: 0)() == 2:
        return int(ids.shape[1])
    raise WorkloadError(
        f"{workload.spec} takes no input_ids: its own sequence length is not known",
        hint="give the lengths in the grid, e.g. --grid 'batch=1,2,...,64&seq=16'",
    )


def run_step(
    workload: Any,
    model: Any,
    batch: int,
    seq: int | None,
    training: bool,
    place: Callable[[tuple, dict], tuple[tuple, dict]],
    optimizer: str = "adamw",
    between: Callable[[], None] = lambda: None,
    amp: tuple[str, str] | None = None,
) -> None:
    """Run the step (see the module docstring) on ``model`` with inputs placed by ``place``;
    ``between`` is called between the two training steps; ``amp`` is ``(device type, dtype)`` of
    a mixed-precision target, whose forward passes (and loss) run under its autocast."""
    from contextlib import nullcontext

    import torch

    def autocast() -> Any:
        return torch.autocast(amp[0], dtype=getattr(torch, amp[1])) if amp else nullcontext()

    if not training:
        with torch.no_grad():
            args, kwargs = place(*inputs_at(workload, batch, seq))
            with autocast():
                model(*args, **kwargs)
        return
    recipe = workload.training_recipe()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params) if optimizer == "adamw" else torch.optim.SGD(params, lr=1e-3)
    with torch.enable_grad():
        for step in range(2):
            if step:
                between()  # e.g. a tracker's per-module figures, kept per step
            args, kwargs = place(*inputs_at(workload, batch, seq))
            if recipe.kind == "causal_lm":
                kwargs = {**kwargs, "labels": kwargs["input_ids"]}
            with autocast():
                loss = recipe.loss(model(*args, **kwargs), args, kwargs)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            del args, kwargs, loss
