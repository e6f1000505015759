"""``onnxrt``: ``torch.onnx.export(exported_program, dynamo=True)`` run by an ONNX Runtime CPU session."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bakeoff.target.engines.export import ExportAdapter, ExportEngine

__all__ = ["OnnxRuntime", "OnnxRuntimeEngine"]


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


class OnnxRuntime(ExportAdapter):
    name = "onnxrt"
    modules = ("onnxruntime", "onnx", "onnxscript")
    install = "pip install 'bakeoff[onnx]'"
    runner = OnnxRuntimeEngine
    in_demo = True
