"""Named values a script hands to bakeoff for comparison: ``capture(name, value)``.

Outside a :func:`recording` block :func:`capture` does nothing but return its value, so a script
may keep the call when it runs on its own (this module imports nothing heavy). Inside one, each
call is kept per name and call index, with the :func:`time.perf_counter` time it was kept (after
its copy to the host, which waits for the work that made it): tensors detached and copied to the host (their dtype
kept), numbers as Python numbers, ``None`` and strings as they are, and lists, tuples and dicts
of these as the same structure. ``recording(losses=True)`` also captures the tensor of every
``Tensor.backward()`` call under ``loss``, by wrapping ``torch.Tensor.backward`` for the block.

A captured set is stored as one safetensors file (never pickle): every tensor and number becomes
a tensor of the file, and the structure (names, call order, containers, which leaves were Python
numbers) is JSON in the file's metadata, with a format version that a reader refuses when newer.

What it cannot see: values computed but never passed to :func:`capture` or ``backward``, losses
whose gradients are taken by ``torch.autograd.grad`` instead of ``backward``, and captures made
in child processes.
"""

from __future__ import annotations

import json
import numbers
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bakeoff.errors import BakeoffError

__all__ = ["FORMAT_VERSION", "LOSS", "Captures", "active", "capture", "recording"]

#: The version of the stored structure; a reader refuses a newer one.
FORMAT_VERSION = 1
#: The name :func:`recording` captures losses under.
LOSS = "loss"
_METADATA_KEY = "bakeoff.captures"

_active: Captures | None = None


def active() -> Captures | None:
    """The captured set being recorded in this process, or None outside a recording."""
    return _active


def capture(name: str, value: Any) -> Any:
    """Record ``value`` under ``name`` when bakeoff is recording; returns ``value`` either way.

    Raises:
        TypeError: while recording, ``value`` holds something other than tensors, numbers,
            strings, None, and lists, tuples and dicts (string or integer keys) of them.
    """
    captures = _active
    if captures is not None:
        captures.add(name, value)
    return value


