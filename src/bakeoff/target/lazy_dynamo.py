"""Dispatch modes that do not import ``torch._dynamo`` until something else has.

PyTorch wraps every ``TorchDispatchMode`` subclass's ``__torch_dispatch__`` so that dynamo does
not trace into it, and the wrapper imports ``torch._dynamo`` at the mode's first op: about as
long as importing torch (a second on two cores, more under load). For bakeoff's audit and its
rounding-noise reference that import landed inside the script's timed run (its first span and
its wall time), on both sides of every comparison, for a script that never compiles.

:func:`lazy_dynamo` gives such a mode's function its dynamo-disabled form up front: the
function itself while ``torch._dynamo`` is not (fully) imported, when nothing can be tracing it;
dynamo's own ``disable`` of it from the first call after dynamo was imported, by the script's
``torch.compile`` or anything else, as PyTorch's wrapper would have made it. It relies on that
wrapper's cache attribute (PyTorch 2.x's ``__dynamo_disable``); where a release has none, the
mode keeps PyTorch's own behaviour.

PyTorch's wrapper lives under ``torch/``, whose frames dynamo never tries to compile; the form
given here lives in bakeoff, so its one frame is marked for dynamo to run as it is
(``skip_code``) when a mode is made with dynamo imported, or else at the mode's first op after
dynamo came (that one op's frame may still be traced once). Unmarked, every op the mode saw
inside a compiled region's eager frames (a compiled target under the placement audit, a
script's graph break) was a frame dynamo traced again, up to its recompile limit: seconds of
tracing per trial, a warning on the terminal, and graph breaks in dynamo's counters that were
bakeoff's, not the workload's.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["lazy_dynamo"]

_CACHE = "__dynamo_disable"  # the attribute torch._compile._disable_dynamo caches the disabled form in
_Mode = TypeVar("_Mode", bound=type)


def lazy_dynamo(mode: _Mode) -> _Mode:
    """``mode`` (a ``TorchDispatchMode`` subclass), its ``__torch_dispatch__`` no longer importing
    ``torch._dynamo`` by itself (see the module docstring); usable as a class decorator."""
    wrapped = mode.__dict__.get("__torch_dispatch__")
    raw = getattr(wrapped, "__wrapped__", None)
    if raw is not None and getattr(raw, _CACHE, None) is None:
        setattr(raw, _CACHE, _disabled_once_loaded(raw))
        _skip_frame_once_loaded()  # again for each new mode: dynamo's reset() may have unmarked it
    return mode


def _skip_frame_once_loaded() -> None:
    """Mark the frame of :func:`_disabled_once_loaded`'s function as one dynamo never compiles,
    where dynamo is imported (else nothing)."""
    skip_code = getattr(sys.modules.get("torch._dynamo.eval_frame"), "skip_code", None)
    if skip_code is not None:  # None: not imported yet, or a release without it
        skip_code(_CALL_CODE)


def _disabled_once_loaded(fn: Callable[..., Any]) -> Callable[..., Any]:
    disabled: Callable[..., Any] | None = None

    def call(*args: Any, **kwargs: Any) -> Any:
        nonlocal disabled
        if disabled is None:
            disable = getattr(sys.modules.get("torch._dynamo"), "disable", None)
            if disable is None:  # dynamo is not imported (or half-way): nothing traces this call
                return fn(*args, **kwargs)
            disabled = disable(fn, True, wrapping=False)
            _skip_frame_once_loaded()
        return disabled(*args, **kwargs)

    return call


#: The code object every function :func:`_disabled_once_loaded` returns shares.
_CALL_CODE = _disabled_once_loaded(lambda: None).__code__
