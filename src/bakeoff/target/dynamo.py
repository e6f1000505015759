"""The compilation audit: how a compiled target behaves under changing input shapes.

Uses dynamo's structured signals, never its printed logs: ``counters`` (graphs, frames,
``unimplemented`` graph-break reasons), per-compilation metrics
(``torch._dynamo.utils.get_compilation_metrics``: time, backend time, recompile reason,
inductor cache hits), and the ``recompiles`` / ``graph_breaks`` artifact loggers, whose
records are captured by a handler (and kept off the terminal). ``counters["recompiles"]``
stays empty in torch 2.13, so recompilations are counted from the records.

Counters are process-global: the watch clears them when it starts, so one target's numbers
never include another's.

It lives with the targets, beside the OpenVINO watch: compiling a target
(:func:`bakeoff.target.execute.prepare`) starts it, and it only collects numbers for the
:class:`~bakeoff.checks.compilation.Compilation` value, judging nothing.
"""

from __future__ import annotations

import logging
import os
import re
from collections import Counter
from typing import Any

__all__ = ["CompileWatch"]

_RECOMPILES = "torch._dynamo.guards.__recompiles"
_GRAPH_BREAKS = "torch._dynamo.symbolic_convert.__graph_breaks"
_CONVERT = "torch._dynamo.convert_frame"
_LOCATION = re.compile(r"in user code at (\S+:\d+)")
_REASON = re.compile(r"Graph Break Reason: (.*)")
_GUARD_FAILURE = re.compile(r"^\d+/\d+: ")


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
        self._metrics_start = len(self._metrics())
        # With TORCH_LOGS set, torch ignores set_logs (and says so); the counts below then come
        # from counters and compilation metrics alone, which do not depend on logging.
        self._set_logs = not os.environ.get("TORCH_LOGS")
        if self._set_logs:
            torch._logging.set_logs(recompiles=True, graph_breaks=True)
        self.capture = _Capture()
        self._saved: dict[str, tuple[int, bool]] = {}
        for name in (_RECOMPILES, _GRAPH_BREAKS, _CONVERT):
            log = logging.getLogger(name)
            self._saved[name] = (log.level, log.propagate)
            log.addHandler(self.capture)
            if name != _CONVERT:  # keep these records off the terminal
                log.propagate = False

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
        for metric in self._metrics()[self._metrics_start :]:
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
        }

    def close(self) -> None:
        import torch

        for name, (level, propagate) in self._saved.items():
            log = logging.getLogger(name)
            log.removeHandler(self.capture)
            log.setLevel(level)
            log.propagate = propagate
        if self._set_logs:
            torch._logging.set_logs()
