"""``torch.accelerator`` answering for the side a run is on, not for the process's accelerator.

Today's device-agnostic idiom asks ``torch.accelerator`` which device to use::

    device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")

A run's process may have a device registered that is not the side it plays: the reference on
the CPU, in a process where the test device (or a real accelerator) is registered, would
otherwise be told "emu" and run its work there. :func:`accelerator_functions` gives, for every
public function of ``torch.accelerator``, a stand-in that answers as the run's device does:

* ``cpu``: as PyTorch answers on a CPU-only machine: ``is_available()`` False,
  ``current_accelerator()`` None, ``device_count()`` 0, ``device_index(None)`` a no-op, and every
  other function raises PyTorch's ``RuntimeError`` (there is no accelerator to ask);
* the process's current accelerator (``emu`` where it is the one registered): PyTorch's own
  answer, with a remapped device argument (``synchronize("cuda")``) rewritten;
* another device: its device module's answer (``torch.xpu.device_count``, ``current_device``
  for ``current_device_index``, ``mem_get_info`` for ``get_memory_info``); a name it lacks is an
  :class:`~bakeoff.errors.RemapError` naming it.

Every call is recorded in the ledger (count and first call site). PyTorch's own code gets the
real functions (it would otherwise take paths for a device it has not set up); an installed
library gets the run's answer as the script does, since the answer names no CUDA-only path.

What it cannot see: functions taken from ``torch.accelerator`` before the remap was installed
(``from torch.accelerator import current_accelerator`` in a module imported earlier) and those
imported from its submodules (``torch.accelerator.memory``); ``Graph`` is left as it is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from bakeoff.errors import RemapError
from bakeoff.script.devices import DeviceMap
from bakeoff.script.ledger import Recorder, caller_kind

__all__ = ["NO_ACCELERATOR", "accelerator_functions"]

#: What PyTorch says when a function needs an accelerator and there is none.
NO_ACCELERATOR = "Cannot access accelerator device when none is available."

#: ``torch.accelerator`` names whose device module's counterpart is named differently.
_MODULE_NAMES = {
    "current_device_index": "current_device",
    "current_device_idx": "current_device",
    "set_device_index": "set_device",
    "set_device_idx": "set_device",
    "device_index": "device",
    "get_memory_info": "mem_get_info",
}


def _public(module: Any) -> list[str]:
    """The functions (and ``device_index``, a context-manager class) a script calls; other classes stay."""
    names = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
    found = [n for n in names if callable(getattr(module, n, None))]
    return [n for n in found if n == "device_index" or not _is_class(module, n)]


def _is_class(module: Any, name: str) -> bool:
    return isinstance(getattr(module, name), type)


def _host_answer(name: str) -> tuple[Callable[..., Any], str]:
    """The ``cpu`` side's answer for ``name`` and what the ledger says of it."""

    def no_accelerator(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{NO_ACCELERATOR} (torch.accelerator.{name} on the cpu side, as on a CPU-only machine)")

    def device_index(device: Any, /) -> Any:
        if device is None:
            return contextlib.nullcontext()
        return no_accelerator()

    found: dict[str, tuple[Callable[..., Any], str]] = {
        "is_available": (lambda: False, "answered False: cpu has no accelerator, as on a CPU-only machine"),
        "current_accelerator": (
            lambda check_available=False: None,
            "answered None: cpu has no accelerator, as on a CPU-only machine",
        ),
        "device_count": (lambda: 0, "answered 0: cpu has no accelerator, as on a CPU-only machine"),
        "device_index": (device_index, "no accelerator on cpu: a no-op for None, else PyTorch's error"),
    }
    return found.get(name, (no_accelerator, "no accelerator on cpu: PyTorch's error, as on a CPU-only machine"))


def _device_answer(
    name: str, kind: str, real: Callable[..., Any], current: str | None
) -> tuple[Callable[..., Any], str]:
    """A device side's answer for ``name``: PyTorch's own where ``kind`` is the current
    accelerator, else the device module's."""
    import torch

    if current == kind:
        return real, f"-> {kind}, the current accelerator"
    try:
        module = torch.get_device_module(kind)
    except (RuntimeError, AttributeError):
        module = None

    def is_available() -> bool:
        return bool(module.is_available()) if module is not None and hasattr(module, "is_available") else True

    def current_accelerator(check_available: bool = False) -> Any:
        return None if check_available and not is_available() else torch.device(kind)

    own = {"is_available": is_available, "current_accelerator": current_accelerator}
    if name in own:
        return own[name], f"-> {kind}"
    counterpart = _MODULE_NAMES.get(name, name)
    if module is not None and hasattr(module, counterpart):
        return getattr(module, counterpart), f"-> torch.{kind}.{counterpart}"

    def unmapped(*args: Any, **kwargs: Any) -> Any:
        raise RemapError(
            f"torch.accelerator.{name} has no counterpart on {kind}",
            hint=f"torch.{kind} has no {counterpart}: ask the device's own module, or leave the call out",
        )

    return unmapped, f"no counterpart on {kind}"


def accelerator_functions(accelerator: Any, devices: DeviceMap, recorder: Recorder) -> dict[str, Callable[..., Any]]:
    """Stand-ins for the public functions of the module ``accelerator`` (``torch.accelerator``),
    answering for the remap's target device; see the module's docstring."""
    target = next(iter(devices.targets.values()))[0]
    found = accelerator.current_accelerator()
    current = found.type if found is not None else None
    functions = {}
    for name in _public(accelerator):
        real = getattr(accelerator, name)
        answer, how = _host_answer(name) if target == "cpu" else _device_answer(name, target, real, current)
        functions[name] = _stand_in(name, real, answer, how, target, devices, recorder)
    return functions


def host_accelerator_query(devices: DeviceMap, recorder: Recorder) -> Callable[[], Any] | None:
    """A stand-in for ``torch._C._get_accelerator`` on a run remapped to the host (None for a
    device target: the truth is its answer). PyTorch's own code asks it, not
    ``torch.accelerator``, where it picks a device by itself (FSDP2's default mesh,
    ``init_process_group``'s device): on a machine with an accelerator a host run would put its
    mesh there, beside a gloo process group. It answers the host, for PyTorch too."""
    if next(iter(devices.targets.values()))[0] != "cpu":
        return None
    import torch

    def get_accelerator() -> Any:
        recorder.record("torch._C._get_accelerator (asked by torch)", reason="answered cpu: the run is on the host")
        return torch.device("cpu")

    return get_accelerator


def _stand_in(
    name: str,
    real: Callable[..., Any],
    answer: Callable[..., Any],
    how: str,
    kind: str,
    devices: DeviceMap,
    recorder: Recorder,
) -> Callable[..., Any]:
    api = f"torch.accelerator.{name}"

    def stand_in(*args: Any, **kwargs: Any) -> Any:
        if caller_kind(1)[0] == "torch":
            return real(*args, **kwargs)
        # a device named in the script's terms (synchronize("cuda")) is the target's; an index stays one
        args = tuple(_mapped(a, devices) if isinstance(a, str) or type(a).__name__ == "device" else a for a in args)
        recorder.record(api, reason=how)
        return answer(*args, **kwargs)

    stand_in.__name__ = stand_in.__qualname__ = name
    stand_in.__doc__ = f"``{api}`` answering for {kind}: {how}."
    stand_in.__wrapped__ = real  # type: ignore[attr-defined]
    return stand_in


def _mapped(value: Any, devices: DeviceMap) -> Any:
    mapped = devices.map(value)
    return value if mapped is None else mapped
