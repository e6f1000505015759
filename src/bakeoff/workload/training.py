"""How a workload trains: the batches of each step and the loss, for the training parity check.

Three kinds, named in every result so a reader knows what was trained:
    causal_lm   a Hugging Face causal language model: the causal-LM loss with ``labels`` equal
                to the input ids (transformers shifts them), on fresh token ids every step
    workload    a ``py:`` workload's own: its module's ``training_batch(step)`` and/or
                ``training_loss(output, args, kwargs)`` (see the ``py:`` contract in docs/workloads.md)
    synthetic   the fallback: the mean square of the floating outputs on the workload's own
                input every step. It exercises forward, backward and the optimiser, but it is
                not what the model learns: named as such wherever it is shown.

Batches are drawn from a seed per step, on the CPU, so every run (golden, reference, target)
sees the same data in the same order; the caller moves them to the target.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["LOSS_KINDS", "TrainingRecipe", "float_tensors", "synthetic_loss"]

LOSS_KINDS = {
    "causal_lm": "causal-LM loss on fresh token ids each step",
    "workload": "the workload's own loss and batches",
    "synthetic": "mean square of the floating outputs (a fallback: it exercises the step, not what the model learns)",
}

Batch = tuple[tuple, dict]


def float_tensors(value: Any) -> list[Any]:
    """Floating tensors anywhere in a model's output (dicts, model outputs, lists, tuples)."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() else []
    if isinstance(value, dict):
        return [t for v in value.values() for t in float_tensors(v)]
    if isinstance(value, list | tuple):
        return [t for v in value for t in float_tensors(v)]
    return []


def synthetic_loss(output: Any, args: tuple, kwargs: dict) -> Any:
    """The mean square of every floating output that depends on the parameters, summed."""
    import torch

    losses = [t.float().pow(2).mean() for t in float_tensors(output) if t.requires_grad]
    if not losses:
        raise RuntimeError("no output depends on the parameters: nothing to train")
    return torch.stack(losses).sum()


def causal_lm_loss(output: Any, args: tuple, kwargs: dict) -> Any:
    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, dict):
        loss = output.get("loss")
    if loss is None:
        raise RuntimeError("the model returned no loss for its labels")
    return loss


@dataclass(frozen=True)
class TrainingRecipe:
    """What one training step feeds the model and minimises.

    ``batch(step)`` returns ``(args, kwargs)`` on the CPU for step 0, 1, ...; ``loss(output,
    args, kwargs)`` the scalar to differentiate. ``kind`` is a key of :data:`LOSS_KINDS`.
    """

    kind: str
    batch: Callable[[int], Batch]
    loss: Callable[[Any, tuple, dict], Any]

    @property
    def described(self) -> str:
        return LOSS_KINDS[self.kind]
