"""Generation: greedy decoding with a KV cache; time to first token and time per output token."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, ClassVar

from bakeoff.measure.loops import generate
from bakeoff.scenarios.base import MetricSpec, Option, Scenario, ScenarioContext, ScenarioResult
from bakeoff.target.engines import engine_for
from bakeoff.target.execute import place_inputs

__all__ = ["Generation"]


def cache_argument(model: Any) -> str | None:
    """The name a language model's forward takes its KV cache by (transformers 5 renamed it)."""
    forward = getattr(model, "forward", None)
    params = inspect.signature(forward).parameters if forward else {}
    if "input_ids" not in params:
        return None
    return next((name for name in ("cache", "past_key_values") if name in params), None)


class Generation(Scenario):
    """Time to first token and per output token (see the module docstring)."""

    name = "generation"
    options: ClassVar[Mapping[str, Option]] = {
        "prompt": Option(int, 16, minimum=1),
        "tokens": Option(int, 16, minimum=1),
        "runs": Option(int, 5, 1),
    }
    metrics = (
        MetricSpec("ttft", "time", "time to first token", series="ttft", bare=True),
        MetricSpec("tpot", "time", "time per output token", series="tpot", bare=True),
    )
    compared: ClassVar[Mapping[str, str]] = {"ttft_p50_ms": "ttft", "tpot_p50_ms": "tpot"}

    def not_applicable(self, ctx: ScenarioContext) -> str | None:
        if cache_argument(ctx.workload.model) is None or not hasattr(ctx.workload.model, "lm_head"):
            return "not a generative language model (its forward takes no input_ids and KV cache, or it has no lm_head)"
        if ctx.workload.make_inputs is None:
            return "the workload cannot build prompts of other lengths"
        return _fixed_signature(ctx.target)

    def run(self, ctx: ScenarioContext, options: dict) -> tuple[dict, dict]:

        args, kwargs = place_inputs(ctx.workload, ctx.target, *ctx.workload.inputs_for(1, options["prompt"]))
        ids = kwargs.get("input_ids", args[0] if args else None)
        model, key = ctx.prepared.model, cache_argument(ctx.workload.model)

        def next_state(out: Any) -> tuple[Any, Any]:
            return out.logits[:, -1:].argmax(-1), out[key]

        def prefill() -> Any:
            return next_state(model(input_ids=ids, use_cache=True))

        def step(state: Any) -> Any:
            token, cache = state
            return next_state(model(input_ids=token, use_cache=True, **{key: cache}))

        run = generate(prefill, step, options["tokens"], options["runs"], ctx.sync, ctx.clock)
        series = {"ttft": tuple(s * 1e3 for s in run.ttft_s), "tpot": tuple(s * 1e3 for s in run.tpot_s)}
        return series, {"prompt": options["prompt"], "tokens": run.tokens, "runs": options["runs"]}

    def figures(self, result: Any, scenario: ScenarioResult, estimate: Any) -> list[str]:
        facts = scenario.facts
        return [
            estimate("ttft", "TTFT p50"),
            estimate("tpot", "TPOT p50"),
            estimate("tpot.p90", "TPOT p90"),
            f"{facts['runs']}x{facts['tokens']} tokens",
        ]


def _fixed_signature(target: Any) -> str | None:

    if target.backend is not None and engine_for(target.backend).fixed_signature:
        return f"the {target.backend} engine runs one exported input signature, without a KV cache"
    return None
