"""``inductor``: PyTorch's own compiler, the one backend that takes ``torch.compile(mode=...)``."""

from __future__ import annotations

from bakeoff.target.engines.base import DYNAMIC, FULLGRAPH, DynamoBackend, Option

__all__ = ["MODE", "Inductor"]

MODE = Option(
    "mode",
    "applies only to the {takers} backend",
    "drop mode=, or use +{first}",
    values=("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
    what="compile mode",
)


class Inductor(DynamoBackend):
    name = "inductor"
    options = (DYNAMIC, FULLGRAPH, MODE)
