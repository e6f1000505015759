"""What can run here: devices, compile backends, and why a target cannot.

Availability is a fact about this machine, not an input error: a target that cannot run here
becomes a *skipped* result with the reason, never an exception.
"""

from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass

from bakeoff.errors import SpecError
from bakeoff.target.spec import KNOWN_DEVICES, Target

__all__ = [
    "BackendInfo",
    "DeviceInfo",
    "autocast_problem",
    "backend_status",
    "check_backend_name",
    "device_status",
    "extra_devices",
    "list_backends",
    "list_devices",
    "privateuse1_name",
    "unavailable_reason",
]


@dataclass(frozen=True)
class DeviceInfo:
    name: str
    available: bool
    count: int
    detail: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class BackendInfo:
    name: str
    available: bool
    detail: str

    def to_dict(self) -> dict:
        return asdict(self)


def privateuse1_name() -> str | None:
    """The renamed PrivateUse1 device of this process (e.g. ``neuron``), or None."""
    import torch

    name = torch._C._get_privateuse1_backend_name()
    return None if name == "privateuseone" else name


def extra_devices() -> tuple[str, ...]:
    """Device names accepted by the target parser besides the built-in ones (after loading plugins)."""
    from bakeoff.target.plugins import load_plugins

    load_plugins()
    name = privateuse1_name()
    return (name,) if name and name not in KNOWN_DEVICES else ()


def device_status(device: str) -> DeviceInfo:
    """Whether a device type is usable in this process, how many there are, and why not."""
    import torch

    if device == "cpu":
        return DeviceInfo("cpu", True, 1, f"{torch.get_num_threads()} threads")
    if device == "mps":
        ok = torch.backends.mps.is_available()
        return DeviceInfo("mps", ok, int(ok), "Apple GPU" if ok else "no Apple GPU (MPS) here")
    module = getattr(torch, device, None)
    if module is None or not hasattr(module, "is_available"):
        from bakeoff.target.engines import device_hint

        hint = device_hint(device) or "install its PyTorch plugin"
        return DeviceInfo(device, False, 0, f"PyTorch has no '{device}' device registered ({hint})")
    try:
        ok = bool(module.is_available())
        count = int(module.device_count()) if ok and hasattr(module, "device_count") else int(ok)
    except Exception as exc:  # a plugin that is installed but broken
        return DeviceInfo(device, False, 0, f"{device} probe failed: {type(exc).__name__}: {exc}")
    if not ok:
        build = ""
        if device == "cuda" and torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
            build = " (this torch is a CPU-only build)"
        return DeviceInfo(device, False, 0, f"no {device} device available{build}")
    names = []
    for index in range(count):
        try:
            names.append(module.get_device_name(index))
        except Exception:
            break
    return DeviceInfo(device, True, count, ", ".join(names) or f"{count} device(s)")


def list_devices() -> list[DeviceInfo]:
    from bakeoff.target.plugins import load_plugins

    load_plugins()
    return [device_status(name) for name in (*KNOWN_DEVICES, *extra_devices())]


_HIDDEN = ("TESTING", "minifier", "_debug", "noexcept")


def _registered_backends(include_hidden: bool = False) -> list[str]:
    """Registered dynamo backends; PyTorch's own test and debugging helpers only if asked."""
    import torch._dynamo

    names = torch._dynamo.list_backends(exclude_tags=())
    return sorted(n for n in names if include_hidden or not any(h in n for h in _HIDDEN))


def _registered(name: str) -> bool:
    """Whether dynamo has a backend ``name``: one PyTorch's own source registers (read, without
    importing ``torch._dynamo``: :mod:`bakeoff.target.dynamo_names`), else asked of its registry."""
    from bakeoff.target.dynamo_names import pytorch_backends

    return name in pytorch_backends() or name in _registered_backends(include_hidden=True)


