"""``emu``: bakeoff's bundled *test* accelerator. Not a product feature.

None of the machines bakeoff is developed on has an accelerator, so this package registers
one through PyTorch's PrivateUse1 mechanism: a small C++ extension (built on first use with
``torch.utils.cpp_extension`` and cached) gives real device tensors (``emu:0``) whose memory is
host memory. Every op runs PyTorch's CPU kernels through one fallback; ops the test declares
*unsupported* are counted there, which gives exact ground truth for the placement audit, and
the ``emu`` compile backend compiles once per new input shape, which gives ground truth for
the compilation audit.

Enable it in a process with :func:`enable`, or for bakeoff's CLI and its workers with the
environment: ``BAKEOFF_EMU=1`` (and ``BAKEOFF_EMU_UNSUPPORTED=aten::mul,aten::softmax``).

The device has no autocast unless ``BAKEOFF_EMU_AUTOCAST=bf16`` (a comma-separated list of
``bf16``/``fp16``) gives it autocast in those dtypes, with PyTorch's shared op lists (the ones
CUDA and XPU use): without it, it is a device whose autocast a script cannot have; with
``bf16`` only, one that has bfloat16 autocast but no float16 (PyTorch silently disables it).

``torch.emu`` is the device module PyTorch's generic code looks up by the device's name (as it
does ``torch.cuda`` or ``torch.xpu``): ``torch.load(..., map_location="emu")`` enters
``torch.emu.device``, ``torch.manual_seed`` calls ``manual_seed_all``, ``torch.utils.checkpoint``
and ``torch.random.fork_rng`` save and restore ``get_rng_state``. Its answers are the truth about
emu, not a GPU's: emu's ops run CPU kernels, which draw from the host's default generator, so the
device's generator *is* that one; bfloat16 computes (``is_bf16_supported()``); one device.

For seeded numerical faults, ops can be made to return *wrong results*: with
``BAKEOFF_EMU_WRONG=aten::silu=1.01,aten::addcdiv_`` every floating output of those ops on the
device is multiplied by the factor (1.01 when none is given), and the calls are counted
(``counters()["wrong_ops"]``): ground truth for the training parity check and for localising a
divergence. Nothing on the CPU is affected.

``torch.distributed`` runs on it too: :mod:`bakeoff.emu.collectives` registers the ``emu``
process-group backend for the device (gloo over host copies), as an out-of-tree backend
registers its own.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from bakeoff.emu.extension import load_extension
from bakeoff.errors import BakeoffError

__all__ = [
    "ENV_AUTOCAST",
    "ENV_ENABLE",
    "ENV_UNSUPPORTED",
    "ENV_WRONG",
    "NAME",
    "counters",
    "enable",
    "enabled",
    "maybe_enable_from_env",
    "wrong_ops",
]

NAME = "emu"
ENV_ENABLE = "BAKEOFF_EMU"
ENV_UNSUPPORTED = "BAKEOFF_EMU_UNSUPPORTED"
ENV_WRONG = "BAKEOFF_EMU_WRONG"
ENV_AUTOCAST = "BAKEOFF_EMU_AUTOCAST"
_AUTOCAST_DTYPES = {
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp16": "float16",
    "float16": "float16",
    "half": "float16",
}
#: The factor a wrong op's outputs are scaled by when the switch gives none.
WRONG_FACTOR = 1.01
_ext: Any = None


def _device_index(device: Any) -> int:
    """emu's index for ``device`` (None, an int, ``"emu"``, ``"emu:0"`` or a ``torch.device``),
    checked the way ``torch.cuda`` checks one: emu has a single device, ``emu:0``; -1 (CUDA's
    "no device", a no-op) is taken as it.

    Raises:
        ValueError: a device of another type.
        RuntimeError: an index past the one device.
    """
    import torch

    if device is None:
        return 0
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != NAME:
            raise ValueError(f"Expected an {NAME} device, but got: {device}")
        index = 0 if device.index is None else device.index
    else:
        index = int(device)
    if index not in (0, -1):
        raise RuntimeError(f"{NAME} has a single device ({NAME}:0), got device index {index}")
    return 0


class _EmuDevice:
    """``torch.emu.device(d)``: the context manager that makes ``d`` the current device, as
    ``torch.cuda.device`` does. PyTorch enters it to move storages (``torch.load`` with
    ``map_location="emu"``). emu has one device, always current: the index is checked on
    creation and nothing changes."""

    def __init__(self, device: Any) -> None:
        self.idx = _device_index(device)
        self.prev_idx = -1

    def __enter__(self) -> _EmuDevice:
        self.prev_idx = 0
        return self

    def __exit__(self, *exc: object) -> bool:
        return False


class _EmuModule:
    """``torch.emu``: the device module PyTorch looks up for a PrivateUse1 backend.

    It has what PyTorch's generic code paths call on ``torch.cuda``/``torch.xpu`` (serialization,
    autocast, ``torch.random``, ``torch.utils.checkpoint``, backend registration), each answering
    for emu: see the package's docstring. Not here: streams and events (emu's work is synchronous;
    ``torch.Stream``/``torch.Event`` on ``emu`` are what PyTorch gives), device properties and
    capabilities (no hardware to describe). Streams and events are those of a synchronous
    device, as ``torch.cpu``'s are: ``Stream``, ``Event``, ``current_stream`` and ``stream`` exist
    for device-generic code (FSDP2 overlaps its collectives on side streams) and every wait is
    already satisfied when it is asked for; ``torch.Stream(device="emu")`` itself is refused by
    the device's C++ guard.
    """

    TEST_DEVICE = True
    device = _EmuDevice

    class Stream:
        """A stream of a synchronous device: its work is done when it is issued."""

        def __init__(self, priority: int = -1, device: Any = None) -> None:
            self.priority = priority

        def wait_stream(self, stream: Any) -> None:
            return None

        def wait_event(self, event: Any) -> None:
            return None

        def record_event(self, event: Any = None) -> Any:
            return event if event is not None else _EmuModule.Event()

        def synchronize(self) -> None:
            return None

        def query(self) -> bool:
            return True

    class Event:
        """An event of a synchronous device: complete when recorded."""

        def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
            self.enable_timing = enable_timing

        def record(self, stream: Any = None) -> None:
            return None

        def query(self) -> bool:
            return True

        def synchronize(self) -> None:
            return None

        def wait(self, stream: Any = None) -> None:
            return None

    @staticmethod
    def current_stream(device: Any = None) -> Any:
        return _DEFAULT_STREAM

    @staticmethod
    def stream(stream: Any) -> Any:
        import contextlib

        return contextlib.nullcontext(stream)

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def set_device(device: Any) -> None:
        _device_index(device)  # emu:0 is always current; another index is an error, as on CUDA

    @staticmethod
    def synchronize(device: Any = None) -> None:
        return None  # emu work is synchronous

    @staticmethod
    def is_initialized() -> bool:
        return True

    @staticmethod
    def _lazy_init() -> None:
        return None

    @staticmethod
    def _is_in_bad_fork() -> bool:
        return False

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "bakeoff emu (test device, host memory)"

    # emu's ops run CPU kernels through the fallback, and those draw from the host's default
    # generator: that generator is the device's. Seeding or restoring the device's generator is
    # therefore seeding or restoring it (what the ``cpu`` reference does for ``torch.cuda.*``),
    # so a script that seeds ``torch.cuda`` draws the same numbers on emu as on the host.
    @staticmethod
    def manual_seed(seed: int) -> None:
        import torch

        torch.default_generator.manual_seed(int(seed))

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        _EmuModule.manual_seed(seed)

    @staticmethod
    def seed() -> None:
        import torch

        torch.default_generator.seed()

    @staticmethod
    def seed_all() -> None:
        _EmuModule.seed()

    @staticmethod
    def initial_seed() -> int:
        import torch

        return int(torch.default_generator.initial_seed())

    @staticmethod
    def get_rng_state(device: Any = NAME) -> Any:
        import torch

        _device_index(device)
        return torch.default_generator.get_state()

    @staticmethod
    def set_rng_state(new_state: Any, device: Any = NAME) -> None:
        import torch

        _device_index(device)
        torch.default_generator.set_state(new_state)

    @staticmethod
    def get_rng_state_all() -> list[Any]:
        return [_EmuModule.get_rng_state()]

    @staticmethod
    def set_rng_state_all(new_states: Iterable[Any]) -> None:
        for state in new_states:
            _EmuModule.set_rng_state(state)

    @staticmethod
    def is_bf16_supported(including_emulation: bool = True) -> bool:
        """True: bfloat16 tensors compute on emu (its kernels are the host's, which have bfloat16
        for the ops). Whether *autocast* has bfloat16 is ``get_amp_supported_dtype``'s answer."""
        return True

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        return int(_ext.memory_allocated())

    @staticmethod
    def max_memory_allocated(device: Any = None) -> int:
        return int(_ext.max_memory_allocated())

    @staticmethod
    def reset_peak_memory_stats(device: Any = None) -> None:
        _ext.reset_peak_memory_stats()

    @staticmethod
    def reset_max_memory_allocated(device: Any = None) -> None:
        _ext.reset_peak_memory_stats()

    # The allocator caches nothing (a freed block goes back to the host at once), so what it
    # holds is what tensors occupy: reserved is allocated, and there is no cache to empty.
    # PyTorch's ``torch.accelerator`` memory functions cannot read it (they need a caching
    # ``DeviceAllocator`` and assert otherwise); these answer from its own counts.
    @staticmethod
    def memory_reserved(device: Any = None) -> int:
        return int(_ext.memory_allocated())

    @staticmethod
    def max_memory_reserved(device: Any = None) -> int:
        return int(_ext.max_memory_allocated())

    @staticmethod
    def empty_cache() -> None:
        return None

    @staticmethod
    def memory_stats(device: Any = None) -> dict[str, int]:
        """The counts ``torch.cuda.memory_stats`` names that emu's allocator keeps (bytes, all
        pools). Without a cache, active and reserved memory are the allocated memory."""
        current, peak = int(_ext.memory_allocated()), int(_ext.max_memory_allocated())
        stats = {}
        for kind in ("allocated", "active", "reserved"):
            stats[f"{kind}_bytes.all.current"] = current
            stats[f"{kind}_bytes.all.peak"] = peak
        return stats

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        """``(free, total)`` bytes: emu memory is host memory."""
        from bakeoff.env import host_memory

        found = host_memory()
        if found is None:
            raise RuntimeError("this host does not say how much memory it has free")
        return found

    # ``get_amp_supported_dtype`` is set by :func:`enable` only when the device has autocast
    # (``BAKEOFF_EMU_AUTOCAST``): without it, PyTorch refuses ``torch.autocast("emu")``.


