"""The ``emu`` torch.compile backend: compiles once per new input shape (static shapes only).

Like compilers that require static shapes (Trainium's among them), it specialises each
graph on the concrete shapes it is called with: a call with an unseen shape signature is a
new compilation, recorded in :data:`COMPILATIONS`. The "compiled" graph then runs eagerly on
the device, so the device's own counters still see every op.
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
    """Make ``torch.compile(backend="emu")`` work in this process: registered with dynamo now if
    dynamo is loaded, else the moment it is. Importing dynamo costs about 1.5 s, which a process
    that enables the device but compiles nothing (most script runs) should not pay."""
    if "torch._dynamo" in sys.modules:
        _register()
    elif not any(isinstance(finder, _AfterDynamo) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterDynamo())


def _register() -> None:
    from torch._dynamo.backends import registry

    if "emu" not in registry._COMPILER_FNS:  # what list_backends reads, without importing every backend
        registry.register_backend(emu_backend, name="emu")


class _AfterDynamo(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when ``torch._dynamo`` is about to be imported, it wraps the found
    loader so that the backend is registered once the package has run, and leaves."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "torch._dynamo":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            _register()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
