"""The ``emu`` torch.compile backend: compiles once per new input shape (static shapes only).

Like compilers that require static shapes (Trainium's among them), it specialises each
graph on the concrete shapes it is called with: a call with an unseen shape signature is a
new compilation, recorded in :data:`COMPILATIONS`. The "compiled" graph then runs eagerly on
the device, so the device's own counters still see every op.
"""

from __future__ import annotations

import itertools
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
    import torch._dynamo

    if "emu" not in torch._dynamo.list_backends(exclude_tags=()):
        torch._dynamo.register_backend(emu_backend, name="emu")