def enabled() -> bool:
    return _ext is not None


def _unsupported_from_env() -> list[str]:
    return [name.strip() for name in os.environ.get(ENV_UNSUPPORTED, "").split(",") if name.strip()]


def wrong_ops(text: str) -> dict[str, float]:
    """``aten::silu=1.01,aten::mm`` -> ``{"aten::silu": 1.01, "aten::mm": 1.01}``.

    Raises:
        BakeoffError: a factor that is not a number.
    """
    ops: dict[str, float] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, factor = item.partition("=")
        try:
            ops[name.strip()] = float(factor) if sep else WRONG_FACTOR
        except ValueError:
            raise BakeoffError(
                f"{ENV_WRONG}: {item!r} has no numeric factor", hint="e.g. BAKEOFF_EMU_WRONG=aten::silu=1.01"
            ) from None
    return ops


def autocast_dtypes(text: str) -> list[str]:
    """``bf16,fp16`` -> ``["bfloat16", "float16"]``.

    Raises:
        BakeoffError: a dtype autocast cannot have.
    """
    names = []
    for item in (part.strip().lower() for part in text.split(",")):
        if not item:
            continue
        if item not in _AUTOCAST_DTYPES:
            raise BakeoffError(f"{ENV_AUTOCAST}: {item!r} is not a half precision", hint=f"e.g. {ENV_AUTOCAST}=bf16")
        names.append(_AUTOCAST_DTYPES[item])
    return names


