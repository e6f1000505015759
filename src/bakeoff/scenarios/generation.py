"""Generation: greedy decoding with a KV cache; time to first token and time per output token.

Prompts. Without an input profile every run decodes from one prompt of ``prompt`` tokens
(16 unless given). With one (``--profile``), each run is one of the profile's requests, its
batch of prompts at its length, so TTFT and TPOT (and the requirements on them) are read over
the traffic the trial is about: the requests sorted by length (then batch), run ``i`` of ``n``
takes the one at the ``(i + 0.5) / n`` quantile. A few runs then span the profile's lengths as
its distribution does (the shortest and longest of a long tail are left out when runs are
fewer than requests), whatever order the requests arrive in, and the same requests run on
every target. An explicit ``prompt=`` wins over the profile. Every request shape is warmed
once, untimed, before the timed runs, so a compiler's new graphs for a shape stay out of
TTFT. The result's ``inputs`` fact says which prompts ran; ``requests`` lists each run's
``[batch, length]``.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, ClassVar

from bakeoff.measure.loops import generate
from bakeoff.scenarios.base import (
    ROUNDS,
    MetricSpec,
    Option,
    Scenario,
    ScenarioContext,
    ScenarioResult,
    lengths_text,
)
from bakeoff.target.engines import engine_for
from bakeoff.target.execute import place_inputs
from bakeoff.workload.profile import InputProfile, Request

__all__ = ["Generation", "prompts_for"]

#: The prompt length without a profile or an explicit ``prompt=``.
DEFAULT_PROMPT = 16


def cache_argument(model: Any) -> str | None:
    """The name a language model's forward takes its KV cache by (transformers 5 renamed it)."""
    forward = getattr(model, "forward", None)
    params = inspect.signature(forward).parameters if forward else {}
    if "input_ids" not in params:
        return None
    return next((name for name in ("cache", "past_key_values") if name in params), None)


def prompts_for(options: Mapping[str, Any], profile: InputProfile | None) -> tuple[list[Request], str]:
    """Each timed run's request (batch, prompt length) and the words that say where they came
    from (see the module docstring)."""
    runs = options["runs"]
    if options["prompt"] is not None:
        chosen = [Request(1, options["prompt"])] * runs
        why = f"prompt={options['prompt']} as given" + (", not the profile's lengths" if profile else "")
        return chosen, f"fixed prompt of {options['prompt']} tokens ({why})"
    if profile is None or not profile.requests:
        return [Request(1, DEFAULT_PROMPT)] * runs, f"fixed prompt of {DEFAULT_PROMPT} tokens (the default; no profile)"
    ordered = sorted(profile.requests, key=lambda r: (r.seq, r.batch))
    chosen = [ordered[int((i + 0.5) * len(ordered) / runs)] for i in range(runs)]
    batches = sorted({r.batch for r in chosen})
    batch = "" if batches == [1] else f", batch {lengths_text(batches)}"
    text = (
        f"profile {profile.source}: {runs} runs at evenly spaced length quantiles of its {len(ordered)} requests, "
        f"prompt lengths {lengths_text([r.seq for r in chosen])}{batch}"
    )
    return chosen, text


class Generation(Scenario):
    """Time to first token and per output token (see the module docstring)."""

    name = "generation"
    options: ClassVar[Mapping[str, Option]] = {
        "prompt": Option(
            int, None, minimum=1, help=f"prompt length (default: the profile's lengths, else {DEFAULT_PROMPT})"
        ),
        "tokens": Option(int, 16, minimum=1),
        "runs": Option(int, 5, 1),
        "rounds": ROUNDS,
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

        chosen, inputs_text = prompts_for(options, ctx.profile)
        model, key = ctx.prepared.model, cache_argument(ctx.workload.model)
        prompts = {}
        for request in dict.fromkeys(chosen):
            args, kwargs = place_inputs(ctx.workload, ctx.target, *ctx.workload.inputs_for(request.batch, request.seq))
            prompts[request] = kwargs.get("input_ids", args[0] if args else None)
        order = iter([chosen[0], *chosen])  # the first generation is generate's own warm-up

        def next_state(out: Any) -> tuple[Any, Any]:
            return out.logits[:, -1:].argmax(-1), out[key]

        def start(request: Request) -> Any:
            return next_state(model(input_ids=prompts[request], use_cache=True))

        def step(state: Any) -> Any:
            token, cache = state
            return next_state(model(input_ids=token, use_cache=True, **{key: cache}))

        for request in list(prompts)[1:]:  # generate warms the first shape; the others are warmed here
            state = start(request)
            for _ in range(options["tokens"] - 1):
                state = step(state)
            ctx.sync()
        run = generate(lambda: start(next(order)), step, options["tokens"], options["runs"], ctx.sync, ctx.clock)
        series = {"ttft": tuple(s * 1e3 for s in run.ttft_s), "tpot": tuple(s * 1e3 for s in run.tpot_s)}
        lengths = sorted(r.seq for r in chosen)
        facts = {
            "prompt": lengths[(len(lengths) - 1) // 2],  # the (low) median prompt length
            "tokens": run.tokens,
            "runs": options["runs"],
            "requests": [[r.batch, r.seq] for r in chosen],
            "inputs": inputs_text,
        }
        return series, facts

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
