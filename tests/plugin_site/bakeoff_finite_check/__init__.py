"""A third-party check and scenario, as a vendor or a team would ship them: are the target's
outputs finite (a trial's, and a script's captured values under ``bakeoff exec``), and how long
do back-to-back calls take?

Installed through the ``bakeoff.checks`` and ``bakeoff.scenarios`` entry points (see the
dist-info beside this package);
the test puts this folder on ``PYTHONPATH``, which is what installing it amounts to.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from bakeoff.checks.base import Check, CheckContext, Metric, ScriptContext
from bakeoff.codec import Value
from bakeoff.scenarios.base import MetricSpec, Option, Scenario, ScenarioContext, ScenarioResult


@dataclass(frozen=True)
class Finite(Value):
    verdict: str
    nonfinite: tuple[str, ...] = ()
    limit: float | None = None


class FiniteOutputs(Check):
    name = "finite_outputs"
    title = "finite outputs"
    value_type = Finite
    phase = "finite outputs check"
    options: ClassVar[Mapping[str, Option]] = {
        "limit": Option(float, None, help="also flag values whose magnitude is above this")
    }

    def run(self, context: CheckContext) -> Finite:
        import torch

        limit = context.options["limit"]
        bad = [
            f"{tag}{name}" if tag else name
            for tag, flat in context.outputs.items()
            for name, tensor in flat.items()
            if tensor.is_floating_point()
            and not bool(torch.isfinite(tensor).all() and (limit is None or tensor.abs().max() <= limit))
        ]
        return Finite("nonfinite" if bad else "finite", tuple(bad), limit)

    def run_script(self, context: ScriptContext) -> Finite:
        """A script's run (``bakeoff exec``): every floating-point value it captured."""
        import torch

        limit = context.options["limit"]
        bad = [
            f"{name}[{call}]"
            for name, calls in context.run.captures.items()
            for call, value in enumerate(calls)
            if isinstance(value, torch.Tensor)
            and value.is_floating_point()
            and not bool(torch.isfinite(value).all() and (limit is None or value.abs().max() <= limit))
        ]
        return Finite("nonfinite" if bad else "finite", tuple(bad), limit)

    def metrics(self, value: Finite | None) -> list[Metric]:
        return [Metric("finite_outputs", value.verdict if value else None, "verdict", {"finite": 1, "nonfinite": 0})]

    def facts(self, value: Finite, result: Any) -> list[str]:
        return [f"non-finite values in {', '.join(value.nonfinite)}"] if value.nonfinite else []


class Repeat(Scenario):
    """A third-party scenario: the prepared model called ``calls`` times back to back."""

    name = "repeat"
    options: ClassVar[Mapping[str, Option]] = {"calls": Option(int, 5, minimum=1)}
    metrics = (MetricSpec("repeat", "time", "time of one back-to-back call", series="call", bare=True),)
    compared: ClassVar[Mapping[str, str]] = {"repeat_p50_ms": "call"}

    def run(self, context: ScenarioContext, options: dict[str, Any]) -> tuple[dict, dict]:
        import time

        samples = []
        for _ in range(options["calls"]):
            start = time.perf_counter()
            context.prepared()
            context.sync()
            samples.append((time.perf_counter() - start) * 1e3)
        return {"call": tuple(samples)}, {"calls": options["calls"]}

    def figures(self, result: Any, scenario: ScenarioResult, estimate: Any) -> list[str]:
        return [estimate("repeat", "call p50"), f"{scenario.facts['calls']} calls"]
