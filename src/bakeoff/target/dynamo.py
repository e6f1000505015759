"""The compilation audit: how a compiled target behaves under changing input shapes.

Uses dynamo's structured signals, never its printed logs: ``counters`` (graphs, frames,
``unimplemented`` graph-break reasons), per-compilation metrics
(``torch._dynamo.utils.get_compilation_metrics``: time, backend time, recompile reason,
inductor cache hits), and the ``recompiles`` / ``graph_breaks`` artifact loggers, whose
records are captured by a handler (and kept off the terminal). ``counters["recompiles"]``
stays empty in torch 2.13, so recompilations are counted from the records.

Each graph dynamo hands a backend is also read before it is compiled
(``OutputGraph.call_user_compiler``, wrapped while the watch is open): which backend compiled it
(``signals["backends"]``), and the ops in it that draw random numbers (dropout in training, the
``rand`` family, ``bernoulli``, in-place ``uniform_``/``normal_``...) with the user's line of the
first (``signals["random_ops"]``, ``signals["random_site"]``). A compiled graph draws them with
its backend's own generator (inductor's Philox streams), so values after such a draw cannot match
an eager run's, whatever the seed. Not seen: random draws in code that was not compiled (they are
the eager run's own), and graphs compiled while no watch was open.

Counters are process-global: the watch clears them when it starts, so one target's numbers
never include another's. Dynamo keeps its per-compilation metrics in a bounded queue (64 in
torch 2.13) that drops the oldest: the watch raises the bound to :data:`METRICS_KEPT` and takes
the records that were not there when it started (by identity, not by position: in a process
that had compiled 64 graphs already, the queue's length no longer grows, and counting from the
length it had lost every compilation but the first few of the target's own).

It lives with the targets, beside the OpenVINO watch: compiling a target
(:func:`bakeoff.target.execute.prepare`) starts it, and it only collects numbers for the
:class:`~bakeoff.checks.compilation.Compilation` value, judging nothing.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from collections import Counter
from typing import Any

__all__ = ["METRICS_KEPT", "CompileWatch"]

#: How many per-compilation records dynamo keeps once a watch has started (its own bound is 64).
METRICS_KEPT = 4096

_RECOMPILES = "torch._dynamo.guards.__recompiles"
_GRAPH_BREAKS = "torch._dynamo.symbolic_convert.__graph_breaks"
_CONVERT = "torch._dynamo.convert_frame"
_LOCATION = re.compile(r"in user code at (\S+:\d+)")
_REASON = re.compile(r"Graph Break Reason: (.*)")
_GUARD_FAILURE = re.compile(r"^\d+/\d+: ")
_FRAME = re.compile(r'File "([^"]+)", line (\d+)')

#: Functions and methods whose call in a graph draws random numbers (dropout only in training).
_RANDOM = frozenset(
    {
        "rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like", "bernoulli",
        "multinomial", "normal", "poisson", "bernoulli_", "uniform_", "normal_", "exponential_",
        "geometric_", "cauchy_", "log_normal_", "random_", "native_dropout",
    }
)  # fmt: skip
_DROPOUT = frozenset({"dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"})


def _random_op(node: Any) -> str | None:
    """The name of the random draw ``node`` (an FX node of a dynamo graph) makes, or None."""
    if node.op not in ("call_function", "call_method", "call_module"):
        return None
    target = node.target
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    if node.op == "call_module":
        return None  # dynamo inlines modules into functions; a kept module call is not a draw of ours to see
    if name in _DROPOUT:
        training = node.kwargs.get("training", node.args[2] if len(node.args) > 2 else True)
        p = node.kwargs.get("p", node.args[1] if len(node.args) > 1 else 0.5)
        drawn = training is not False and not (isinstance(p, (int, float)) and p == 0)
        return name if drawn else None
    if name == "rrelu" and node.kwargs.get("training", node.args[3] if len(node.args) > 3 else False):
        return name
    if name == "scaled_dot_product_attention":  # attention dropout
        p = node.kwargs.get("dropout_p", node.args[4] if len(node.args) > 4 else 0.0)
        return name if not (isinstance(p, (int, float)) and p == 0) else None
    return name if name in _RANDOM else None


#: The watch that reads the graphs now: the latest one opened (like the counters it clears).
_reading: CompileWatch | None = None


@functools.cache
def _read_graphs() -> bool:
    """Wrap dynamo's hand-over of a graph to its backend, once per process, so that the open watch
    reads each graph first (see the module docstring); False where this torch has no such step."""
    try:
        from torch._dynamo.output_graph import OutputGraph

        original = OutputGraph.call_user_compiler
    except (ImportError, AttributeError):  # another torch: the graphs go unread, nothing else changes
        return False

    @functools.wraps(original)
    def call_user_compiler(graph: Any, gm: Any, *args: Any, **kwargs: Any) -> Any:  # (gm) alone in older torch
        watch = _reading
        if watch is not None:
            try:
                watch.read(graph, gm)
            except Exception:  # reading is ours; the compile goes on without it
                pass
        return original(graph, gm, *args, **kwargs)

    OutputGraph.call_user_compiler = call_user_compiler  # type: ignore[method-assign]
    return True


#: PyTorch's and bakeoff's directories: never the user's line (a remapped call is traced through bakeoff).
_OWN = (os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ""),)


def _user_line(node: Any) -> str:
    """``file:line`` of the user's code that made ``node``: the innermost frame of its trace
    outside PyTorch and bakeoff."""
    import torch

    own = (*_OWN, os.path.join(os.path.dirname(os.path.abspath(torch.__file__)), ""))
    frames = _FRAME.findall(node.meta.get("stack_trace") or "")
    frames = [f for f in frames if not os.path.abspath(f[0]).startswith(own)]
    return f"{frames[-1][0]}:{frames[-1][1]}" if frames else ""


def _own_frame(metric: Any) -> bool:
    """Whether a compilation is of one of bakeoff's own frames that put nothing in a graph (the
    remap's and the audit's hooks, which dynamo meets as frames after a graph break in the
    script): not the user's compilation, so not listed (counted as ``bakeoff_frames``)."""
    filename = getattr(metric, "co_filename", None) or ""
    return (
        bool(filename)
        and os.path.abspath(filename).startswith(_OWN)
        and not getattr(metric, "graph_op_count", None)
        and not getattr(metric, "fail_type", None)
    )


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.recompiles: list[str] = []
        self.breaks: Counter = Counter()
        self.limit_hits: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if record.name == _RECOMPILES:
            self.recompiles.append(message)
        elif record.name == _GRAPH_BREAKS:
            location = _LOCATION.search(message)
            reason = _REASON.search(message)
            self.breaks[
                (reason[1].strip() if reason else message.splitlines()[0], location[1] if location else "")
            ] += 1
        elif record.name == _CONVERT and "recompile_limit" in message:
            self.limit_hits.append(message.splitlines()[0])


