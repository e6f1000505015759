"""``torch.compile`` backends that need only a library or a device; without it they are skipped with advice."""

from __future__ import annotations

from bakeoff.target.engines.base import DynamoBackend

__all__ = ["TVM", "CudaGraphs", "OpenXLA", "OpenXLAEval"]


class OpenXLA(DynamoBackend):
    name = "openxla"
    modules = ("torch_xla",)
    install = "install torch_xla"


class OpenXLAEval(OpenXLA):
    name = "openxla_eval"


class TVM(DynamoBackend):
    name = "tvm"
    modules = ("tvm",)
    install = "install Apache TVM"


class CudaGraphs(DynamoBackend):
    name = "cudagraphs"
    device = "cuda"
    install = "needs a CUDA device"
