"""Flatten model outputs (tensors, tuples, dicts, Hugging Face ModelOutput) to named tensors.

Comparing structurally, not "the first tensor", catches a target that gets the logits right
but the hidden states or a second head wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["flatten_outputs"]


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
