"""Run a CUDA-style script on another device without editing it, and keep a ledger of what it took.

:class:`Remapper` installs, for the length of a ``with`` block (or between :meth:`~Remapper.install`
and :meth:`~Remapper.uninstall`, which restores every object it replaced):

* a ``TorchFunctionMode`` that rewrites device arguments of every torch function and method:
  ``device=`` keywords (names, ``torch.device`` objects, bare indices), positional device names
  and ``torch.device`` objects (``x.to("cuda")``, ``torch.device("cuda", 0)``), ``Module.to``
  (it parses its arguments through a torch function), and ``Tensor.cuda()`` and with it
  ``Module.cuda()``, as ``.to(target)``;
* a stand-in for the ``torch.cuda`` namespace (:mod:`bakeoff.script.cuda_namespace`);
* ``torch.accelerator``'s functions, answering for the target's device (``cpu``: no
  accelerator, as on a CPU-only machine; :mod:`bakeoff.script.accelerator`);
* ``torch.Generator(device=...)``, which a function mode does not see;
* autocast's and ``GradScaler``'s device type, in their classes, so ``torch.autocast``,
  ``torch.amp.autocast``, ``torch.cuda.amp.autocast`` and the decorator forms all follow;
* ``torch.load``'s ``map_location`` (and tensors saved on a remapped device when it is not given);
* the process-group backend of ``torch.distributed.init_process_group`` and ``new_group``
  (``nccl`` -> the target's, from PyTorch's own table), their ``device_id``, and
  ``DistributedDataParallel``'s ``device_ids``/``output_device`` (:mod:`bakeoff.script.remap_dist`).

**Autocast**, decided here: ``autocast("cuda", dtype=D)`` becomes the target's autocast with the
*same* dtype ``D`` (the CUDA default, float16, when none is given: the target's own default may
differ, CPU's is bfloat16). When the target cannot honour it (no autocast, or not that dtype), the
region runs without autocast, as PyTorch itself would do, and the rewrite is flagged: the script
then computes in float32 where it asked for ``D``. A dtype is never substituted silently. A
float32 autocast (``autocast("cuda", dtype=torch.float32)``, no lower precision asked) the target
cannot honour is not flagged: the region runs in float32 either way (it is listed, unflagged).

**Dtype downgrades** (``dtypes={torch.float64: torch.float32}``, by default for targets known to
lack a dtype, see :data:`DTYPE_DOWNGRADES`) apply to calls whose device was rewritten and, on a
non-host target, to ``Tensor.to``/``Tensor.double`` of tensors already there; each is flagged.

With ``strict=True`` a flagged rewrite raises :class:`~bakeoff.errors.RemapError` instead.

What it cannot see: device names compared as strings by the script (``if device == "cuda"``),
``x.device.type``/``x.is_cuda`` (they tell the truth: the target), objects taken from torch before
installation (a library's ``from torch.cuda import ...`` at import time), other threads' function
modes (PyTorch keeps the mode stack per thread; the namespace, generator, autocast, load and
process-group redirections are process-wide; with ``threads=True``, as a service's process is
remapped, every thread started after the install gets a function mode too), child processes (a fork inherits the remap;
:mod:`bakeoff.script.children` installs one in every fresh Python child), CUDA-only kernels (Triton, custom
extensions) and the autocast/device queries ``torch.is_autocast_enabled("cuda")``,
``torch.get_autocast_dtype("cuda")``.
"""

from __future__ import annotations

import inspect
import sys
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from bakeoff.errors import RemapError
from bakeoff.script.accelerator import accelerator_functions, host_accelerator_query
from bakeoff.script.cuda_namespace import CudaNamespace
from bakeoff.script.devices import DeviceMap
from bakeoff.script.ledger import Ledger, Recorder
from bakeoff.script.remap_dist import ddp_init, process_group
from bakeoff.script.threads import in_new_threads

__all__ = ["DTYPE_DOWNGRADES", "Remapper", "installed"]

#: Dtypes a device type lacks and the dtype a remap uses instead (each use flagged).
DTYPE_DOWNGRADES: dict[str, dict[torch.dtype, torch.dtype]] = {"mps": {torch.float64: torch.float32}}

