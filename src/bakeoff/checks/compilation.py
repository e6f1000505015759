"""How does a compiled target behave under the input profile? The compilation audit.

Dynamo's own counters and logs, watched while the target runs (:mod:`bakeoff.target.dynamo`,
or an export engine's own record), become one frozen value: graphs, recompilations with the
guard failures behind them, graph breaks with reason and location, compile time, and whether
every profile shape ran without compiling again after warm-up. The audit covers the
single-stream traffic (the workload's input, or every profile shape); scenarios count the
graphs their own shapes add. It sees what the compiler reports, not what it does silently:
a backend that neither logs through dynamo nor reports its compilations shows no graphs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from bakeoff.checks.base import Check, CheckContext, Metric, ScriptContext
from bakeoff.codec import Value
from bakeoff.units import duration

__all__ = ["Compilation", "CompilationCheck"]


@dataclass(frozen=True)
class Compilation(Value):
    """What a compiled target did over the input profile (see :mod:`bakeoff.target.dynamo`).

    ``graphs`` counts the graphs dynamo produced; ``recompiles`` the recompilations, with the
    guard failures that caused them in ``recompile_reasons``; ``graph_breaks`` the breaks, with
    reason and user-code location in ``graph_break_reasons``; ``recompile_limit_hits`` the
    times dynamo gave up and ran a frame eagerly; ``compilations`` one entry per compilation
    (seconds, backend seconds, cache hit/miss, the shape that triggered it; bakeoff's own hook
    frames that put no op in a graph are counted in ``signals["bakeoff_frames"]`` instead); ``steady`` whether
    a pass over every profile shape under ``fail_on_recompile`` succeeded after warm-up, and
    ``still_recompiling`` the shapes that did not; ``per_shape`` the first-call and steady-state
    latency of each shape.
    """

    graphs: int = 0
    recompiles: int = 0
    recompile_reasons: tuple[str, ...] = ()
    graph_breaks: int = 0
    graph_break_reasons: tuple[dict[str, Any], ...] = ()
    eager_frames: int = 0
    recompile_limit_hits: int = 0
    compile_seconds_total: float = 0.0
    compilations: tuple[dict[str, Any], ...] = ()
    cache: str = ""
    steady: bool | None = None
    still_recompiling: tuple[str, ...] = ()
    per_shape: tuple[dict[str, Any], ...] = ()
    signals: dict[str, Any] = field(default_factory=dict)


class CompilationCheck(Check):
    """The compilation audit of a compiled target (eager targets compile nothing)."""

    name = "compilation"
    title = "compilation"
    value_type = Compilation
    phase = "compilation audit"
    offers: ClassVar[Mapping[str, tuple[str, str]]] = {
        "graphs": ("count", "graphs compiled for the single-stream traffic"),
        "recompiles": ("count", "recompilations over the single-stream traffic"),
        "graph_breaks": ("count", "graph breaks"),
    }

    def not_applicable(self, target: Any, is_reference: bool) -> str | None:
        return None if target.is_compiled else "an eager target compiles nothing"

    def setup(self, target: Any) -> None:
        """Forget earlier compilations in this process, so the audit counts this target's own."""
        import torch

        torch._dynamo.reset()

    def run_script(self, context: ScriptContext) -> Compilation | None:
        """What ``torch.compile`` did in a script's run: recorded in the run's own process by its
        audit (None: not audited, or nothing compiled)."""
        return (context.run.audit or {}).get("compilation")

    def run(self, context: CheckContext) -> Compilation | None:
        summary = context.compile_snapshot
        if summary is None:  # a backend without a compile record
            return None
        summary = dict(summary)
        hits = sum(1 for c in summary.get("compilations", ()) if c.get("cache") == "hit")
        summary["cache"] = "cold (empty cache)" if context.job.cold_cache else f"existing cache ({hits} hit(s))"
        summary["steady"] = context.settled
        if context.profile_shapes is not None:
            summary.update(per_shape=context.profile_shapes, still_recompiling=context.unsteady)
        return Compilation(**summary)

    def metrics(self, value: Compilation | None) -> list[Metric]:
        if value is None:
            return []
        return [Metric(name, getattr(value, name), "count") for name in ("graphs", "recompiles", "graph_breaks")]

    def details(self, value: Compilation, result: Any) -> list[str]:
        seconds = f", {duration(value.compile_seconds_total * 1e3)} compiling" if value.compile_seconds_total else ""
        counts = f"{value.graphs} graph(s), {value.recompiles} recompilation(s), {value.graph_breaks} graph break(s)"
        return [
            counts + seconds,
            *(f"recompiled: {reason}" for reason in value.recompile_reasons),
            *(f"graph break: {b.get('reason')} {b.get('location') or ''}".rstrip() for b in value.graph_break_reasons),
        ]

    def headline(self, value: Compilation, result: Any) -> list[str]:
        facts = self.facts(value, result)
        return [f for f in facts if not f.startswith("compile ")]  # graph breaks and recompiles; not its time

    def facts(self, value: Compilation, result: Any) -> list[str]:
        parts = []
        if value.graph_breaks:
            where = ", ".join(f"{b['location'] or '?'} ({b['reason']})" for b in value.graph_break_reasons[:2])
            parts.append(f"{value.graph_breaks} graph break(s): {where}")
        if value.still_recompiling:
            parts.append("still recompiling for " + ", ".join(value.still_recompiling[:5]))
        if value.compile_seconds_total:
            parts.append(
                f"compile {duration(value.compile_seconds_total * 1e3)} in {len(value.compilations)} compilation(s)"
            )
        return parts

    def notes(self, value: Compilation) -> list[str]:
        if value.recompile_limit_hits:
            return [f"hit the recompile limit {value.recompile_limit_hits}x: those frames now run eagerly"]
        return []
