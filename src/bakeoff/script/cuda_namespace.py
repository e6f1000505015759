"""A stand-in for ``torch.cuda`` that answers for the target device.

A function mode never sees ``torch.cuda.synchronize()`` and friends: they are plain Python
functions. :class:`CudaNamespace` takes the place of ``torch.cuda`` (as ``torch.cuda`` and in
``sys.modules``, so ``from torch.cuda import synchronize`` finds it too) with the calls a script
makes, each sent to the target's device module (``torch.get_device_module``), PyTorch's
``torch.accelerator`` where the target is the current accelerator, or a host answer for
``cpu``. Every call is recorded in the ledger.

Memory queries (``memory_allocated``, ``max_memory_allocated``, ``memory_reserved``,
``max_memory_reserved``, ``reset_peak_memory_stats``, ``empty_cache``, ``mem_get_info``) ask the
device's own module first, then ``torch.accelerator``. A device that cannot answer one (PyTorch
asserts when a device's allocator is not its caching ``DeviceAllocator``, as for a PrivateUse1
device with a plain allocator) gets the answer the ``cpu`` reference gets (0, or nothing done),
recorded as ``torch.cuda.NAME (answered by bakeoff)`` with why the device could not: a script
that prints its peak memory runs on as it does on the host, and the ledger says the figure is not
the device's. ``mem_get_info`` has no such stand-in (the host's free memory is no device's): a
device that cannot say is a :class:`~bakeoff.errors.RemapError` naming it.

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

from bakeoff.env import host_memory
from bakeoff.errors import RemapError
from bakeoff.script.devices import DeviceMap
from bakeoff.script.ledger import Recorder, caller_kind

__all__ = ["ALLOCATOR", "MAPPED", "CudaNamespace", "UnmappedAttribute"]

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
        "mem_get_info": (lambda device=None: _host_memory(), "the host's available and total memory"),
        "get_device_name": (lambda device=None: platform.processor() or "cpu", "the host processor's name"),
        "is_bf16_supported": (lambda including_emulation=True: True, "answered True"),
        "Event": (HostEvent, "a host time stamp"),
        "Stream": (lambda *args, **kwargs: torch.cpu.Stream(), "torch.cpu.Stream"),
        "current_stream": (lambda device=None: torch.cpu.current_stream(), "torch.cpu.current_stream"),
        "stream": (torch.cpu.stream, "torch.cpu.stream"),
        "device": (lambda device: contextlib.nullcontext(), "the host has one device"),
    }
    if name == "mem_get_info" and host_memory() is None:
        return None
    return table.get(name)


def _host_memory() -> tuple[int, int]:
    found = host_memory()
    if found is None:
        raise RemapError("torch.cuda.mem_get_info: this host does not say how much memory it has free")
    return found


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
    "mem_get_info",
    "get_device_name",
    "is_bf16_supported",
    "Event",
    "Stream",
    "current_stream",
    "stream",
    "device",
)

#: Functions whose first argument is a device: it is the target's (``set_device(1)`` on a target
#: given as ``emu:0``, ranks sharing one device, sets ``emu:0``).
_DEVICE_FIRST = frozenset({"set_device", "synchronize", "get_device_name"})


def _shared_count(count: Callable[[], int], how: str) -> tuple[Callable[[], int], str]:
    """``device_count`` for ranks that share one device (the host, or a target given with its
    index): the ranks of this machine (torchrun's ``LOCAL_WORLD_SIZE``), as many devices as they
    need, since each rank's ``cuda:LOCAL_RANK`` is that one device. Without torchrun's
    environment, the device's own answer."""
    import os

    def shared() -> int:
        ranks = os.environ.get("LOCAL_WORLD_SIZE", "")
        return max(count(), int(ranks)) if ranks.isdigit() else count()

    otherwise = how.removeprefix("answered ")
    return shared, f"under torchrun its LOCAL_WORLD_SIZE (the ranks share the device), else {otherwise}"


def _on_target_device(args: tuple[Any, ...], kwargs: dict[str, Any], devices: DeviceMap) -> tuple[tuple, dict]:
    """``args`` and ``kwargs`` with the first argument (or ``device=``), a device of the
    script's, mapped to the target's (:meth:`~bakeoff.script.devices.DeviceMap.map_device`)."""
    given = args[0] if args else kwargs.get("device")
    value = devices.map_device(given) if given is not None else None
    if value is None:
        return args, kwargs
    return ((value, *args[1:]), kwargs) if args else (args, {**kwargs, "device": value})


#: Names ``torch.accelerator`` answers when the target is the current accelerator.
_ACCELERATOR = {"device_count", "synchronize"}

#: The memory queries, with what a device that cannot answer gets instead: the ``cpu``
#: reference's answer and how the ledger says it (see the module's docstring). None: no stand-in.
ALLOCATOR: dict[str, tuple[Any, str] | None] = {
    "empty_cache": (None, "nothing emptied"),
    "memory_allocated": (0, "answered 0"),
    "max_memory_allocated": (0, "answered 0"),
    "memory_reserved": (0, "answered 0"),
    "max_memory_reserved": (0, "answered 0"),
    "reset_peak_memory_stats": (None, "nothing reset"),
    "mem_get_info": None,
}
#: ``torch.accelerator``'s names for them, where they differ.
_ACCELERATOR_NAMES = {"mem_get_info": "get_memory_info"}


def _device_memory(name: str, kind: str) -> list[tuple[Callable[..., Any], str]]:
    """Who can answer the memory query ``name`` on a device target, in the order they are asked:
    the device's own module, then ``torch.accelerator`` (which takes the device positionally)."""
    import torch

    found = []
    try:
        module = torch.get_device_module(kind)
    except (RuntimeError, AttributeError):
        module = None
    if module is not None and hasattr(module, name):
        found.append((getattr(module, name), f"torch.{kind}.{name}"))
    accelerator = torch.accelerator.current_accelerator()
    own = _ACCELERATOR_NAMES.get(name, name)
    if accelerator is not None and accelerator.type == kind and hasattr(torch.accelerator, own):
        function = getattr(torch.accelerator, own)

        def positional(device: Any = None, function: Callable[..., Any] = function) -> Any:
            return function() if device is None else function(device)

        found.append((positional, f"torch.accelerator.{own}"))
    return found


def _last_sentence(exc: BaseException) -> str:
    """What an exception says, short: the last sentence of its first line (PyTorch's internal
    asserts end in the sentence that names the cause)."""
    line = (str(exc).strip().splitlines() or [""])[0].rstrip(".")
    return f"{type(exc).__name__}: {line.rsplit('. ', 1)[-1][:160]}"


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
            if kind != "cpu" and name in ALLOCATOR:
                answers = _device_memory(name, kind)
                if answers or ALLOCATOR[name] is not None:
                    setattr(self, name, self._memory(name, answers, getattr(real, name, None), kind, recorder))
                continue
            found = (_host(name) if kind == "cpu" else None) or _device_side(name, kind)
            if name == "device_count" and found is not None and (kind == "cpu" or ":" in target):
                found = _shared_count(*found)
            if found is not None:
                mapped = devices if name in _DEVICE_FIRST else None
                setattr(self, name, self._redirect(name, *found, getattr(real, name, None), kind, recorder, mapped))

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
        devices: DeviceMap | None = None,
    ) -> Callable[..., Any]:
        """``torch.cuda.NAME`` answered by ``function`` (with ``devices``, its first argument
        mapped to the target's device first)."""
        api = f"torch.cuda.{name}"

        def redirected(*args: Any, **kwargs: Any) -> Any:
            if real is not None and caller_kind(1)[0] == "torch":
                return real(*args, **kwargs)
            recorder.record(api, reason=f"-> {how}" if how.startswith("torch.") else f"on {kind}: {how}")
            if devices is not None:
                args, kwargs = _on_target_device(args, kwargs, devices)
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

    @staticmethod
    def _memory(
        name: str,
        answers: list[tuple[Callable[..., Any], str]],
        real: Callable[..., Any] | None,
        kind: str,
        recorder: Recorder,
    ) -> Callable[..., Any]:
        """A memory query: the first of ``answers`` that can answer, else the ``cpu``
        reference's answer, recorded as bakeoff's (see the module's docstring)."""
        api = f"torch.cuda.{name}"
        stand_in = ALLOCATOR[name]

        def query(*args: Any, **kwargs: Any) -> Any:
            if real is not None and caller_kind(1)[0] == "torch":
                return real(*args, **kwargs)
            failed = []
            for function, how in answers:
                try:
                    answer = function(*args, **kwargs)
                except RuntimeError as exc:  # e.g. torch.accelerator on a device without a DeviceAllocator
                    failed.append(f"{how}: {_last_sentence(exc)}")
                    continue
                recorder.record(api, reason=f"-> {how}")
                return answer
            why = "; ".join(failed) or f"torch.{kind} has no {name}"
            if stand_in is None:
                raise RemapError(
                    f"{api}: {kind} cannot say how much memory it has ({why})",
                    hint="size the work without asking the device's free memory, or run on a device that says it",
                )
            value, said = stand_in
            recorder.record(f"{api} (answered by bakeoff)", reason=f"{kind} cannot answer ({why}): {said}, as on cpu")
            return value

        query.__name__ = query.__qualname__ = name
        query.__doc__ = f"``{api}`` remapped to {kind}: its answer, else the cpu reference's."
        return query

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
