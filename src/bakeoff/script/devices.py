"""Device and process-group backend names of a script, mapped to the target's.

A mapping names device *types* on the left (``cuda``) and a device on the right (``cpu``,
``emu``, ``xpu:1``). ``cuda:3`` becomes ``xpu:3`` when the right side has no index, the right
side's device when it has one, and ``cpu`` for ``cpu`` (the host has one device). A bare integer
device (``device=0``) means the first accelerator to PyTorch, so it is mapped when ``cuda`` is.

What it cannot see: device names a script builds from parts PyTorch never receives (an
``f"cuda:{rank}"`` compared with a string), and backends named by anything else than their
string (a plugin's own backend object).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from bakeoff.errors import RemapError

__all__ = ["DeviceMap", "map_backend"]

_DEVICE = re.compile(r"^([a-z_][a-z0-9_]*)(?::(\d+))?$")


class DeviceMap:
    """The device rewrites of one remap: ``{"cuda": "cpu"}``.

    Raises:
        RemapError: a left side is not a bare device type, or a right side is not a device name.
    """

    def __init__(self, mapping: Mapping[str, str]) -> None:
        self.targets: dict[str, tuple[str, int | None]] = {}
        for source, target in mapping.items():
            if not _DEVICE.match(source) or ":" in source:
                raise RemapError(f"cannot remap {source!r}: the left side is a device type", hint="e.g. cuda=cpu")
            match = _DEVICE.match(str(target))
            if not match:
                raise RemapError(f"cannot remap {source} to {target!r}: not a device name", hint="e.g. cpu, xpu:0")
            self.targets[source] = (match[1], int(match[2]) if match[2] is not None else None)

    @property
    def sources(self) -> tuple[str, ...]:
        return tuple(self.targets)

    def target_type(self, source_type: str) -> str | None:
        """The target's device type for ``source_type``, or None when it is not remapped."""
        found = self.targets.get(source_type)
        return found[0] if found else None

    def map_name(self, name: str) -> str | None:
        """``name`` (``cuda``, ``cuda:1``) rewritten, or None when it is not a remapped device."""
        match = _DEVICE.match(name)
        if not match or match[1] not in self.targets:
            return None
        kind, index = self.targets[match[1]]
        if index is None and kind != "cpu" and match[2] is not None:
            index = int(match[2])
        return kind if index is None else f"{kind}:{index}"

    def map_index(self, index: int) -> str | None:
        """A bare device index (PyTorch's first accelerator), or None when ``cuda`` is not remapped."""
        return self.map_name(f"cuda:{index}") if "cuda" in self.targets else None

    def map(self, value: Any) -> Any:
        """``value`` (a device name, ``torch.device`` or index) rewritten, or None when it is not
        a remapped device (``bool`` is not an index)."""
        if isinstance(value, str):
            return self.map_name(value)
        if isinstance(value, int) and not isinstance(value, bool):
            return self.map_index(value)
        kind = getattr(value, "type", None)
        if isinstance(kind, str) and kind in self.targets and type(value).__name__ == "device":
            import torch

            mapped = self.map_name(str(value))
            return torch.device(mapped) if mapped is not None else None
        return None

    def map_device(self, value: Any) -> Any:
        """``value`` as :meth:`map` rewrites it, given back as a ``torch.device``, except that an
        index stays an index where the target's device has one (``1`` -> ``1`` for ``xpu``, ``0``
        for ``xpu:0``; the host's device for ``cpu``); None when it is not a remapped device."""
        found = self.map(value)
        if found is None:
            return None
        import torch

        device = torch.device(found)
        index = isinstance(value, int) and not isinstance(value, bool) and device.index is not None
        return device.index if index else device


def map_backend(
    backend: str | None, devices: DeviceMap, device_backends: Mapping[str, str] | None = None
) -> str | None:
    """The process-group backend ``backend`` rewritten for the target (``nccl`` -> ``gloo`` for cpu).

    A backend is rewritten when it is the default backend of a remapped device type, to the
    target type's default, from PyTorch's own table
    (``torch.distributed.Backend.default_device_backend_map`` unless ``device_backends`` is given).
    ``cuda:nccl,cpu:gloo`` rewrites each pair, keeping the first for a device named twice. None
    (PyTorch chooses) is left alone.

    Raises:
        RemapError: the target's device type has no default backend in the table.
    """
    if backend is None:
        return None
    if device_backends is None:
        import torch.distributed as dist

        device_backends = dist.Backend.default_device_backend_map
    owners = {b.lower(): d for d, b in device_backends.items() if d in devices.sources}

    def target_backend(name: str) -> str:
        source = owners.get(name.lower())
        if source is None:
            return name
        kind = devices.target_type(source)
        if kind not in device_backends:
            raise RemapError(
                f"no process-group backend known for device {kind!r} (to replace {name})",
                hint=f"PyTorch's table knows {', '.join(sorted(device_backends))}",
            )
        return device_backends[kind]

    if ":" not in backend:
        return target_backend(backend)
    pairs: dict[str, str] = {}
    for pair in backend.split(","):
        device, _, name = pair.strip().partition(":")
        device = devices.target_type(device) or device
        pairs.setdefault(device, target_backend(name))
    return ",".join(f"{d}:{b}" for d, b in pairs.items())
