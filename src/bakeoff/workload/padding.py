"""Padding requests to a bucket length, and taking the padding back off the outputs.

The convention, documented for ``py:`` workloads too: the sequence is dimension 1 of every
input tensor that has at least two dimensions and whose dimension 1 equals the request's
length. Those tensors are padded on the right with zeros (for token ids, id 0; for attention
masks, 0 = masked out). Outputs whose dimension 1 equals the padded length are sliced back to
the request's length before they are compared: only the unpadded part is checked.
"""

from __future__ import annotations

from typing import Any

__all__ = ["pad_inputs", "unpad_outputs"]


def _pad(value: Any, seq: int, to: int) -> Any:
    import torch
    from torch.utils._pytree import tree_map_only

    def pad(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.dim() < 2 or tensor.shape[1] != seq or to <= seq:
            return tensor
        shape = list(tensor.shape)
        shape[1] = to - seq
        return torch.cat([tensor, tensor.new_zeros(shape)], dim=1)

    return tree_map_only(torch.Tensor, pad, value)


def pad_inputs(args: tuple, kwargs: dict, seq: int, to: int) -> tuple[tuple, dict]:
    """Inputs of sequence length ``seq`` padded on the right to ``to``."""
    return _pad(args, seq, to), _pad(kwargs, seq, to)


def unpad_outputs(outputs: dict[str, Any], seq: int, to: int) -> dict[str, Any]:
    """Flattened outputs with the padded positions of dimension 1 removed."""
    if to == seq:
        return outputs
    return {name: t[:, :seq] if t.dim() >= 2 and t.shape[1] == to else t for name, t in outputs.items()}
