"""The checkpoint check's training half: ``steps`` AdamW steps on the target, then the model and
its optimiser state through ``torch.save`` and back on the CPU, and a resume there.

The optimiser state read back is compared field by field, bit for bit, with the state the
target's optimiser held (read from the optimiser itself, not through its ``state_dict``, and
copied to the CPU): a field the save dropped or changed is named.
Then training resumes on the CPU for one more step twice, from the checkpoint and from the state
held, on the same batch with the same arithmetic: the two continued weights must be identical,
so a checkpoint that cannot resume (a missing field the optimiser needs) or resumes elsewhere (a
changed ``step`` count moves AdamW's bias correction) is caught, with the first weight that moved.

What it cannot see: optimisers other than AdamW, state an optimiser keeps outside its
``state_dict``, learning-rate schedulers, and anything a resume on the target itself would do.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from typing import Any

from bakeoff.units import clip

__all__ = ["bits", "resume_round_trip", "same_bits"]

#: Integer dtypes of a float's width, by element size in bytes.
_WIDTHS = ("int8", "int16", None, "int32", None, None, None, "int64")


def bits(tensor: Any) -> Any:
    """A floating (or complex) tensor's bits as integers of its width; any other tensor as it is."""
    import torch

    if tensor.is_complex():
        tensor = torch.view_as_real(tensor)
    if not tensor.is_floating_point():
        return tensor
    return tensor.contiguous().view(getattr(torch, _WIDTHS[tensor.element_size() - 1]))


def same_bits(a: Any, b: Any) -> bool:
    """Whether two tensors have one dtype and shape and the same bits (a -0.0 is not a 0.0, a NaN's
    payload counts): a copy changes none."""
    import torch

    return a.dtype == b.dtype and a.shape == b.shape and bool(torch.equal(bits(a), bits(b)))


def _cpu(value: Any) -> Any:
    """Every tensor in ``value`` copied to the CPU (detached)."""
    import torch
    from torch.utils._pytree import tree_map_only

    return tree_map_only(torch.Tensor, lambda t: t.detach().to("cpu", copy=True), value)


def _optimizer(params: Any) -> Any:
    import torch

    # foreach=False: one kernel per parameter, the same arithmetic for both resumes
    return torch.optim.AdamW(params, lr=1e-3, foreach=False)


def _step(model: Any, optimizer: Any, recipe: Any, number: int, place: Callable[[tuple, dict], tuple]) -> None:
    import torch

    torch.manual_seed(number)
    args, kwargs = place(*recipe.batch(number))
    with torch.enable_grad():  # a trial's checks run with gradients off
        loss = recipe.loss(model(*args, **kwargs), args, kwargs)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
    optimizer.step()


def compare_optimizer(held: Mapping[str, Any], read: Mapping[str, Any]) -> list[str]:
    """How an optimiser ``state_dict`` read back differs from the one held, one line each."""
    import torch

    found = []
    for index, (want, got) in enumerate(zip(held["param_groups"], read.get("param_groups", []), strict=False)):
        for key in sorted(set(want) | set(got)):
            if want.get(key) != got.get(key):
                found.append(
                    f"optimizer:param_groups[{index}].{key}: {got.get(key)!r} read back, {want.get(key)!r} held"
                )
    states = read.get("state", {})
    for param, fields in held["state"].items():
        back = states.get(param, {})
        for key, value in fields.items():
            other = back.get(key)
            if other is None:
                found.append(f"optimizer:state[{param}].{key}: missing")
            elif isinstance(value, torch.Tensor) and not (isinstance(other, torch.Tensor) and same_bits(value, other)):
                scalar = value.numel() == 1 and isinstance(other, torch.Tensor) and other.numel() == 1
                what = f"{other.item():g} read back, {value.item():g} held" if scalar else "differs"
                found.append(f"optimizer:state[{param}].{key}: {what}")
            elif not isinstance(value, torch.Tensor) and other != value:
                found.append(f"optimizer:state[{param}].{key}: {other!r} read back, {value!r} held")
        found += [f"optimizer:state[{param}].{key}: not held" for key in back if key not in fields]
    return found


def resume_round_trip(
    model: Any,
    fresh: Callable[[], Any],
    recipes: tuple[Any, Any],
    steps: int,
    place: Callable[[tuple, dict], tuple],
    place_cpu: Callable[[tuple, dict], tuple],
) -> tuple[list[str], str]:
    """Train ``model`` (placed on the target) ``steps`` steps, save it with its optimiser and
    resume on the CPU (``fresh()``: the model built on the CPU in the target's dtype; ``recipes``:
    the training recipe of the target's build and of the CPU's, whose batches ``place`` moves to
    the target and ``place_cpu`` casts for the CPU): ``(differences, what was done)``. Raises
    what training on the target raised."""
    import torch

    recipe, cpu_recipe = recipes
    model.train()
    optimizer = _optimizer(model.parameters())
    for number in range(steps):
        _step(model, optimizer, recipe, number, place)
    held = {"model": _cpu(model.state_dict()), "optimizer": _held(optimizer)}
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, buffer)
    buffer.seek(0)
    try:
        read = torch.load(buffer, map_location="cpu", weights_only=True)
    except Exception as exc:
        return [
            f"optimizer: the checkpoint cannot be read back on the CPU: {type(exc).__name__}: {clip(str(exc), 160)}"
        ], ""
    differing = compare_optimizer(held["optimizer"], read.get("optimizer", {}))
    continued = []
    for label, state in (("the checkpoint", read), ("the state held", held)):
        try:
            continued.append(_resume(fresh(), state, cpu_recipe, steps, place_cpu))
        except Exception as exc:
            why = f"{type(exc).__name__}: {clip(str(exc), 120)}"
            return [*differing, f"resumed: resuming on the CPU from {label} raised {why}"], ""
    moved = [name for name, tensor in continued[1].items() if not same_bits(tensor, continued[0].get(name, tensor))]
    if moved:
        differing.append(
            f"resumed: one CPU step from the checkpoint and from the state held differ first at {moved[0]}"
        )
    return differing, f"{steps} eager AdamW step(s) on the target's device, resumed on the CPU for one more"


def _held(optimizer: Any) -> dict[str, Any]:
    """The optimiser's state as it holds it, packed as its ``state_dict`` packs it (parameters by
    their index), copied to the CPU: not through ``state_dict``, which is the save path."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    index = {id(p): number for number, p in enumerate(params)}
    groups = [
        {**{k: v for k, v in group.items() if k != "params"}, "params": [index[id(p)] for p in group["params"]]}
        for group in optimizer.param_groups
    ]
    state = {index[id(p)]: dict(fields) for p, fields in optimizer.state.items() if id(p) in index}
    return _cpu({"state": state, "param_groups": groups})


def _resume(
    model: Any, state: Mapping[str, Any], recipe: Any, steps: int, place: Callable[[tuple, dict], tuple]
) -> dict[str, Any]:
    """One more step on the CPU from ``state`` (model and optimiser): the weights after it."""
    model.load_state_dict(state["model"])
    model.train()
    optimizer = _optimizer(model.parameters())
    optimizer.load_state_dict(state["optimizer"])
    _step(model, optimizer, recipe, steps, place)
    return _cpu(model.state_dict())
