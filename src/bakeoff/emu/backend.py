"""The ``emu`` torch.compile backend: compiles once per new input shape (static shapes only).

Like compilers that require static shapes (Trainium's among them), it specialises each
graph on the concrete shapes it is called with: a call with an unseen shape signature is a
new compilation, recorded in :data:`COMPILATIONS`. The "compiled" graph then runs eagerly on
the device, so the device's own counters still see every op.

It is registered when ``torch._dynamo`` is imported, not before: importing dynamo costs about
as much as importing torch (a second on two cores, more under load), and most runs on the test
device never compile. A run that does imports dynamo through ``torch.compile``, which then finds
the backend registered (:func:`register_backend`).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import itertools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["COMPILATIONS", "EmuCompilation", "register_backend", "reset"]


@dataclass(frozen=True)
class EmuCompilation:
    graph: int
    shapes: tuple


COMPILATIONS: list[EmuCompilation] = []
_graph_ids = itertools.count()


def reset() -> None:
    COMPILATIONS.clear()


def _signature(args: tuple) -> tuple:
    import torch

    return tuple(tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in args)


def emu_backend(gm: Any, example_inputs: list) -> Callable[..., Any]:
    graph = next(_graph_ids)
    seen: set[tuple] = set()

    def run(*args: Any) -> Any:
        signature = _signature(args)
        if signature not in seen:
            seen.add(signature)
            COMPILATIONS.append(EmuCompilation(graph, signature))
        return gm.forward(*args)

    return run


def register_backend() -> None:
    """Register the ``emu`` backend with dynamo: now when ``torch._dynamo`` is imported, else the
    moment it is (see the module docstring)."""
    if "torch._dynamo" in sys.modules:
        _register()
    elif not any(isinstance(finder, _AfterDynamoImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterDynamoImport())


def _register() -> None:
    # the registry's own function, not list_backends: that imports every backend module, and
    # here dynamo may be imported half-way through torch._inductor's import (a circular import)
    from torch._dynamo.backends.registry import register_backend as register

    try:
        register(emu_backend, name="emu")
    except AssertionError:  # "duplicate name": registered already in this process
        pass


class _AfterDynamoImport(importlib.abc.MetaPathFinder):
    """Finds ``torch._dynamo`` through the other finders and registers the backend once its
    module has run; removes itself at its first use."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "torch._dynamo":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _RegisterAfter(spec.loader)
        return spec


class _RegisterAfter(importlib.abc.Loader):
    """A module loader that registers the backend once the module has run."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        _register()

    def __getattr__(self, name: str) -> Any:  # get_source, get_resource_reader...: the real loader's
        return getattr(self._loader, name)
