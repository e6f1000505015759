"""The remap's rewrites of ``torch.distributed``: the process-group backend and device of
``init_process_group``/``new_group``, and the devices ``DistributedDataParallel`` is given.

A CUDA script names its rank's device three times: the backend (``nccl``), the group's
``device_id``, and DDP's ``device_ids=[local_rank]`` (with its ``output_device``). The first two
become the target's (``nccl`` -> the target's default backend, from PyTorch's own table;
``cuda:1`` -> ``emu:1``); DDP's become the target's device of the same index, or none on the
CPU, where DDP refuses any (``device_ids`` "only work with ... GPU modules or CPU modules"
otherwise). Each rewrite goes into the ledger.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from bakeoff.script.devices import DeviceMap, map_backend
from bakeoff.script.ledger import Recorder

__all__ = ["ddp_init", "process_group"]


def process_group(
    name: str, original: Callable[..., Any], devices: DeviceMap, recorder: Recorder
) -> Callable[..., Any]:
    """``torch.distributed``'s ``name`` (``init_process_group``, ``new_group``) with its backend
    and ``device_id`` rewritten for the target."""
    signature = inspect.signature(original)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind_partial(*args, **kwargs)
        backend = bound.arguments.get("backend")
        if isinstance(backend, str):
            mapped = map_backend(backend, devices)
            if mapped != backend:
                recorder.record(f"torch.distributed.{name}(backend=)", reason=f"{backend} -> {mapped}")
                bound.arguments["backend"] = mapped
        device_id = bound.arguments.get("device_id")
        if device_id is not None:
            mapped_device = devices.map(device_id)
            if mapped_device is None and isinstance(device_id, torch.device) and device_id.type == "cpu":
                mapped_device = device_id  # torch.device("cuda", 0), already made the host's by the remap
            if mapped_device is not None and torch.device(mapped_device).type == "cpu":
                # PyTorch takes an accelerator with an index only: on the host there is none to bind
                recorder.record(f"torch.distributed.{name}(device_id=)", reason=f"{device_id} -> None (the host)")
                del bound.arguments["device_id"]
            elif mapped_device is not None:
                recorder.record(f"torch.distributed.{name}(device_id=)", reason=f"{device_id} -> {mapped_device}")
                bound.arguments["device_id"] = torch.device(mapped_device)
        return original(*bound.args, **bound.kwargs)

    wrapped.__name__ = name
    wrapped.__doc__ = original.__doc__
    wrapped.__wrapped__ = original  # type: ignore[attr-defined]
    return wrapped


def _device_of(value: Any, devices: DeviceMap) -> Any:
    """One entry of ``device_ids``/``output_device`` for the target: None on the CPU, else the
    target's device (an index stays an index of the target's device type). ``value`` itself
    when it is not a remapped device."""
    mapped = devices.map_device(value)
    if mapped is None:
        return value
    return None if isinstance(mapped, torch.device) and mapped.type == "cpu" else mapped


def ddp_init(original: Callable[..., Any], devices: DeviceMap, recorder: Recorder) -> Callable[..., Any]:
    """``DistributedDataParallel.__init__`` with ``device_ids`` and ``output_device`` on the target."""
    signature = inspect.signature(original)

    def __init__(*args: Any, **kwargs: Any) -> None:
        bound = signature.bind_partial(*args, **kwargs)
        for name in ("device_ids", "output_device"):
            given = bound.arguments.get(name)
            if given is None:
                continue
            if name == "device_ids" and isinstance(given, (list, tuple)):
                mapped: Any = [_device_of(d, devices) for d in given]
                mapped = None if any(d is None for d in mapped) else type(given)(mapped)
            else:
                mapped = _device_of(given, devices)
            if mapped != given:
                recorder.record(f"DistributedDataParallel({name}=)", reason=f"{given} -> {mapped}")
                bound.arguments[name] = mapped
        original(*bound.args, **bound.kwargs)

    __init__.__wrapped__ = original  # type: ignore[attr-defined]
    return __init__