class CompileWatch:
    """Start before compiling; read :meth:`summary`; :meth:`close` restores logging."""

    def __init__(self) -> None:
        import torch
        from torch._dynamo.utils import counters

        counters.clear()
        torch._dynamo.utils.guard_failures.clear()
        from torch._dynamo import utils as dynamo_utils

        kept = getattr(getattr(dynamo_utils, "_compilation_metrics", None), "maxlen", None)
        if kept is not None and kept < METRICS_KEPT and hasattr(dynamo_utils, "set_compilation_metrics_limit"):
            dynamo_utils.set_compilation_metrics_limit(METRICS_KEPT)
        self._before = self._metrics()  # held, so no id of theirs is reused by a new record
        self._before_ids = {id(metric) for metric in self._before}
        # With TORCH_LOGS set, torch ignores set_logs (and says so); the counts below then come
        # from counters and compilation metrics alone, which do not depend on logging.
        self._set_logs = not os.environ.get("TORCH_LOGS")
        if self._set_logs:
            torch._logging.set_logs(recompiles=True, graph_breaks=True)
        self.capture = _Capture()
        self.random_ops: Counter = Counter()
        self.random_site = ""
        self.backends: Counter = Counter()
        global _reading
        _reading = self if _read_graphs() else None
        self._saved: dict[str, tuple[int, bool]] = {}
        for name in (_RECOMPILES, _GRAPH_BREAKS, _CONVERT):
            log = logging.getLogger(name)
            self._saved[name] = (log.level, log.propagate)
            log.addHandler(self.capture)
            if name != _CONVERT:  # keep these records off the terminal
                log.propagate = False

    def read(self, graph: Any, gm: Any) -> None:
        """Count ``gm``'s backend and random draws (a graph about to be handed to its backend)."""
        backend = getattr(graph, "compiler_fn", None)
        self.backends[str(getattr(backend, "compiler_name", None) or getattr(backend, "__name__", "?"))] += 1
        for node in gm.graph.nodes:
            name = _random_op(node)
            if name is not None:
                self.random_ops[name] += 1
                self.random_site = self.random_site or _user_line(node)

    @staticmethod
    def _metrics() -> list:
        from torch._dynamo.utils import get_compilation_metrics

        return list(get_compilation_metrics())

    def events(self) -> int:
        """Grows with every compilation (for the warm-up loop)."""
        from torch._dynamo.utils import counters

        return int(counters["frames"]["total"]) + int(counters["stats"]["unique_graphs"])

    def summary(self) -> dict[str, Any]:
        """The audit's numbers so far, as keyword arguments for :class:`Compilation`."""
        from torch._dynamo.utils import counters

        compilations = []
        own_frames = 0
        for metric in (m for m in self._metrics() if id(m) not in self._before_ids):
            if _own_frame(metric):
                own_frames += 1
                continue
            hits = getattr(metric, "inductor_fx_local_cache_hit_count", None) or 0
            misses = getattr(metric, "inductor_fx_local_cache_miss_count", None) or 0
            compilations.append(
                {
                    "id": metric.compile_id,
                    "function": metric.co_name,
                    "seconds": metric.entire_frame_compile_time_s,
                    "backend_seconds": metric.backend_compile_time_s,
                    "cache": "hit" if hits and not misses else ("miss" if misses else "n/a"),
                    "reason": metric.recompile_reason,
                    "failed": metric.fail_type,
                    "ops": metric.graph_op_count,
                }
            )
        unimplemented = counters["unimplemented"]
        # A break dynamo cannot trace through (a data-dependent branch) lands in "unimplemented";
        # one it breaks on by design (Tensor.item(), nonzero, an explicit graph_break()) only in
        # "graph_break". Each logged break is one record, when the records are ours to see.
        unimplemented_breaks = sum(v for k, v in unimplemented.items() if "recompile limit" not in k.lower())
        graph_breaks = max(
            unimplemented_breaks, sum(counters["graph_break"].values()), sum(self.capture.breaks.values())
        )
        breaks = [
            {"reason": reason.splitlines()[0], "location": location, "count": count}
            for (reason, location), count in sorted(self.capture.breaks.items())
        ]
        if not breaks:  # no log records (TORCH_LOGS overrode ours): reasons without locations
            breaks = [
                {"reason": k.splitlines()[0], "location": "", "count": v}
                for k, v in (unimplemented | counters["graph_break"]).items()
                if "recompile limit" not in k.lower()
            ]
        reasons = []
        for record in self.capture.recompiles:
            for line in record.splitlines()[2:]:
                line = line.strip().removeprefix("- ").strip()
                if _GUARD_FAILURE.match(line) and line not in reasons:  # not the stack-trace lines
                    reasons.append(line)
        for compilation in compilations:  # the metrics carry each recompilation's first reason too
            if compilation["reason"] and compilation["reason"] not in reasons:
                reasons.append(compilation["reason"])
        recompiled = sum(1 for c in compilations if c["reason"])
        return {
            "graphs": int(counters["stats"]["unique_graphs"]),
            "recompiles": max(len(self.capture.recompiles), recompiled),
            "recompile_reasons": tuple(reasons),
            "graph_breaks": graph_breaks,
            "graph_break_reasons": tuple(breaks),
            "eager_frames": max(int(counters["frames"]["total"]) - int(counters["frames"]["ok"]), 0),
            "recompile_limit_hits": len(self.capture.limit_hits),
            "compile_seconds_total": round(sum(c["seconds"] or 0.0 for c in compilations), 6),
            "compilations": tuple(compilations),
            "signals": {
                "backends": dict(self.backends),
                "random_ops": dict(self.random_ops),
                **({"bakeoff_frames": own_frames} if own_frames else {}),
                **({"random_site": self.random_site} if self.random_site else {}),
            },
        }

    def close(self) -> None:
        import torch

        global _reading
        if _reading is self:
            _reading = None
        for name, (level, propagate) in self._saved.items():
            log = logging.getLogger(name)
            log.removeHandler(self.capture)
            log.setLevel(level)
            log.propagate = propagate
        if self._set_logs:
            torch._logging.set_logs()
