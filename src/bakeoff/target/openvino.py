"""Watch OpenVINO's ``torch.compile`` backend for the fallbacks it does not announce.

OpenVINO's backend falls back silently at three levels (all logged at DEBUG only):
    1. a graph it cannot convert is handed to inductor (``fx_openvino`` catches the error);
    2. ops it does not support stay outside its fused partitions and run in PyTorch;
    3. a partition that fails at run time switches permanently to PyTorch execution.
This module wraps the conversion entry point and the partitioner and listens to those debug
records, so a trial can say which ops did not run in OpenVINO. It also records the inference
precision the CPU plugin used (bf16 by default on CPUs that support it).

It reaches into OpenVINO internals (checked with OpenVINO 2026.4); if they move, the watch
says so in its signals instead of guessing.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

__all__ = ["OpenVINOCompileWatch"]

_LOGGERS = ("openvino.frontend.pytorch.torchdynamo.backend", "openvino.frontend.pytorch.torchdynamo.execute")
_PLUMBING = {"getitem", "output", "placeholder", "get_attr"}


def _op_name(node: Any) -> str:
    target = node.target
    name = getattr(target, "__name__", str(target))
    if hasattr(target, "_schema"):
        return "aten::" + target._schema.name.split("::")[-1]
    return name


def _type_name(value: Any) -> str:
    """OpenVINO element types print as "<Type: 'bfloat16'>"; keep the name."""
    return str(getattr(value, "type_name", None) or value)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.conversion_failures: list[str] = []
        self.runtime_fallbacks: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("Failed in OpenVINO execution"):
            self.conversion_failures.append(message[:500])
        elif "Falling back to native PyTorch execution" in message:
            self.runtime_fallbacks.append(message[:500])


class OpenVINOCompileWatch:
    """Install with the target, read :meth:`signals` after running, :meth:`close` at the end."""

    def __init__(self, precision: str | None) -> None:
        import openvino.torch  # noqa: F401  (registers backend="openvino")
        from openvino.frontend.pytorch.torchdynamo import backend, partition

        self.precision_hint = precision
        self.handler = _Records()
        self.graphs = 0
        self.converted_ops: Counter = Counter()
        self.left_to_pytorch: Counter = Counter()
        self.handed_to_inductor: Counter = Counter()
        self.problems: list[str] = []
        self._levels = {}
        for name in _LOGGERS:
            log = logging.getLogger(name)
            self._levels[name] = log.level
            log.setLevel(logging.DEBUG)
            log.addHandler(self.handler)
        self._backend, self._partition = backend, partition
        self._original_fx = getattr(backend, "fx_openvino", None)
        self._original_partitions = getattr(partition.Partitioner, "make_partitions", None)
        if self._original_fx is None or self._original_partitions is None:
            self.problems.append("OpenVINO internals not found; fallbacks cannot be detected with this version")
            return
        backend.fx_openvino = self._watch_conversion
        partition.Partitioner.make_partitions = self._watch_partitions()

    def options(self) -> dict[str, Any]:
        """``torch.compile(options=...)``: AOT autograd (needed for HF models) and the precision."""
        options: dict[str, Any] = {"aot_autograd": True}
        if self.precision_hint:
            options["config"] = {"INFERENCE_PRECISION_HINT": self.precision_hint}
        return options

    def _watch_conversion(self, subgraph: Any, example_inputs: Any, options: Any = None) -> Any:
        self.graphs += 1
        failures_before = len(self.handler.conversion_failures)
        compiled = self._original_fx(subgraph, example_inputs, options)
        if len(self.handler.conversion_failures) > failures_before:
            for node in subgraph.graph.nodes:
                if node.op == "call_function" and _op_name(node) not in _PLUMBING:
                    self.handed_to_inductor[_op_name(node)] += 1
        return compiled

    def _watch_partitions(self) -> Any:
        original, watch = self._original_partitions, self

        def make_partitions(partitioner: Any, graph_module: Any, options: Any) -> Any:
            fused = original(partitioner, graph_module, options)
            for node in fused.graph.nodes:
                if node.op == "call_module" and "fused_" in node.name:
                    for inner in getattr(fused, node.target).graph.nodes:
                        if inner.op == "call_function":
                            watch.converted_ops[_op_name(inner)] += 1
                elif node.op == "call_function" and _op_name(node) not in _PLUMBING:
                    watch.left_to_pytorch[_op_name(node)] += 1
            return fused

        return make_partitions

    def _precision(self) -> str | None:
        if self.precision_hint:
            return self.precision_hint
        try:
            import openvino

            return _type_name(openvino.Core().get_property("CPU", "INFERENCE_PRECISION_HINT"))
        except Exception:
            return None

    def signals(self) -> tuple[dict[str, int], dict[str, Any]]:
        """``(fallback_ops, signals)``: ops that did not run in OpenVINO, and what was seen."""
        fallback = Counter()
        fallback.update({f"{k} (handed to inductor)": v for k, v in self.handed_to_inductor.items()})
        fallback.update({f"{k} (left to PyTorch)": v for k, v in self.left_to_pytorch.items()})
        if self.handler.runtime_fallbacks:
            fallback["openvino partition failed at run time (ran in PyTorch)"] += len(self.handler.runtime_fallbacks)
        return dict(fallback), {
            "openvino": {
                "graphs": self.graphs,
                "graphs_handed_to_inductor": len(self.handler.conversion_failures),
                "conversion_errors": self.handler.conversion_failures[:3],
                "runtime_fallbacks": len(self.handler.runtime_fallbacks),
                "ops_converted": sum(self.converted_ops.values()),
                "ops_left_to_pytorch": sum(self.left_to_pytorch.values()),
                "precision": self._precision(),
                "problems": self.problems,
            }
        }

    def close(self) -> None:
        for name in _LOGGERS:
            log = logging.getLogger(name)
            log.removeHandler(self.handler)
            log.setLevel(self._levels[name])
        if self._original_fx is not None:
            self._backend.fx_openvino = self._original_fx
        if self._original_partitions is not None:
            self._partition.Partitioner.make_partitions = self._original_partitions
