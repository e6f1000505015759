"""Export engines: run a model through ``torch.export`` and an inference engine of its own.

These targets replace the model with an exported program compiled by another runtime (the
adapters :mod:`~bakeoff.target.engines.onnxrt` and :mod:`~bakeoff.target.engines.openvino_export`
subclass :class:`ExportAdapter` and :class:`ExportEngine`). Unlike a ``torch.compile`` backend,
nothing can silently fall back to PyTorch: an export or conversion failure is an error of the
target.

Each new input shape signature is exported and compiled once (static shapes, as such engines
are usually deployed); :attr:`ExportEngine.compilations` records every one with its cost.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bakeoff.target.engines.base import Compiled, Engine, importable
from bakeoff.target.spec import Target

__all__ = ["ExportAdapter", "ExportEngine"]


class _FlatCall:
    """Calls the model from a flat list of tensors, with the non-tensor arguments baked in."""

    def __init__(self, model: Any, flat: list, spec: Any) -> None:
        import torch

        self.model, self.flat, self.spec = model, flat, spec
        self.positions = [i for i, value in enumerate(flat) if isinstance(value, torch.Tensor)]

    def module(self) -> Any:
        import torch
        import torch.utils._pytree as pytree

        outer = self

        class Flat(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = outer.model

            def forward(self, *tensors: Any) -> Any:
                flat = list(outer.flat)
                for position, tensor in zip(outer.positions, tensors, strict=True):
                    flat[position] = tensor
                args, kwargs = pytree.tree_unflatten(flat, outer.spec)
                return self.model(*args, **kwargs)

        return Flat()


@dataclass(frozen=True)
class ExportCompilation:
    signature: tuple
    seconds: float


class ExportEngine:
    """A callable standing in for the model; exports and compiles once per input signature."""

    name = "engine"

    def __init__(self, model: Any, target: Target) -> None:
        self.model = model
        self.target = target
        self.compilations: list[ExportCompilation] = []
        self._runners: dict[tuple, tuple[Callable[[list], list], Any]] = {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import torch
        import torch.utils._pytree as pytree

        flat, spec = pytree.tree_flatten((args, kwargs))
        tensors = [v for v in flat if isinstance(v, torch.Tensor)]
        signature = (
            str(spec),
            tuple((tuple(t.shape), str(t.dtype)) for t in tensors),
            tuple(repr(v) for v in flat if not isinstance(v, torch.Tensor)),
        )
        if signature not in self._runners:
            started = time.perf_counter()
            wrapper = _FlatCall(self.model, flat, spec).module().eval()
            with torch.no_grad():
                exported = torch.export.export(wrapper, tuple(tensors), strict=False)
            runner = self._build(exported, tensors)
            self._runners[signature] = (runner, exported.call_spec.out_spec)
            self.compilations.append(ExportCompilation(signature[1], time.perf_counter() - started))
        runner, out_spec = self._runners[signature]
        return pytree.tree_unflatten(runner(tensors), out_spec)

    def _build(self, exported: Any, tensors: list) -> Callable[[list], list]:
        raise NotImplementedError

    def compile_summary(self) -> dict[str, Any]:
        """The compilation audit's numbers: one export and compilation per input signature."""
        return {
            "graphs": len(self.compilations),
            "recompiles": max(len(self.compilations) - 1, 0),
            "recompile_reasons": tuple(f"new input shapes {list(c.signature)}" for c in self.compilations[1:]),
            "compile_seconds_total": round(sum(c.seconds for c in self.compilations), 6),
            "compilations": tuple(
                {"id": str(i), "seconds": c.seconds, "shapes": [list(s[0]) for s in c.signature]}
                for i, c in enumerate(self.compilations)
            ),
        }

    def signals(self) -> dict[str, Any]:
        return {
            self.name: {
                "compilations": len(self.compilations),
                "compile_seconds": [round(c.seconds, 4) for c in self.compilations],
            }
        }


class ExportAdapter(Engine):
    """The adapter of an export engine: CPU only, inference only, one input signature per compilation.

    Subclasses set :attr:`runner` to their :class:`ExportEngine` subclass.
    """

    device = "cpu"
    inference_only = True
    fixed_signature = True
    detail = "export engine (torch.export)"
    runner: type[ExportEngine] = ExportEngine

    def status(self, device: str | None) -> str | None:
        for module in self.modules:
            if not importable(module):
                return f"backend '{self.name}' needs {module} ({self.install})"
        if device is not None and device != "cpu":
            return f"backend '{self.name}' runs on the CPU in this release, not on {device}"
        return None

    def compile(self, model: Any, target: Target) -> Compiled:
        engine = self.runner(model, target)
        return Compiled(
            model=engine,
            compile_events=lambda: len(engine.compilations),
            compile_summary=engine.compile_summary,
            backend_signals=lambda: ({}, engine.signals()),
        )