def _snapshot(value: Any, where: str, devices: dict[str, int] | None = None) -> Any:
    """``value`` with its tensors detached and copied to the host; checks what it holds. Each
    tensor's device type, as it was captured, is counted in ``devices``."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, list):
        return [_snapshot(v, f"{where}[{i}]", devices) for i, v in enumerate(value)]
    if isinstance(value, tuple):  # a named tuple or torch.Size is kept as a plain tuple
        return tuple(_snapshot(v, f"{where}[{i}]", devices) for i, v in enumerate(value))
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, (str, int)) or isinstance(key, bool):
                raise TypeError(f"cannot capture {where}: key {key!r} is not a string or an integer")
        return {k: _snapshot(v, f"{where}[{k!r}]", devices) for k, v in value.items()}
    if type(value).__module__.startswith("torch") and hasattr(value, "detach"):
        if devices is not None and hasattr(value, "device"):
            kind = value.device.type
            devices[kind] = devices.get(kind, 0) + 1
        return value.detach().to("cpu", copy=True).contiguous()
    raise TypeError(
        f"cannot capture {where}: a {type(value).__name__} (tensors, numbers, strings, None, "
        "and lists, tuples and dicts of them)"
    )


class Captures:
    """The values captured in one run: per name, one entry per call, in call order."""

    def __init__(self, values: dict[str, list[Any]] | None = None) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, list[Any]] = {k: list(v) for k, v in (values or {}).items()}
        self._times: dict[str, list[float]] = {}
        self._devices: dict[str, int] = {}

    def add(self, name: str, value: Any) -> None:
        """Append a snapshot of ``value`` to ``name``'s calls (see :func:`capture`)."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"a capture's name is a non-empty string, not {name!r}")
        devices: dict[str, int] = {}
        snapshot = _snapshot(value, name, devices)
        kept = time.perf_counter()  # after the copy: a device's queued work is done
        with self._lock:
            for kind, count in devices.items():
                self._devices[kind] = self._devices.get(kind, 0) + count
            self._values.setdefault(name, []).append(snapshot)
            self._times.setdefault(name, []).append(kept)

    def times(self) -> dict[str, list[float]]:
        """The :func:`time.perf_counter` time of each call :meth:`add` kept, per name in call
        order (values read from a file have none)."""
        with self._lock:
            return {name: list(times) for name, times in self._times.items()}

    def devices(self) -> dict[str, int]:
        """How many captured tensors were on each device type when :meth:`add` kept them
        (before their copy to the host): evidence of where the run's work was done (values read
        from a file have none)."""
        with self._lock:
            return dict(self._devices)

    def names(self) -> tuple[str, ...]:
        return tuple(self._values)

    def __getitem__(self, name: str) -> list[Any]:
        """The values captured under ``name``, one per call (a copy of the list)."""
        return list(self._values[name])

    def __contains__(self, name: object) -> bool:
        return name in self._values

    def __len__(self) -> int:
        return len(self._values)

    # -- storage -----------------------------------------------------------------------------

    def to_safetensors(self, path: str | Path) -> None:
        """Write the captured set to ``path`` as safetensors (see the module's docstring)."""
        from safetensors.torch import save_file

        tensors: dict[str, Any] = {}

        def encode(value: Any) -> Any:
            if value is None:
                return {"none": True}
            if isinstance(value, str):
                return {"str": value}
            if isinstance(value, (bool, int, float)):
                import torch

                key = f"t{len(tensors)}"
                kind = "bool" if isinstance(value, bool) else "int" if isinstance(value, int) else "float"
                dtype = {"bool": torch.bool, "int": torch.int64, "float": torch.float64}[kind]
                tensors[key] = torch.tensor(value, dtype=dtype)
                return {"number": key, "kind": kind}
            if isinstance(value, (list, tuple)):
                return {"list" if isinstance(value, list) else "tuple": [encode(v) for v in value]}
            if isinstance(value, dict):
                return {"dict": [[k, encode(v)] for k, v in value.items()]}
            key = f"t{len(tensors)}"
            tensors[key] = value
            return {"tensor": key}

        with self._lock:
            structure = {name: [encode(v) for v in calls] for name, calls in self._values.items()}
        metadata = {_METADATA_KEY: json.dumps({"version": FORMAT_VERSION, "values": structure})}
        save_file(tensors, str(path), metadata=metadata)

    @classmethod
    def from_safetensors(cls, path: str | Path) -> Captures:
        """The captured set :meth:`to_safetensors` wrote to ``path``.

        Raises:
            BakeoffError: the file holds no captures, or a newer format than this bakeoff reads.
        """
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as handle:
            raw = (handle.metadata() or {}).get(_METADATA_KEY)
            if raw is None:
                raise BakeoffError(f"{path} holds no captured values", hint="write it with Captures.to_safetensors")
            document = json.loads(raw)
            if document.get("version", 0) > FORMAT_VERSION:
                raise BakeoffError(
                    f"{path} holds captures in format {document['version']}; this bakeoff reads up to {FORMAT_VERSION}",
                    hint="upgrade bakeoff",
                )

            def decode(node: dict[str, Any]) -> Any:
                if "none" in node:
                    return None
                if "str" in node:
                    return node["str"]
                if "number" in node:
                    number = handle.get_tensor(node["number"]).item()
                    return {"bool": bool, "int": int, "float": float}[node["kind"]](number)
                if "tensor" in node:
                    return handle.get_tensor(node["tensor"])
                if "list" in node:
                    return [decode(v) for v in node["list"]]
                if "tuple" in node:
                    return tuple(decode(v) for v in node["tuple"])
                return {k: decode(v) for k, v in node["dict"]}

            return cls({name: [decode(v) for v in calls] for name, calls in document["values"].items()})


@contextmanager
def recording(losses: bool = False) -> Iterator[Captures]:
    """Record :func:`capture` calls (and, with ``losses``, every ``backward()``'s tensor under
    :data:`LOSS`) for the block; ``torch.Tensor.backward`` is restored when it ends.

    Raises:
        BakeoffError: a recording is already active in this process.
    """
    global _active
    if _active is not None:
        raise BakeoffError("a capture recording is already active", hint="end it before starting another")
    captures = Captures()
    restore = None
    if losses:
        import torch

        original = torch.Tensor.__dict__["backward"]
        inside = threading.local()

        def backward(self: Any, *args: Any, **kwargs: Any) -> Any:
            # Under a torch function mode (a device remap), ``Tensor.backward`` dispatches to the
            # mode, which calls ``Tensor.backward`` (this wrapper) again on the same tensor: one loss.
            outer = getattr(inside, "tensor", None)
            if outer is self:
                return original(self, *args, **kwargs)
            captures.add(LOSS, self)
            inside.tensor = self
            try:
                return original(self, *args, **kwargs)
            finally:
                inside.tensor = outer

        backward.__doc__ = original.__doc__
        backward.__wrapped__ = original  # type: ignore[attr-defined]
        torch.Tensor.backward = backward  # type: ignore[method-assign]

        def restore() -> None:
            torch.Tensor.backward = original  # type: ignore[method-assign]

    _active = captures
    try:
        yield captures
    finally:
        _active = None
        if restore is not None:
            restore()