def _set_autocast(dtypes: list[str]) -> None:
    """Give the device module PyTorch's autocast hook for ``dtypes``, or take it away (none)."""
    import torch

    if dtypes:
        supported = [getattr(torch, name) for name in dtypes]
        _EmuModule.get_amp_supported_dtype = staticmethod(lambda: list(supported))  # type: ignore[attr-defined]
    elif "get_amp_supported_dtype" in vars(_EmuModule):
        del _EmuModule.get_amp_supported_dtype  # type: ignore[attr-defined]


def enable(
    unsupported: Iterable[str] | None = None,
    wrong: dict[str, float] | None = None,
    autocast: Iterable[str] | None = None,
) -> None:
    """Register the ``emu`` device (and compile backend) in this process; idempotent.

    Args:
        unsupported: ATen op names (``aten::mul`` or ``aten::mul.Tensor``) the device "does not
            support": they still run, through the counted host fallback. Defaults to
            ``BAKEOFF_EMU_UNSUPPORTED``.
        wrong: ATen op names whose floating outputs on the device are scaled by the factor
            given (a seeded wrong result). Defaults to ``BAKEOFF_EMU_WRONG``.
        autocast: the dtypes (``bfloat16``, ``float16``) the device has autocast in; empty:
            none. Defaults to ``BAKEOFF_EMU_AUTOCAST``.

    Raises:
        BakeoffError: PrivateUse1 is already taken by another backend, or the build failed.
    """
    global _ext
    import torch

    if _ext is None:
        current = torch._C._get_privateuse1_backend_name()
        if current not in ("privateuseone", NAME):
            raise BakeoffError(
                f"cannot enable the emu test device: PrivateUse1 is already '{current}'",
                hint="run emu in a process without another out-of-tree device",
            )
        ext = load_extension()
        ext.register_hooks()
        torch.utils.rename_privateuse1_backend(NAME)
        torch._register_device_module(NAME, _EmuModule)
        torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)
        _ext = ext
        from bakeoff.emu.backend import register_backend
        from bakeoff.emu.collectives import register_process_group

        register_backend()
        register_process_group()
    _ext.set_unsupported(list(unsupported) if unsupported is not None else _unsupported_from_env())
    _ext.set_wrong(dict(wrong) if wrong is not None else wrong_ops(os.environ.get(ENV_WRONG, "")))
    _set_autocast(autocast_dtypes(",".join(autocast) if autocast is not None else os.environ.get(ENV_AUTOCAST, "")))


def maybe_enable_from_env() -> bool:
    """Enable emu when ``BAKEOFF_EMU`` is set to 1/true; returns whether it is enabled."""
    if os.environ.get(ENV_ENABLE, "").lower() in ("1", "true", "yes", "on"):
        enable()
    return enabled()


def counters(reset: bool = False) -> dict[str, Any]:
    """The device's counters: fallback ops, all device ops, transfers, syncs."""
    if _ext is None:
        raise BakeoffError("the emu test device is not enabled", hint="call bakeoff.emu.enable() or set BAKEOFF_EMU=1")
    data = dict(_ext.counters())
    if reset:
        _ext.reset_counters()
    return data


def reset_counters() -> None:
    if _ext is not None:
        _ext.reset_counters()


_DEFAULT_STREAM = _EmuModule.Stream()