def backend_status(name: str, device: str | None = None) -> BackendInfo:
    """Whether backend ``name`` can be used here (for ``device``, if given): a ``torch.compile``
    backend, or an engine of bakeoff's registry (:mod:`bakeoff.target.engines`) that says itself."""
    from bakeoff.target.engines import engine_for, importable

    engine = engine_for(name)
    if not engine.dynamo_backend:
        problem = engine.status(device)
        return BackendInfo(name, problem is None, problem or engine.detail)
    needs_device, how = engine.device, engine.install
    for module in engine.modules:
        if not importable(module):
            return BackendInfo(name, False, f"backend '{name}' needs {module} ({how})")
    if needs_device is not None and device is not None and device != needs_device:
        return BackendInfo(name, False, f"backend '{name}' runs on {needs_device}, not {device}")
    if needs_device is not None and device is None and needs_device not in (*KNOWN_DEVICES, *extra_devices()):
        return BackendInfo(name, False, f"backend '{name}' needs the {needs_device} device ({how})")
    if needs_device is not None and device is None and not device_status(needs_device).available:
        return BackendInfo(name, False, f"backend '{name}' needs a {needs_device} device ({how})")
    for module in engine.modules:
        if _registered(name):
            break
        try:
            importlib.import_module(module)
        except Exception as exc:
            return BackendInfo(name, False, f"importing {module} failed: {type(exc).__name__}: {exc}")
    if not _registered(name):
        return BackendInfo(name, False, f"no torch.compile backend named '{name}' is registered")
    return BackendInfo(name, True, "registered")


def list_backends() -> list[BackendInfo]:
    from bakeoff.target.engines import registry

    names = sorted(set(_registered_backends()) | set(registry()))
    return [backend_status(name) for name in names]


def unavailable_reason(target: Target) -> str | None:
    """Why ``target`` cannot run in this process, or None if it can."""
    info = device_status(target.device)
    if not info.available:
        return info.detail
    if target.index is not None and target.index >= info.count:
        return f"{target.device}:{target.index} does not exist here ({info.count} device(s))"
    if target.backend is not None:
        backend = backend_status(target.backend, target.device)
        if not backend.available:
            return backend.detail
    if target.amp is not None:
        return _amp_problem(target)
    return None


def _amp_problem(target: Target) -> str | None:
    """Why ``target`` cannot run under autocast here: an engine that exports the model instead
    of running it under ``torch.compile``, or a device without autocast in that dtype."""
    if target.backend is not None:
        from bakeoff.target.engines import engine_for

        if not engine_for(target.backend).dynamo_backend:
            return (
                f"backend '{target.backend}' exports the model ahead of the call, outside autocast: "
                f"amp={target.amp} would silently run in full precision"
            )
    return autocast_problem(target.device, target.amp)


def autocast_problem(device_type: str, dtype: str) -> str | None:
    """Why ``torch.autocast(device_type, dtype=dtype)`` would not lower precision here, or None.

    PyTorch does not refuse an autocast dtype a device lacks: it warns ("...not supported.
    Disabling autocast.") and runs everything in full precision. So the probe enters autocast
    (its weight cache off, so nothing is left behind), with the warning kept off the terminal,
    and asks whether autocast is still enabled inside.

    Args:
        device_type: the device type (``cpu``, ``cuda``, a PrivateUse1 name...).
        dtype: the torch dtype name (``bfloat16``, ``float16``).
    """
    import warnings

    import torch

    silently = f"amp={dtype} would silently run in full precision"
    try:
        available = torch.amp.is_autocast_available(device_type)
    except RuntimeError:  # a device type PyTorch's dispatcher does not know
        available = False
    if not available:
        return f"{device_type} has no autocast: {silently}"
    try:
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            with torch.autocast(device_type, dtype=getattr(torch, dtype), cache_enabled=False):
                enabled = torch.is_autocast_enabled(device_type)
    except (AssertionError, RuntimeError):  # a PrivateUse1 device module without PyTorch's autocast hook
        return f"{device_type} has no autocast: {silently}"
    if not enabled:
        return f"{device_type} has no {dtype} autocast: {silently}"
    return None


def check_backend_name(name: str) -> None:
    """Raise SpecError for a backend name that nothing here or in bakeoff's table knows.

    A known backend whose library is missing is not an input error (it is skipped with a
    reason); a typo such as ``inductr`` is.
    """
    from bakeoff.target.engines import registry

    if name in registry() or _registered(name):  # PyTorch's own names known without importing torch._dynamo
        return
    known = set(_registered_backends()) | set(registry())
    raise SpecError(
        f"unknown torch.compile backend {name!r}; registered here: " + ", ".join(sorted(known)),
        hint="run `bakeoff targets` to see the backends",
    )
