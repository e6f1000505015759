"""``openvino_export``: ``openvino.convert_model`` of the exported program, compiled for the OpenVINO CPU plugin."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bakeoff.target.engines.export import ExportAdapter, ExportEngine
from bakeoff.target.engines.openvino import PRECISION
from bakeoff.target.spec import Target

__all__ = ["OpenVINOExport", "OpenVINOExportEngine"]


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


class OpenVINOExport(ExportAdapter):
    name = "openvino_export"
    modules = ("openvino",)
    install = "pip install 'bakeoff[openvino]'"
    options = (PRECISION,)
    runner = OpenVINOExportEngine