_TENSOR_CUDA = torch._C.TensorBase.cuda
_TENSOR_DOUBLE = torch._C.TensorBase.double
_TENSOR_TO = torch._C.TensorBase.to
_PARSE_TO = torch._C._nn._parse_to
#: Functions whose bare-integer positional argument at this position is a device index.
_INDEX_POSITION = {_TENSOR_TO: 1, _PARSE_TO: 0, torch.device: 0}

_installed: Remapper | None = None


def installed() -> Remapper | None:
    """The remapper installed in this process, if any."""
    return _installed


def _api_name(func: Any) -> str:
    if func is _PARSE_TO:
        return "Module.to"
    if func is torch.device:
        return "torch.device"
    qualname = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
    head, _, name = qualname.rpartition(".")
    if head in ("TensorBase", "Tensor"):
        return f"Tensor.{name}"
    if head in ("_VariableFunctionsClass", ""):
        return f"torch.{name}"
    return f"{getattr(func, '__module__', None) or 'torch'}.{qualname}"


class _DeviceMode(TorchFunctionMode):
    """Rewrites remapped devices (and downgraded dtypes) in the arguments of every torch call."""

    def __init__(self, remapper: Remapper) -> None:
        super().__init__()
        self.remapper = remapper

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        remap = self.remapper
        if func is _TENSOR_CUDA:
            return remap._tensor_cuda(*args, **kwargs)
        moved: list[str] = []
        device = kwargs.get("device")
        if device is not None:
            mapped = remap.devices.map(device)
            if mapped is not None:
                kwargs = {**kwargs, "device": mapped}
                moved.append(f"{device} -> {mapped}")
        if func is torch.device and len(args) == 2 and isinstance(args[0], str) and isinstance(args[1], int):
            args = (f"{args[0]}:{args[1]}",)  # torch.device("cuda", 0): one name to map
        if args:
            new_args = list(args)
            for i, arg in enumerate(args):
                if isinstance(arg, (str, torch.device)) or (
                    isinstance(arg, int) and not isinstance(arg, bool) and _INDEX_POSITION.get(func) == i
                ):
                    mapped = remap.devices.map(arg)
                    if mapped is not None:
                        new_args[i] = mapped
                        moved.append(f"{arg} -> {mapped}")
            if moved:
                args = tuple(new_args)
        compiling = torch.compiler.is_compiling()  # dynamo traces the model: the ledger's Python would break its graph
        if moved and not compiling:
            remap.recorder.record(_api_name(func), reason=", ".join(dict.fromkeys(moved)))
        if remap.dtypes and (moved or remap._on_downgraded_target(func, args)):
            args, kwargs = remap._downgrade(func, args, kwargs)
        generator = kwargs.get("generator")
        target = kwargs.get("device")
        if generator is not None and target is not None and generator in remap._host_generators:
            # the target has no generator: draw on the host, with the host generator, then copy
            if not compiling:
                remap.recorder.record(f"{_api_name(func)} (generator)", reason=f"drawn on the host, copied to {target}")
            return func(*args, **{**kwargs, "device": "cpu"}).to(target)
        return func(*args, **kwargs)


def _disabled(recorder: Recorder, api: str, problem: str) -> None:
    """A disabled autocast region of a device without autocast: it asks for nothing, so nothing
    is left unhonoured (no numerics change), and the ledger says why it was built on the host."""
    recorder.record(f"{api} (disabled)", reason=f"{problem}: the region is disabled, as asked")


