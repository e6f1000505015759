"""``openvino``: OpenVINO's ``torch.compile`` backend, watched for the fallbacks it does not announce.

The watch (:class:`bakeoff.target.openvino.OpenVINOCompileWatch`) supplies the backend's
options (the precision hint) and its signals, and is closed with the target.
"""

from __future__ import annotations

from typing import Any

from bakeoff.target.engines.base import DYNAMIC, FULLGRAPH, Compiled, DynamoBackend, Option, compile_with_dynamo
from bakeoff.target.spec import Target

__all__ = ["PRECISION", "OpenVINO"]

#: OpenVINO's ``INFERENCE_PRECISION_HINT`` (also taken by the ``openvino_export`` engine).
PRECISION = Option(
    "precision",
    "applies only to OpenVINO ({takers})",
    "drop precision=, or use dtype= to cast the model",
    values=("f32", "bf16", "f16"),
    what="precision",
    casefold=True,
)


class OpenVINO(DynamoBackend):
    name = "openvino"
    modules = ("openvino.torch",)
    device = "cpu"
    install = "pip install 'bakeoff[openvino]'"
    options = (DYNAMIC, FULLGRAPH, PRECISION)
    in_demo = True

    def compile(self, model: Any, target: Target) -> Compiled:
        from bakeoff.target.openvino import OpenVINOCompileWatch

        openvino = OpenVINOCompileWatch(target.precision)
        compiled = compile_with_dynamo(model, target, options=openvino.options())
        compiled.backend_signals = openvino.signals
        watch_close = compiled.close

        def close() -> None:
            openvino.close()
            watch_close()

        compiled.close = close
        return compiled
