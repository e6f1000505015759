"""Export engines: run a model through ``torch.export`` and an inference engine of its own.

These targets replace the model with an exported program compiled by another runtime:
``onnxrt`` (``torch.onnx.export(..., dynamo=True)`` then an ONNX Runtime CPU session) and
``openvino_export`` (``openvino.convert_model`` of the exported program, then the OpenVINO CPU
plugin). Unlike a ``torch.compile`` backend, nothing can silently fall back to PyTorch: an
export or conversion failure is an error of the target.

Each new input shape signature is exported and compiled once (static shapes, as such engines
are usually deployed); :attr:`ExportEngine.compilations` records every one with its cost.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bakeoff.target.spec import Target

__all__ = ["ENGINES", "ExportEngine", "engine_status", "make_engine"]


@dataclass(frozen=True)
class EngineInfo:
    module: str
    install: str
    precisions: tuple[str, ...]


ENGINES: dict[str, EngineInfo] = {
    "onnxrt": EngineInfo("onnxruntime", "pip install 'bakeoff[onnx]'", ("f32",)),
    "openvino_export": EngineInfo("openvino", "pip install 'bakeoff[openvino]'", ("f32", "bf16", "f16")),
}


def importable(module: str) -> bool:
    """Whether ``module`` can be found, without importing it (a blocked or broken entry counts as not)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def engine_status(name: str, device: str | None) -> str | None:
    """Why the engine cannot run here, or None."""
    info = ENGINES[name]
    for module in (info.module, *(("onnx", "onnxscript") if name == "onnxrt" else ())):
        if not importable(module):
            return f"backend '{name}' needs {module} ({info.install})"
    if device is not None and device != "cpu":
        return f"backend '{name}' runs on the CPU in this release, not on {device}"
    return None


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
class Compilation:
    signature: tuple
    seconds: float


class ExportEngine:
    """A callable standing in for the model; exports and compiles once per input signature."""

    name = "engine"

    def __init__(self, model: Any, target: Target) -> None:
        self.model = model
        self.target = target
        self.compilations: list[Compilation] = []
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
            self.compilations.append(Compilation(signature[1], time.perf_counter() - started))
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


class OnnxRuntimeEngine(ExportEngine):
    """``torch.onnx.export(exported_program, dynamo=True)`` run by an ONNX Runtime CPU session."""

    name = "onnxrt"

    def _build(self, exported: Any, tensors: list) -> Callable[[list], list]:
        import onnxruntime
        import torch

        program = torch.onnx.export(exported, dynamo=True, verbose=False)
        session = onnxruntime.InferenceSession(
            program.model_proto.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        names = [i.name for i in session.get_inputs()]

        def run(inputs: list) -> list:
            feed = {name: t.detach().numpy() for name, t in zip(names, inputs, strict=True)}
            return [torch.from_numpy(out) for out in session.run(None, feed)]

        return run


class OpenVINOExportEngine(ExportEngine):
    """``openvino.convert_model(exported_program)`` compiled for the OpenVINO CPU plugin.

    The inference precision is the target's ``precision`` option when given, else the
    plugin's default, which is bf16 on CPUs with bf16 support: the precision it ran in is
    recorded in the signals either way.
    """

    name = "openvino_export"

    def __init__(self, model: Any, target: Target) -> None:
        super().__init__(model, target)
        self.precision: str | None = None

    def _build(self, exported: Any, tensors: list) -> Callable[[list], list]:
        import openvino
        import torch

        core = openvino.Core()
        config = {"INFERENCE_PRECISION_HINT": self.target.precision} if self.target.precision else {}
        compiled = core.compile_model(openvino.convert_model(exported), "CPU", config)
        hint = compiled.get_property("INFERENCE_PRECISION_HINT")
        self.precision = str(getattr(hint, "type_name", None) or hint)
        outputs = compiled.outputs

        bf16 = [out.get_element_type().type_name == "bf16" for out in outputs]

        def run(inputs: list) -> list:
            result = compiled(
                [t.detach().float().numpy() if t.dtype == torch.bfloat16 else t.detach().numpy() for t in inputs]
            )
            # numpy has no bfloat16: OpenVINO hands bf16 outputs back as their raw 16-bit patterns
            return [
                torch.from_numpy(result[out]).view(torch.bfloat16) if is_bf16 else torch.from_numpy(result[out])
                for out, is_bf16 in zip(outputs, bf16, strict=True)
            ]

        return run

    def signals(self) -> dict[str, Any]:
        data = super().signals()
        data[self.name]["precision"] = self.precision
        return data


def make_engine(model: Any, target: Target) -> ExportEngine:
    engine = {"onnxrt": OnnxRuntimeEngine, "openvino_export": OpenVINOExportEngine}[target.backend or ""]
    return engine(model, target)
