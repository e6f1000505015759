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

    if isinstance(value, torch.Tensor) and value.dim() >= 2 and value.shape[1] == seq and to > seq:
        shape = list(value.shape)
        shape[1] = to - seq
        return torch.cat([value, value.new_zeros(shape)], dim=1)
    if isinstance(value, dict):
        return {k: _pad(v, seq, to) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_pad(v, seq, to) for v in value)
    return value


def pad_inputs(args: tuple, kwargs: dict, seq: int, to: int) -> tuple[tuple, dict]:
    """Inputs of sequence length ``seq`` padded on the right to ``to``."""
    return _pad(args, seq, to), _pad(kwargs, seq, to)


def unpad_outputs(outputs: dict[str, Any], seq: int, to: int) -> dict[str, Any]:
    """Flattened outputs with the padded positions of dimension 1 removed."""
    if to == seq:
        return outputs
    return {name: t[:, :seq] if t.dim() >= 2 and t.shape[1] == to else t for name, t in outputs.items()}
