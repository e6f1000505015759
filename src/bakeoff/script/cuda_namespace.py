"""A stand-in for ``torch.cuda`` that answers for the target device.

A function mode never sees ``torch.cuda.synchronize()`` and friends: they are plain Python
functions. :class:`CudaNamespace` takes the place of ``torch.cuda`` (as ``torch.cuda`` and in
``sys.modules``, so ``from torch.cuda import synchronize`` finds it too) with the calls a script
makes, each sent to the target's device module (``torch.get_device_module``), PyTorch's
``torch.accelerator`` where the target is the current accelerator, or a host answer for
``cpu``. Every call is recorded in the ledger.

Who asks decides the answer. PyTorch's own code gets the real ``torch.cuda`` (it would
otherwise take CUDA-only paths the target has not got). An installed library asking
``is_available()`` also gets the truth, as Huawei's NPU shim learned to do (libraries that see
CUDA take CUDA-only paths); since that library may then compute differently than on CUDA, the
question is flagged as numerics-changing. The user's own code gets the target's answer.

A public attribute with no counterpart on the target raises :class:`UnmappedAttribute` (a
``RemapError`` and an ``AttributeError``, so ``hasattr`` says False) naming it and the target
when the user's code asks. An installed library gets the real attribute, recorded in the ledger:
libraries name CUDA-only classes at import time (transformers annotates with
``torch.cuda.CUDAGraph``), and failing their import would hide everything else; *using* such an
attribute still fails as it would without CUDA.

What it cannot see: functions taken from ``torch.cuda`` before it was installed (a library's
``from torch.cuda import is_available`` at import time keeps the real one); properties of CUDA
hardware (``get_device_properties``, ``get_device_capability``) have no mapping.
"""

from __future__ import annotations

import contextlib
import platform
import time
import types
from collections.abc import Callable
from typing import Any

from bakeoff.errors import RemapError
from bakeoff.script.devices import DeviceMap
from bakeoff.script.ledger import Recorder, caller_kind

__all__ = ["MAPPED", "CudaNamespace", "UnmappedAttribute"]

#: Public names passed to the real module whoever asks (``torch.cuda.amp``'s classes are
#: remapped where they are defined).
PASS_THROUGH = frozenset({"amp"})


class UnmappedAttribute(RemapError, AttributeError):
    """A ``torch.cuda`` attribute the remap has no counterpart for on the target."""


class HostEvent:
    """``torch.cuda.Event`` for a ``cpu`` target: host work is done when it returns, so an event
    is a time stamp (``elapsed_time`` in milliseconds, like CUDA's)."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self.enable_timing = enable_timing
        self._stamp: float | None = None

    def record(self, stream: Any = None) -> None:
        self._stamp = time.perf_counter()

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def wait(self, stream: Any = None) -> None:
        return None

    def elapsed_time(self, end: HostEvent) -> float:
        if not (self.enable_timing and end.enable_timing) or self._stamp is None or end._stamp is None:
            raise RuntimeError("both events must be created with enable_timing=True and recorded")
        return (end._stamp - self._stamp) * 1000.0


def _host(name: str) -> tuple[Callable[..., Any], str] | None:
    """The ``cpu`` target's answer for ``torch.cuda.<name>``, and what the ledger says of it."""
    import torch

    def nothing(*args: Any, **kwargs: Any) -> None:
        return None

    def zero(*args: Any, **kwargs: Any) -> int:
        return 0

    no_stats = "the host keeps no allocator statistics: answered 0"
    table: dict[str, tuple[Callable[..., Any], str]] = {
        "device_count": (lambda: 1, "answered 1"),
        "current_device": (lambda: 0, "answered 0"),
        "set_device": (nothing, "nothing to set on the host"),
        "synchronize": (nothing, "host work is synchronous"),
        "manual_seed": (
            lambda seed: torch.default_generator.manual_seed(int(seed)) and None,
            "seeds the host generator",
        ),
        "manual_seed_all": (
            lambda seed: torch.default_generator.manual_seed(int(seed)) and None,
            "seeds the host generator",
        ),
        "get_rng_state": (lambda device="cuda": torch.get_rng_state(), "the host generator's state"),
        "set_rng_state": (lambda state, device="cuda": torch.set_rng_state(state), "the host generator's state"),
        "empty_cache": (nothing, "the host has no cache to empty"),
        "memory_allocated": (zero, no_stats),
        "max_memory_allocated": (zero, no_stats),
        "memory_reserved": (zero, no_stats),
        "max_memory_reserved": (zero, no_stats),
        "reset_peak_memory_stats": (nothing, no_stats),
        "get_device_name": (lambda device=None: platform.processor() or "cpu", "the host processor's name"),
        "is_bf16_supported": (lambda including_emulation=True: True, "answered True"),
        "Event": (HostEvent, "a host time stamp"),
        "Stream": (lambda *args, **kwargs: torch.cpu.Stream(), "torch.cpu.Stream"),
        "current_stream": (lambda device=None: torch.cpu.current_stream(), "torch.cpu.current_stream"),
        "stream": (torch.cpu.stream, "torch.cpu.stream"),
        "device": (lambda device: contextlib.nullcontext(), "the host has one device"),
    }
    return table.get(name)


