"""A third-party check, as a vendor or a team would ship one: are the target's outputs finite?

Installed through the ``bakeoff.checks`` entry point (see the dist-info beside this package);
the test puts this folder on ``PYTHONPATH``, which is what installing it amounts to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bakeoff.checks.base import Check, CheckContext, Metric
from bakeoff.codec import Value


@dataclass(frozen=True)
class Finite(Value):
    verdict: str
    nonfinite: tuple[str, ...] = ()


class FiniteOutputs(Check):
    name = "finite_outputs"
    title = "finite outputs"
    value_type = Finite
    phase = "finite outputs check"

    def run(self, context: CheckContext) -> Finite:
        import torch

        bad = [
            f"{tag}{name}" if tag else name
            for tag, flat in context.outputs.items()
            for name, tensor in flat.items()
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all())
        ]
        return Finite("nonfinite" if bad else "finite", tuple(bad))

    def metrics(self, value: Finite | None) -> list[Metric]:
        return [Metric("finite_outputs", value.verdict if value else None, "verdict", {"finite": 1, "nonfinite": 0})]

    def facts(self, value: Finite, result: Any) -> list[str]:
        return [f"non-finite values in {', '.join(value.nonfinite)}"] if value.nonfinite else []