class Remapper:
    """Makes a CUDA-style script run on another device; see the module's docstring.

    Args:
        mapping: device types of the script to the target's devices, e.g. ``{"cuda": "cpu"}``.
        strict: raise :class:`~bakeoff.errors.RemapError` on a rewrite that may change numerics.
        dtypes: dtype downgrades on the target (default: :data:`DTYPE_DOWNGRADES` of its type).
        threads: also rewrite in every thread started after :meth:`install` (a server's handler
            threads; see :mod:`bakeoff.script.threads`), each with a function mode of its own.

    Raises:
        RemapError: a target is not a device this PyTorch knows (``emu`` before it is enabled).
    """

    def __init__(
        self,
        mapping: Mapping[str, str] | None = None,
        *,
        strict: bool = False,
        dtypes: Mapping[torch.dtype, torch.dtype] | None = None,
        threads: bool = False,
    ) -> None:
        self.threads = threads
        self._stop_threads: Callable[[], None] | None = None
        self.devices = DeviceMap(mapping if mapping is not None else {"cuda": "cpu"})
        for source, (kind, _) in self.devices.targets.items():
            try:
                torch.device(kind)
            except RuntimeError as exc:
                raise RemapError(
                    f"cannot remap {source} to {kind}: PyTorch knows no such device ({exc})",
                    hint="enable its backend first (emu: bakeoff.emu.enable())",
                ) from None
        kinds = {kind for kind, _ in self.devices.targets.values()}
        if dtypes is None:
            dtypes = {k: v for kind in kinds for k, v in DTYPE_DOWNGRADES.get(kind, {}).items()}
        self.dtypes = dict(dtypes)
        self._host_only = kinds == {"cpu"}
        self._target_kinds = kinds
        self.recorder = Recorder(strict=strict)
        self._mode: _DeviceMode | None = None
        self._patches: list[tuple[Any, str, Any]] = []
        self._host_generators: weakref.WeakSet[Any] = weakref.WeakSet()  # stand-ins for a target's

    @property
    def strict(self) -> bool:
        return self.recorder.strict

    @property
    def ledger(self) -> Ledger:
        """Every rewrite so far, as a frozen value."""
        return self.recorder.ledger()

    # -- installation ----------------------------------------------------------------------

    def install(self) -> Remapper:
        """Install every redirection in this process (one remapper at a time).

        Raises:
            RemapError: another remapper is installed.
        """
        global _installed
        if _installed is not None:
            raise RemapError("a device remap is already installed in this process", hint="uninstall it first")
        try:
            self._install_patches()
            self._mode = _DeviceMode(self)
            self._mode.__enter__()
            if self.threads:
                self._stop_threads = in_new_threads(lambda: _DeviceMode(self))
        except BaseException:
            self._restore()
            raise
        _installed = self
        return self

    def uninstall(self) -> None:
        """Restore every object :meth:`install` replaced and leave the function mode.

        Raises:
            RemapError: another function mode entered after this one is still active (leave it first).
        """
        global _installed
        if _installed is not self:
            return
        if self._stop_threads is not None:
            self._stop_threads()
            self._stop_threads = None
        if self._mode is not None:
            stack = torch.overrides._get_current_function_mode_stack()
            if not stack or stack[-1] is not self._mode:
                raise RemapError(
                    "cannot uninstall the device remap: another torch function mode is active above it",
                    hint="leave that mode first",
                )
            self._mode.__exit__(None, None, None)
            self._mode = None
        self._restore()
        _installed = None

    def __enter__(self) -> Remapper:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    def _patch(self, owner: Any, name: str, value: Any) -> None:
        if isinstance(owner, dict):
            self._patches.append((owner, name, owner[name]))
            owner[name] = value
        else:
            self._patches.append(
                (owner, name, owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name))
            )
            setattr(owner, name, value)

    def _restore(self) -> None:
        while self._patches:
            owner, name, value = self._patches.pop()
            if isinstance(owner, dict):
                owner[name] = value
            else:
                setattr(owner, name, value)

    def _install_patches(self) -> None:
        if "cuda" in self.devices.sources:
            namespace = CudaNamespace(torch.cuda, self.devices, self.recorder)
            self._patch(sys.modules, "torch.cuda", namespace)
            self._patch(torch, "cuda", namespace)
        # after the namespace, which asks the real torch.accelerator what the process has
        for name, function in accelerator_functions(torch.accelerator, self.devices, self.recorder).items():
            self._patch(torch.accelerator, name, function)
        host = host_accelerator_query(self.devices, self.recorder)
        if host is not None and torch._C._get_accelerator().type != "cpu":  # only where there is an accelerator
            self._patch(torch._C, "_get_accelerator", host)
        self._patch(torch, "Generator", self._generator_class())
        autocast = torch.amp.autocast_mode.autocast
        self._patch(autocast, "__init__", self._autocast_init(autocast.__dict__["__init__"]))
        scaler = torch.amp.grad_scaler.GradScaler
        self._patch(scaler, "__init__", self._scaler_init(scaler.__dict__["__init__"]))
        load = self._load(torch.serialization.load)
        self._patch(torch, "load", load)
        self._patch(torch.serialization, "load", load)
        if torch.distributed.is_available():
            import torch.distributed as dist
            from torch.distributed import distributed_c10d
            from torch.nn.parallel import DistributedDataParallel

            for name in ("init_process_group", "new_group"):
                wrapped = process_group(name, getattr(distributed_c10d, name), self.devices, self.recorder)
                self._patch(distributed_c10d, name, wrapped)
                self._patch(dist, name, wrapped)
            init = ddp_init(DistributedDataParallel.__dict__["__init__"], self.devices, self.recorder)
            self._patch(DistributedDataParallel, "__init__", init)

    # -- the redirections ------------------------------------------------------------------

    def _tensor_cuda(self, tensor: torch.Tensor, device: Any = None, non_blocking: bool = False, **kwargs: Any) -> Any:
        target = self.devices.map("cuda" if device is None else device)
        if target is None:  # ``.cuda(torch.device("xpu"))``: not ours to rewrite
            return _TENSOR_CUDA(tensor, device, non_blocking, **kwargs)
        self.recorder.record("Tensor.cuda", reason=f"-> .to({str(target)!r})")
        result = tensor.to(target, non_blocking=non_blocking, **kwargs)
        if self.dtypes and result.dtype in self.dtypes:
            return self._downgrade(_TENSOR_TO, (result, result.dtype), {})[0][0]
        return result

    def _on_downgraded_target(self, func: Any, args: tuple) -> bool:
        return (
            not self._host_only
            and func in (_TENSOR_TO, _TENSOR_DOUBLE)
            and bool(args)
            and isinstance(args[0], torch.Tensor)
            and args[0].device.type in self._target_kinds
        )

    def _downgrade(self, func: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        changed: list[str] = []
        dtype = kwargs.get("dtype")
        if isinstance(dtype, torch.dtype) and dtype in self.dtypes:
            kwargs = {**kwargs, "dtype": self.dtypes[dtype]}
            changed.append(f"{dtype} -> {self.dtypes[dtype]}")
        new_args = list(args)
        for i, arg in enumerate(args):
            if isinstance(arg, torch.dtype) and arg in self.dtypes:
                new_args[i] = self.dtypes[arg]
                changed.append(f"{arg} -> {self.dtypes[arg]}")
        if func is _TENSOR_DOUBLE and torch.float64 in self.dtypes:
            func, new_args = _TENSOR_TO, [args[0], self.dtypes[torch.float64]]
            changed.append(f"torch.float64 -> {self.dtypes[torch.float64]}")
        if changed:
            kinds = ", ".join(sorted(self._target_kinds))
            self.recorder.record(
                f"{_api_name(func)} (dtype)",
                reason=f"{', '.join(dict.fromkeys(changed))}: {kinds} lacks the dtype",
                numerics=True,
            )
        return tuple(new_args), kwargs

    def _generator_class(self) -> type:
        real = torch._C.Generator
        remap = self

        class _Meta(type(real)):  # type: ignore[misc]
            def __instancecheck__(cls, obj: Any) -> bool:
                return isinstance(obj, real)

            def __subclasscheck__(cls, sub: type) -> bool:
                return issubclass(sub, real)

        class Generator(real, metaclass=_Meta):  # type: ignore[misc,valid-type]
            __doc__ = real.__doc__

            def __new__(cls, device: Any = "cpu") -> Any:
                mapped = remap.devices.map(device)
                if mapped is None:
                    return real.__new__(cls, device=device)
                try:
                    generator = real.__new__(cls, device=mapped)
                except (RuntimeError, NotImplementedError):
                    # no generator of its own: a host generator, whose draws the mode copies over
                    generator = real.__new__(cls, device="cpu")
                    remap._host_generators.add(generator)
                    remap.recorder.record(
                        "torch.Generator",
                        reason=f"device {device} -> a host generator ({mapped} has none): factories that use it "
                        f"draw on the host and copy to {mapped}",
                    )
                    return generator
                remap.recorder.record("torch.Generator", reason=f"device {device} -> {mapped}")
                return generator

        Generator.__module__ = "torch"
        return Generator

    def _autocast_init(self, original: Callable[..., None]) -> Callable[..., None]:
        remap = self

        def attempt(ac: Any, kind: str, asked: Any, enabled: bool, cache_enabled: Any) -> str:
            """Set ``ac`` up as autocast on ``kind``: "" when it took, else why not (``ac`` is then
            a disabled region)."""
            try:
                original(ac, kind, asked, enabled, cache_enabled)
            except (RuntimeError, AssertionError) as exc:
                original(ac, "cpu", torch.bfloat16, False, cache_enabled)
                return f"{kind} has no autocast ({str(exc).strip().splitlines()[0][:120]})"
            return ""

        def __init__(
            ac: Any, device_type: str, dtype: torch.dtype | None = None, enabled: bool = True, cache_enabled: Any = None
        ) -> None:
            kind = remap.devices.target_type(device_type) if isinstance(device_type, str) else None
            if kind is None and device_type in {k for k, _ in remap.devices.targets.values()} - {"cpu"}:
                kind = device_type  # the target asked for by its own name (torch.accelerator): judged alike
            if kind is None or torch._jit_internal.is_scripting():
                if enabled or not isinstance(device_type, str):
                    return original(ac, device_type, dtype, enabled, cache_enabled)
                # a disabled region of a device that may lack autocast (torch.utils.checkpoint's
                # recompute names the process's PrivateUse1 device): nothing asked, nothing changes
                problem = attempt(ac, device_type, dtype, enabled, cache_enabled)
                if problem:
                    _disabled(remap.recorder, f'torch.autocast("{device_type}")', problem)
                return None
            asked = dtype if dtype is not None else torch.get_autocast_dtype(device_type)
            problem = attempt(ac, kind, asked, enabled, cache_enabled)
            if not problem and enabled and not ac._enabled:
                problem = f"{kind} autocast does not support {asked}"
            elif not problem and enabled and ac.fast_dtype != asked:
                problem = f"{kind} autocast chose {ac.fast_dtype}"
            api = f'torch.autocast("{device_type}")'
            if problem and not enabled:
                _disabled(remap.recorder, api, problem)
            elif problem and asked == torch.float32:  # float32 asked, float32 run: no precision changes
                remap.recorder.record(
                    f"{api} (float32, not applied)",
                    reason=f"{problem}: float32 autocast changes no precision, the region runs in float32 as asked",
                )
            elif problem:
                remap.recorder.record(
                    f"{api} (not honoured)",
                    reason=f"{problem}: the region runs in float32, not {asked}",
                    numerics=True,
                )
            else:
                remap.recorder.record(api, reason=f"-> autocast({kind!r}, dtype={asked}, enabled={enabled})")

        __init__.__doc__ = original.__doc__
        return __init__

    def _scaler_init(self, original: Callable[..., None]) -> Callable[..., None]:
        remap = self

        def __init__(scaler: Any, device: str = "cuda", *args: Any, **kwargs: Any) -> None:
            kind = remap.devices.target_type(device)
            if kind is None:
                return original(scaler, device, *args, **kwargs)
            original(scaler, kind, *args, **kwargs)
            asked = inspect.signature(original).bind(scaler, device, *args, **kwargs).arguments.get("enabled", True)
            if asked and not scaler._enabled:
                remap.recorder.record(
                    f'GradScaler("{device}") (not honoured)',
                    reason=f"{kind} has no gradient scaling: float16 gradients may underflow",
                    numerics=True,
                )
            else:
                remap.recorder.record(f'GradScaler("{device}")', reason=f"-> GradScaler({kind!r})")

        return __init__

    def _load(self, original: Callable[..., Any]) -> Callable[..., Any]:
        remap = self

        def load(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
            if map_location is None:
                saved_on: list[str] = []

                def restore(storage: Any, location: str) -> Any:
                    mapped = remap.devices.map_name(location)
                    if mapped is not None and not saved_on:
                        saved_on.append(location)
                        remap.recorder.record(
                            "torch.load (saved on a remapped device)", reason=f"{location} -> {mapped}"
                        )
                    return torch.serialization.default_restore_location(storage, mapped or location)

                return original(f, restore, *args, **kwargs)
            if isinstance(map_location, dict):
                mapped_dict = {k: remap.devices.map(v) or v for k, v in map_location.items()}
                if mapped_dict != map_location:
                    remap.recorder.record("torch.load(map_location=)", reason=f"{map_location} -> {mapped_dict}")
                return original(f, mapped_dict, *args, **kwargs)
            mapped = remap.devices.map(map_location) if not callable(map_location) else None
            if mapped is not None:
                remap.recorder.record("torch.load(map_location=)", reason=f"{map_location} -> {mapped}")
                map_location = mapped
            return original(f, map_location, *args, **kwargs)

        load.__doc__ = original.__doc__
        load.__wrapped__ = original  # type: ignore[attr-defined]
        return load
