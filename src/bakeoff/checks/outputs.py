"""Flatten model outputs (tensors, tuples, dicts, Hugging Face ModelOutput) to named tensors.

Comparing structurally, not "the first tensor", catches a target that gets the logits right
but the hidden states or a second head wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["flatten_outputs", "identical", "max_abs_difference", "same_tensor"]


def flatten_outputs(value: Any, prefix: str = "output") -> dict[str, Any]:
    """Named tensors in ``value``, e.g. ``{"output.logits": t}``; non-tensor leaves are ignored.

    Mappings (which include ``ModelOutput``) are walked by key in their own order, sequences
    by index. Tensors are detached and moved to the CPU.
    """
    import torch

    found: dict[str, Any] = {}
    if isinstance(value, torch.Tensor):
        found[prefix] = value.detach().to("cpu")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            found.update(flatten_outputs(item, f"{prefix}.{key}"))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found.update(flatten_outputs(item, f"{prefix}.{index}"))
    return found


def max_abs_difference(a: Any, b: Any) -> float:
    """Largest ``|a - b|`` over elements; equal non-finite values (same inf, both NaN) count as 0,
    any other disagreement in finiteness as infinity."""
    import torch

    if not a.numel():
        return 0.0
    a, b = a.detach().cpu().double(), b.detach().cpu().double()
    same_nonfinite = (a == b) | (torch.isnan(a) & torch.isnan(b))
    diff = torch.where(same_nonfinite, torch.zeros_like(a), (a - b).abs())
    return float(diff.nan_to_num(nan=float("inf")).max())


def same_tensor(a: Any, b: Any) -> bool:
    """Whether two tensors are bit for bit the same: shape, dtype and values (NaN where NaN)."""
    import torch

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if torch.equal(a, b):
        return True
    return a.is_floating_point() and bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())


def identical(first: Mapping[str, Any], second: Mapping[str, Any]) -> bool:
    """Whether two flattened outputs hold the same names, each :func:`same_tensor`."""
    return first.keys() == second.keys() and all(same_tensor(first[name], second[name]) for name in first)