#: The ``torch.cuda`` names the remap answers (where the target has a counterpart).
MAPPED = (
    "is_available",
    "is_initialized",
    "init",
    "device_count",
    "current_device",
    "set_device",
    "synchronize",
    "manual_seed",
    "manual_seed_all",
    "get_rng_state",
    "set_rng_state",
    "empty_cache",
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
    "reset_peak_memory_stats",
    "get_device_name",
    "is_bf16_supported",
    "Event",
    "Stream",
    "current_stream",
    "stream",
    "device",
)

#: Names ``torch.accelerator`` answers when the target is the current accelerator.
_ACCELERATOR = {
    "device_count",
    "synchronize",
    "empty_cache",
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
    "reset_peak_memory_stats",
}


def _device_side(name: str, kind: str) -> tuple[Callable[..., Any], str] | None:
    """The answer of a device target's module (or ``torch.accelerator``) for ``name``."""
    import torch

    if name in ("is_initialized", "init"):
        return (lambda: True) if name == "is_initialized" else (lambda: None), "nothing to initialise"
    try:
        module = torch.get_device_module(kind)
    except (RuntimeError, AttributeError):
        module = None
    accelerator = torch.accelerator.current_accelerator()
    if name in _ACCELERATOR and accelerator is not None and accelerator.type == kind:
        return getattr(torch.accelerator, name), f"torch.accelerator.{name}"
    if module is not None and hasattr(module, name):
        return getattr(module, name), f"torch.{kind}.{name}"
    if name in ("Event", "Stream"):
        real = getattr(torch, name)
        return (lambda *args, **kwargs: real(*args, device=kind, **kwargs)), f"torch.{name}(device={kind!r})"
    return None


class CudaNamespace(types.ModuleType):
    """``torch.cuda`` answering for ``target`` (a device name); see the module's docstring."""

    def __init__(self, real: types.ModuleType, devices: DeviceMap, recorder: Recorder) -> None:
        super().__init__("torch.cuda", real.__doc__)
        for name in ("__file__", "__path__", "__spec__", "__loader__", "__package__"):
            if hasattr(real, name):
                setattr(self, name, getattr(real, name))
        target = devices.map_name("cuda")
        assert target is not None, "the namespace stands in only when cuda is remapped"
        kind = target.partition(":")[0]
        self.__dict__["_bakeoff_real"] = real
        self.__dict__["_bakeoff_target"] = target
        self.__dict__["_bakeoff_recorder"] = recorder
        self.is_available = self._is_available(real, kind, recorder)
        for name in MAPPED[1:]:
            found = (_host(name) if kind == "cpu" else None) or _device_side(name, kind)
            if found is not None:
                setattr(self, name, self._redirect(name, *found, getattr(real, name, None), kind, recorder))

    @staticmethod
    def _is_available(real: types.ModuleType, kind: str, recorder: Recorder) -> Callable[[], bool]:
        def is_available() -> bool:
            who, module = caller_kind(1)
            truth = bool(real.is_available())
            if who == "torch":
                return truth
            if who == "library":
                recorder.record(
                    "torch.cuda.is_available (asked by a library)",
                    reason=f"answered {truth} (the truth) to {module}: it may take another code path than on CUDA",
                    numerics=True,
                )
                return truth
            if kind == "cpu":
                answer = True
            else:
                import torch

                try:
                    answer = bool(torch.get_device_module(kind).is_available())
                except (RuntimeError, AttributeError):
                    answer = True
            recorder.record("torch.cuda.is_available", reason=f"answered {answer}: {kind} stands in for cuda")
            return answer

        return is_available

    @staticmethod
    def _redirect(
        name: str,
        function: Callable[..., Any],
        how: str,
        real: Callable[..., Any] | None,
        kind: str,
        recorder: Recorder,
    ) -> Callable[..., Any]:
        api = f"torch.cuda.{name}"

        def redirected(*args: Any, **kwargs: Any) -> Any:
            if real is not None and caller_kind(1)[0] == "torch":
                return real(*args, **kwargs)
            recorder.record(api, reason=f"-> {how}" if how.startswith("torch.") else f"on {kind}: {how}")
            return function(*args, **kwargs)

        redirected.__name__ = redirected.__qualname__ = name
        redirected.__doc__ = f"``{api}`` remapped to {kind}: {how}."
        if not isinstance(real, type):
            return redirected

        class Redirected:  # a class stays a class: `torch.cuda.Stream | None` in a library's annotation
            def __new__(cls, *args: Any, **kwargs: Any) -> Any:
                return redirected(*args, **kwargs)

        Redirected.__name__ = Redirected.__qualname__ = name
        Redirected.__doc__ = redirected.__doc__
        return Redirected

    def __getattr__(self, name: str) -> Any:
        real = self.__dict__["_bakeoff_real"]
        who, module = caller_kind(1)
        if name.startswith("_") or name in PASS_THROUGH or who == "torch":
            return getattr(real, name)
        target = self.__dict__["_bakeoff_target"]
        if who == "library" and hasattr(real, name):  # e.g. an annotation naming torch.cuda.CUDAGraph at import
            self.__dict__["_bakeoff_recorder"].record(
                f"torch.cuda.{name} (asked by a library)",
                reason=f"the real one, given to {module}: it has no counterpart on {target}, so using it needs CUDA",
            )
            return getattr(real, name)
        raise UnmappedAttribute(
            f"torch.cuda.{name} has no counterpart on {target}",
            hint=f"the remap answers torch.cuda.{', '.join(n for n in MAPPED if n in self.__dict__)}",
        )
