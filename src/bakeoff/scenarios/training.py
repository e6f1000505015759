"""Training: forward, backward and optimiser step; step time and samples/s.

It changes the model's weights, so it runs last, after the checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from bakeoff.errors import SpecError
from bakeoff.measure.loops import train
from bakeoff.scenarios.base import MetricSpec, Option, Scenario, ScenarioContext, ScenarioResult, tensor_leaves
from bakeoff.stats import Estimate, percentile_estimate
from bakeoff.target.engines import engine_for
from bakeoff.workload.training import synthetic_loss

__all__ = ["Training"]

OPTIMIZERS = ("adamw", "sgd")


def _samples_per_s(result: Any, training: ScenarioResult | None) -> Estimate | None:
    steps = training.series.get("step", ()) if training is not None else ()
    return percentile_estimate(steps, 50).inverted(training.facts["batch"] * 1e3) if steps else None


class Training(Scenario):
    """A training step's time (see the module docstring)."""

    name = "training"
    options: ClassVar[Mapping[str, Option]] = {
        "steps": Option(int, 10, minimum=1),
        "warmup": Option(int, 2),
        "optimizer": Option(str, "adamw"),
        "lr": Option(float, 1e-4),
    }
    metrics = (
        MetricSpec("step_time", "time", "training step time", series="step", bare=True),
        MetricSpec("samples_per_s", "rate", "training samples per second", estimate=_samples_per_s),
    )
    compared: ClassVar[Mapping[str, str]] = {"training_step_p50_ms": "step"}
    runs_last = True
    needs_grad = True

    def validate(self, options: dict[str, Any], text: str) -> None:
        super().validate(options, text)
        if options["optimizer"] not in OPTIMIZERS:
            raise SpecError(f"unknown optimizer {options['optimizer']!r}", hint="use " + " or ".join(OPTIMIZERS))

    def not_applicable(self, ctx: ScenarioContext) -> str | None:

        if ctx.target.backend is not None and engine_for(ctx.target.backend).inference_only:
            return f"the {ctx.target.backend} engine is inference only"
        if not any(p.is_floating_point() for p in ctx.workload.model.parameters()):
            return "the model has no floating-point parameters to train"
        return None

    def run(self, ctx: ScenarioContext, options: dict) -> tuple[dict, dict]:
        import torch

        model, prepared = ctx.workload.model, ctx.prepared
        params = [p for p in model.parameters() if p.is_floating_point()]
        for p in params:
            p.requires_grad_(True)
        was_training = model.training
        model.train()
        kind = torch.optim.AdamW if options["optimizer"] == "adamw" else torch.optim.SGD
        optimizer = kind(params, lr=options["lr"])

        def step() -> None:
            optimizer.zero_grad(set_to_none=True)
            with torch.enable_grad():
                synthetic_loss(prepared(), prepared.args, prepared.kwargs).backward()
            optimizer.step()

        try:
            run = train(step, options["steps"], options["warmup"], ctx.sync, ctx.clock)
        finally:  # what runs after it (the placement audit) sees the model in its own mode
            model.train(was_training)
        batch = next((t.shape[0] for t in tensor_leaves(prepared.args, prepared.kwargs) if t.dim()), 1)
        facts = {
            "first_step_ms": run.first_step_s * 1e3,
            "batch": batch,
            "optimizer": options["optimizer"],
            "loss": "mean square of the floating outputs (what a step costs, not what it learns)",
        }
        return {"step": tuple(s * 1e3 for s in run.samples_s)}, facts

    def figures(self, result: Any, scenario: ScenarioResult, estimate: Any) -> list[str]:
        facts = scenario.facts
        return [
            estimate("step_time", "step p50"),
            estimate("samples_per_s", "samples", "/s"),
            f"first step {facts['first_step_ms']:.4g} ms",
            f"batch {facts['batch']}, {facts['optimizer']}",
        ]
