"""Watch OpenVINO's ``torch.compile`` backend for the fallbacks it does not announce.

OpenVINO's backend falls back silently at three levels (all logged at DEBUG only):
    1. a graph it cannot convert is handed to inductor (``fx_openvino`` catches the error);
    2. ops it does not support stay outside its fused partitions and run in PyTorch;
    3. a partition that fails at run time switches permanently to PyTorch execution.
This module wraps the conversion entry point, the partitioner, the graph executor and the
partitions themselves, and listens to those debug records, so a trial can say which ops did not
run in OpenVINO and how much of the work it really did: every call of a partition is counted as
run by OpenVINO or, once that partition has failed, by PyTorch (weighted by the partition's op
count), and every call of a graph counts its ops left outside the partitions. That share is
reported as ``engine_work`` over all calls of the trial so far. It also records the inference
precision the CPU plugin was set to (bf16 by default on CPUs that support it), which says
nothing about the work PyTorch ran instead.

It reaches into OpenVINO internals (checked with OpenVINO 2026.4); if they move, the watch
says so in its signals instead of guessing.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from bakeoff.errors import BakeoffError

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


def _explain_failed_fallback(compiled: Any, conversion_error: str) -> Any:
    """``compiled``, raising an error that says what happened if it fails when called.

    Under AOT autograd OpenVINO's inductor fallback (OpenVINO 2026.4, torch 2.13) returns a
    function the caller invokes with the wrong convention; its first call fails with a bare
    "not enough values to unpack", which names neither OpenVINO nor the conversion failure.
    """

    def call(*args: Any) -> Any:
        try:
            return compiled(*args)
        except Exception as exc:
            raise BakeoffError(
                f"OpenVINO could not convert a graph ({conversion_error}) and handed it to inductor, "
                f"whose fallback failed under AOT autograd: {type(exc).__name__}: {exc}",
                hint="the graph needs an op or pattern OpenVINO cannot convert; "
                "try cpu+openvino_export, or report the conversion error to OpenVINO",
            ) from exc

    call._boxed_call = getattr(compiled, "_boxed_call", False)  # type: ignore[attr-defined]
    return call


class OpenVINOCompileWatch:
    """Install with the target, read :meth:`signals` after running, :meth:`close` at the end."""

    def __init__(self, precision: str | None) -> None:
        import openvino.torch  # noqa: F401  (registers backend="openvino")
        from openvino.frontend.pytorch.torchdynamo import backend, execute, partition

        self.precision_hint = precision
        self.handler = _Records()
        self.graphs = 0
        self.converted_ops: Counter = Counter()
        self.left_to_pytorch: Counter = Counter()
        self.handed_to_inductor: Counter = Counter()
        self.problems: list[str] = []
        self._left_per_graph: dict[int, int] = {}  # id(partitioned graph) -> its ops left to PyTorch
        self._ops_per_partition: dict[int, Counter] = {}  # id(partition) -> its ops by name
        self.partitions_failed: dict[int, Counter] = {}
        self.op_calls_in_engine = 0
        self.op_calls_handed_back = 0
        self._levels = {}
        for name in _LOGGERS:
            log = logging.getLogger(name)
            self._levels[name] = log.level
            log.setLevel(logging.DEBUG)
            log.addHandler(self.handler)
        self._backend, self._partition, self._execute = backend, partition, execute
        self._original_fx = getattr(backend, "fx_openvino", None)
        self._original_partitions = getattr(partition.Partitioner, "make_partitions", None)
        self._original_run = getattr(backend, "execute", None)
        module = getattr(execute, "OpenVINOGraphModule", None)
        self._original_partition_call = module.__dict__.get("__call__") if module is not None else None
        if None in (self._original_fx, self._original_partitions, self._original_run, self._original_partition_call):
            self._original_run = self._original_partition_call = None
            if self._original_fx is None or self._original_partitions is None:
                self.problems.append("OpenVINO internals not found; fallbacks cannot be detected with this version")
                return
            self.problems.append("OpenVINO's executor not found; the share of work it ran is not measured")
        backend.fx_openvino = self._watch_conversion
        partition.Partitioner.make_partitions = self._watch_partitions()
        if self._original_run is not None:
            backend.execute = self._watch_graph_calls()
            module.__call__ = self._watch_partition_calls()

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
            if self._aot_autograd(options):
                compiled = _explain_failed_fallback(compiled, self.handler.conversion_failures[-1])
        return compiled

    def _aot_autograd(self, options: Any) -> bool:
        """Whether OpenVINO converts under AOT autograd (the options it keeps override the call's)."""
        kept = getattr(self._backend, "openvino_options", None) or options or {}
        return isinstance(kept, dict) and bool(kept.get("aot_autograd"))

    def _watch_partitions(self) -> Any:
        original, watch = self._original_partitions, self

        def make_partitions(partitioner: Any, graph_module: Any, options: Any) -> Any:
            fused = original(partitioner, graph_module, options)
            left = 0
            for node in fused.graph.nodes:
                if node.op == "call_module" and "fused_" in node.name:
                    for inner in getattr(fused, node.target).graph.nodes:
                        if inner.op == "call_function":
                            watch.converted_ops[_op_name(inner)] += 1
                elif node.op == "call_function" and _op_name(node) not in _PLUMBING:
                    watch.left_to_pytorch[_op_name(node)] += 1
                    left += 1
            watch._left_per_graph[id(fused)] = left
            return fused

        return make_partitions

    def _watch_graph_calls(self) -> Any:
        """Each call of a partitioned graph: its ops outside the partitions ran in PyTorch."""
        original, watch = self._original_run, self

        def execute(graph_module: Any, *args: Any, **kwargs: Any) -> Any:
            watch.op_calls_handed_back += watch._left_per_graph.get(id(graph_module), 0)
            return original(graph_module, *args, **kwargs)

        return execute

    def _watch_partition_calls(self) -> Any:
        """Each call of a partition: run by OpenVINO, or by PyTorch once it has failed."""
        original, watch = self._original_partition_call, self

        def call(partition: Any, *args: Any) -> Any:
            ops = watch._ops_per_partition.get(id(partition))
            if ops is None:
                ops = Counter(
                    _op_name(n)
                    for n in partition.gm.graph.nodes
                    if n.op == "call_function" and _op_name(n) not in _PLUMBING
                )
                watch._ops_per_partition[id(partition)] = ops
            result = original(partition, *args)
            if getattr(partition, "perm_fallback", False):
                watch.op_calls_handed_back += sum(ops.values())
                watch.partitions_failed[id(partition)] = ops
            else:
                watch.op_calls_in_engine += sum(ops.values())
            return result

        return call

    def _precision(self) -> str | None:
        if self.precision_hint:
            return self.precision_hint
        try:
            import openvino

            return _type_name(openvino.Core().get_property("CPU", "INFERENCE_PRECISION_HINT"))
        except Exception:
            return None

    def engine_work(self) -> dict[str, Any] | None:
        """The op calls handed to OpenVINO over the trial so far and how many it ran itself.

        None when the executor could not be watched or nothing ran yet. Graphs handed to
        inductor are outside this count (their op calls are neither OpenVINO's nor PyTorch's
        eager ones); when every graph went there, OpenVINO ran nothing: share 0.
        """
        total = self.op_calls_in_engine + self.op_calls_handed_back
        if self._original_partition_call is None:
            return None
        if not total:
            if self.graphs and len(self.handler.conversion_failures) >= self.graphs:
                return {
                    "engine": "openvino",
                    "op_calls": 0,
                    "op_calls_in_engine": 0,
                    "share": 0.0,
                    "partitions": 0,
                    "partitions_failed": 0,
                    "scope": "every graph went to inductor",
                    "ran_instead": "inductor",
                }
            return None
        return {
            "engine": "openvino",
            "op_calls": total,
            "op_calls_in_engine": self.op_calls_in_engine,
            "share": self.op_calls_in_engine / total,
            "partitions": len(self._ops_per_partition),
            "partitions_failed": len(self.partitions_failed),
            "scope": "over every call of the trial",
        }

    def signals(self) -> tuple[dict[str, int], dict[str, Any]]:
        """``(fallback_ops, signals)``: ops (per forward pass) that did not run in OpenVINO, and what was seen.

        A partition that failed at run time contributes its ops, named ``aten::mm (failed
        partition, ran in PyTorch)``; without the executor watch, one entry per failed partition.
        """
        fallback: Counter = Counter()
        fallback.update({f"{k} (handed to inductor)": v for k, v in self.handed_to_inductor.items()})
        fallback.update({f"{k} (left to PyTorch)": v for k, v in self.left_to_pytorch.items()})
        for ops in self.partitions_failed.values():
            fallback.update({f"{k} (failed partition, ran in PyTorch)": v for k, v in ops.items()})
        if self.handler.runtime_fallbacks and not self.partitions_failed:
            fallback["openvino partition failed at run time (ran in PyTorch)"] += len(self.handler.runtime_fallbacks)
        work = self.engine_work()
        data: dict[str, Any] = {
            "openvino": {
                "graphs": self.graphs,
                "graphs_handed_to_inductor": len(self.handler.conversion_failures),
                "conversion_errors": self.handler.conversion_failures[:3],
                "runtime_fallbacks": len(self.handler.runtime_fallbacks),
                "runtime_errors": self.handler.runtime_fallbacks[:3],
                "ops_converted": sum(self.converted_ops.values()),
                "ops_left_to_pytorch": sum(self.left_to_pytorch.values()),
                "precision": self._precision(),
                "problems": self.problems,
            }
        }
        if work is not None:
            data["engine_work"] = work
        return dict(fallback), data

    def close(self) -> None:
        for name in _LOGGERS:
            log = logging.getLogger(name)
            log.removeHandler(self.handler)
            log.setLevel(self._levels[name])
        if self._original_fx is not None:
            self._backend.fx_openvino = self._original_fx
        if self._original_partitions is not None:
            self._partition.Partitioner.make_partitions = self._original_partitions
        if self._original_run is not None:
            self._backend.execute = self._original_run
        if self._original_partition_call is not None:
            self._execute.OpenVINOGraphModule.__call__ = self._original_partition_call
