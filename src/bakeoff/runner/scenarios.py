"""Scenarios: how a service uses the model, turned into callables the timing loops can run.

``single-stream`` is the main timing of every trial (one request at a time, interleaved with
the other targets). The others run after it, in the target's worker:

* ``offline``: doubling batch sizes until one fails or gets slow; items/s (and tokens/s for
  token inputs) at the best batch size.
* ``server``: Poisson arrivals at ``rate`` requests/s (or ``rate=sweep``: increasing rates, the
  highest that keeps p99 within ``bound``); latency includes queueing. Every target of a trial
  is loaded alike: a sweep runs the reference's rates under the reference's bound
  (:func:`common_load`), so that no two targets are compared at different loads.
* ``generation``: greedy decoding with a KV cache: time to first token, time per output token.
* ``training``: forward, backward and optimiser step; step time and samples/s.

A scenario that does not fit a workload or target is ``not_applicable`` with the reason; one
that raises is ``error`` with its message. Neither stops the trial.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bakeoff.errors import SpecError
from bakeoff.measure.clock import Clock
from bakeoff.results.values import ScenarioResult
from bakeoff.specsyntax import split_options

__all__ = [
    "SCENARIOS",
    "SWEEP_FRACTIONS",
    "ScenarioContext",
    "ScenarioSpec",
    "common_load",
    "parse_scenario",
    "run_scenario",
    "with_requirement_bound",
]

#: name -> {option: (type, default)}
SCENARIOS: dict[str, dict[str, tuple[type, Any]]] = {
    "single-stream": {},
    "offline": {"max_batch": (int, 64), "seq": (int, None)},
    "server": {"rate": (str, "sweep"), "requests": (int, 100), "bound": (str, None), "seed": (int, 0)},
    "generation": {"prompt": (int, 16), "tokens": (int, 16), "runs": (int, 5)},
    "training": {"steps": (int, 10), "warmup": (int, 2), "optimizer": (str, "adamw"), "lr": (float, 1e-4)},
}
_OPTIMIZERS = ("adamw", "sgd")
#: a sweep's rates as fractions of the reference's capacity (1 / mean single-stream time): light
#: to nearly saturated, then beyond, for targets faster than the reference
SWEEP_FRACTIONS = (0.1, 0.25, 0.5, 0.7, 0.85, 0.95, 1.2, 1.5, 2.0, 3.0, 5.0, 10.0)


@dataclass(frozen=True)
class ScenarioSpec:
    """A scenario and its options, e.g. ``server?rate=20&requests=200``.

    Besides the options a user writes, a trial may set ``ladder`` and ``judge_at`` on a server
    sweep (see :func:`common_load`); they are kept with the results but not in :attr:`spec`.
    """

    name: str
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def spec(self) -> str:
        known = SCENARIOS[self.name]
        given = {k: v for k, v in self.options.items() if k in known and v != known[k][1]}
        return self.name + ("?" + "&".join(f"{k}={v}" for k, v in given.items()) if given else "")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "options": dict(self.options)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScenarioSpec:
        return cls(data["name"], dict(data.get("options", {})))


def parse_scenario(text: str) -> ScenarioSpec:
    """Parse ``offline``, ``server?rate=20``, ``generation?tokens=32``, ...

    Raises:
        SpecError: an unknown scenario or option, or a value of the wrong type.
    """
    head, given = split_options(text, "scenario")
    if head not in SCENARIOS:
        raise SpecError(f"unknown scenario {head!r}", hint="use one of " + ", ".join(SCENARIOS))
    known = SCENARIOS[head]
    options = {}
    for key, (kind, default) in known.items():
        options[key] = default
        if key in given:
            try:
                options[key] = kind(given[key])
            except ValueError:
                what = "a whole number" if kind is int else "a number"
                raise SpecError(
                    f"scenario option {key}={given[key]!r} in {text!r} is not {what}",
                    hint=f"e.g. {head}?{key}={default if default is not None else 16}",
                ) from None
    unknown = sorted(set(given) - set(known))
    if unknown:
        allowed = ", ".join(known) or "none"
        raise SpecError(f"scenario {head!r} has no option {unknown[0]!r}", hint=f"options: {allowed}")
    _validate(head, options, text)
    return ScenarioSpec(head, options)


def _validate(name: str, options: dict[str, Any], text: str) -> None:
    from bakeoff.analysis.requirements import parse_requirement

    for key in ("max_batch", "seq", "requests", "prompt", "tokens", "runs", "steps"):
        if options.get(key) is not None and options[key] < 1:
            raise SpecError(f"scenario option {key} in {text!r} must be at least 1", hint=f"e.g. {key}=16")
    if name == "server":
        if options["rate"] != "sweep":
            try:
                rate = float(options["rate"])
            except ValueError:
                raise SpecError(
                    f"server rate {options['rate']!r} is not a number or 'sweep'", hint="e.g. server?rate=20"
                ) from None
            if rate <= 0:
                raise SpecError(f"server rate {rate:g} must be positive", hint="e.g. server?rate=20")
        if options["bound"] is not None:
            bound = parse_requirement(options["bound"])
            if bound.unit != "ms" or not bound.op.startswith("<"):
                raise SpecError(
                    f"server bound {options['bound']!r} must be a latency limit", hint="e.g. bound=p99<=50ms"
                )
    if name == "training" and options["optimizer"] not in _OPTIMIZERS:
        raise SpecError(f"unknown optimizer {options['optimizer']!r}", hint="use " + " or ".join(_OPTIMIZERS))


@dataclass
class ScenarioContext:
    """What a scenario needs from the target's session."""

    workload: Any
    prepared: Any
    target: Any
    sync: Callable[[], None]
    clock: Clock | None
    service_s: list[float]  # single-stream samples: the server sweep scales its rates and bound to them
    requests: list[Callable[[], Any]]  # one call per request of the traffic, in arrival order


def _tile(value: Any, times: int) -> Any:
    import torch
    from torch.utils._pytree import tree_map_only

    return tree_map_only(torch.Tensor, lambda t: torch.cat([t] * times) if t.dim() else t, value)


def _tokens_per_item(args: tuple, kwargs: dict) -> int | None:
    ids = kwargs.get("input_ids", args[0] if args else None)
    if ids is not None and hasattr(ids, "dtype") and not ids.is_floating_point() and ids.dim() == 2:
        return int(ids.shape[1])
    return None


def _offline(ctx: ScenarioContext, options: dict) -> tuple[dict, dict]:
    from bakeoff.measure.scenarios import batch_sweep
    from bakeoff.stats import percentile
    from bakeoff.target.execute import place_inputs

    workload, target = ctx.workload, ctx.target
    base_batch = next((t.shape[0] for t in _leaves(workload.args, workload.kwargs) if t.dim()), 1)

    def inputs(batch: int) -> tuple[tuple, dict]:
        if options["seq"] is not None:
            return workload.inputs_for(batch, options["seq"])
        if batch % base_batch:
            raise ValueError(f"batch {batch} is not a multiple of the example's batch {base_batch}")
        return _tile(workload.args, batch // base_batch), _tile(workload.kwargs, batch // base_batch)

    def make_call(batch: int) -> Callable[[], Any]:
        args, kwargs = place_inputs(workload, target, *inputs(batch))
        return lambda: ctx.prepared.model(*args, **kwargs)

    batches, b = [], base_batch
    while b <= max(options["max_batch"], base_batch):
        batches.append(b)
        b *= 2
    tokens = _tokens_per_item(*inputs(base_batch))
    runs = batch_sweep(make_call, batches, ctx.sync, clock=ctx.clock)
    tried, series = [], {}
    for run in runs:
        entry: dict[str, Any] = {"batch": run.batch, "error": run.error}
        if run.samples_s:
            series[f"batch={run.batch}"] = tuple(s * 1e3 for s in run.samples_s)
            p50 = percentile(run.samples_s, 50)
            entry.update(p50_ms=p50 * 1e3, items_per_s=run.batch / p50 if p50 > 0 else None)
            entry["tokens_per_s"] = entry["items_per_s"] * tokens if tokens and entry["items_per_s"] else None
        tried.append(entry)
    ok = [t for t in tried if t.get("items_per_s")]
    if not ok:
        raise RuntimeError(tried[0]["error"] if tried and tried[0]["error"] else "no batch size could be timed")
    best = max(ok, key=lambda t: t["items_per_s"])
    return series, {"batches": tried, "best_batch": best["batch"], "tokens_per_item": tokens}


def _leaves(args: tuple, kwargs: dict) -> list[Any]:
    import torch
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]


def _server(ctx: ScenarioContext, options: dict) -> tuple[dict, dict]:
    """Serve Poisson traffic at a fixed rate, or sweep rising rates until one misses the bound.

    A sweep's rates are ``ladder`` when the trial gives the reference's (with ``judge_at``, the
    reference's highest rate within the bound: this target runs at least up to it, even past a
    miss, so its latency there is measured), else :data:`SWEEP_FRACTIONS` of this target's own
    capacity. ``max_rate`` is the highest rate below the first miss; the latency figures are at
    ``judge_at`` when given, else at ``max_rate`` (or the lowest rate tried when none met).
    """
    import math

    from bakeoff.analysis.queueing import poisson_arrivals
    from bakeoff.analysis.requirements import parse_requirement
    from bakeoff.measure.scenarios import serve
    from bakeoff.stats import percentile

    count = options["requests"]
    calls = [ctx.requests[i % len(ctx.requests)] for i in range(count)]
    samples = ctx.service_s or [1e-3]
    service = max(sum(samples) / len(samples), 1e-6)  # mean service time: 1/mean is the capacity
    if options["bound"] is not None:
        bound = parse_requirement(options["bound"])
    else:  # a stated default: queueing may at most double the single-stream p99
        bound = parse_requirement(f"server.p99<={2 * percentile(samples, 99) * 1e3:.6g}ms")
    pct = float(bound.metric.rsplit("p", 1)[1])

    def run(rate: float, seed: int) -> tuple[Any, float]:
        result = serve(calls, poisson_arrivals(rate, count, seed, exact=True), ctx.sync, rate, ctx.clock)
        return result, percentile(result.latencies, pct) * 1e3

    sweep: list[dict[str, Any]] = []
    ladder: list[float] = []
    if options["rate"] == "sweep":
        given = options.get("ladder")
        ladder = [float(r) for r in given] if given else [float(f"{f / service:.6g}") for f in SWEEP_FRACTIONS]
        judge_at = options.get("judge_at") if given else None
        missed, max_rate, best, judged, first = False, None, None, None, None
        for rate in ladder:
            result, value = run(rate, options["seed"])
            met = bound.holds(value)
            sweep.append({"rate": rate, "achieved_rate": result.achieved_rate, f"p{pct:g}_ms": value, "met": met})
            first = first or result
            if met and not missed:
                max_rate, best = rate, result
            missed = missed or not met
            if judge_at is not None and math.isclose(rate, judge_at, rel_tol=1e-9):
                judged = result
            if missed and (judge_at is None or rate >= judge_at * (1 - 1e-9)):
                break  # every rate up to the common load is measured; beyond a miss, none
        if given:
            chosen, judged_rate, rates_from = judged or best or first, judge_at if judged else None, "reference"
        else:
            chosen, judged_rate, rates_from = best or first, max_rate, "own"
    else:
        chosen, _ = run(float(options["rate"]), options["seed"])
        max_rate, judged_rate, rates_from = None, chosen.rate, "fixed"
    assert chosen is not None
    facts = {
        "rate": chosen.rate,
        "achieved_rate": chosen.achieved_rate,
        "mean_queue_depth": sum(chosen.depths) / len(chosen.depths),
        "max_queue_depth": max(chosen.depths),
        "bound": bound.text,
        "sweep": sweep,
        "max_rate": max_rate,
        "ladder": ladder,
        "rates_from": rates_from,
        "judged_rate": judged_rate,
    }
    series = {"latency": tuple(x * 1e3 for x in chosen.latencies), "wait": tuple(x * 1e3 for x in chosen.waits)}
    return series, facts


def with_requirement_bound(spec: ScenarioSpec, requirements: Sequence[Any]) -> ScenarioSpec:
    """A server scenario whose bound is the first server latency requirement, unless it has one.

    ``--require 'server.p99<=50ms'`` then decides which rates a sweep counts as sustained, the
    same for every target, instead of a bound derived from a target's own latency.
    """
    if spec.name != "server" or spec.options.get("bound") is not None:
        return spec
    for req in requirements:
        if req.scenario == "server" and req.unit == "ms" and req.op.startswith("<"):
            return ScenarioSpec("server", {**spec.options, "bound": req.text})
    return spec


def common_load(specs: Sequence[ScenarioSpec], reference: Any) -> tuple[ScenarioSpec, ...]:
    """The scenarios a non-reference target runs, given the reference's finished result.

    A server sweep takes the reference's rates (its whole ladder), its bound, and its highest
    rate within the bound as the load every target's latency is judged at, so that a rate or
    latency comparison never sets targets under different loads. Without a reference sweep (it
    failed, or did not run) the spec is unchanged and the verdicts refuse to compare.
    """
    server = reference.scenario("server") if reference is not None and reference.status == "ok" else None
    out = []
    for spec in specs:
        if spec.name == "server" and spec.options.get("rate") == "sweep" and server is not None:
            facts = server.facts if server.status == "ok" else {}
            if facts.get("ladder"):
                spec = ScenarioSpec(
                    "server",
                    {
                        **spec.options,
                        "bound": facts["bound"],
                        "ladder": list(facts["ladder"]),
                        "judge_at": facts["max_rate"],
                    },
                )
        out.append(spec)
    return tuple(out)


def _generation(ctx: ScenarioContext, options: dict) -> tuple[dict, dict]:
    from bakeoff.measure.scenarios import generate
    from bakeoff.target.execute import place_inputs

    args, kwargs = place_inputs(ctx.workload, ctx.target, *ctx.workload.inputs_for(1, options["prompt"]))
    ids = kwargs.get("input_ids", args[0] if args else None)
    model, key = ctx.prepared.model, _cache_argument(ctx.workload.model)

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


def _cache_argument(model: Any) -> str | None:
    """The name a language model's forward takes its KV cache by (transformers 5 renamed it)."""
    forward = getattr(model, "forward", None)
    params = inspect.signature(forward).parameters if forward else {}
    if "input_ids" not in params:
        return None
    return next((name for name in ("cache", "past_key_values") if name in params), None)


def _float_tensors(value: Any) -> list[Any]:
    """Floating tensors anywhere in a model's output (dicts, model outputs, lists, tuples)."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() else []
    if isinstance(value, dict):
        return [t for v in value.values() for t in _float_tensors(v)]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _float_tensors(v)]
    return []


def _training(ctx: ScenarioContext, options: dict) -> tuple[dict, dict]:
    import torch

    from bakeoff.measure.scenarios import train

    model, prepared = ctx.workload.model, ctx.prepared
    params = [p for p in model.parameters() if p.is_floating_point()]
    for p in params:
        p.requires_grad_(True)
    model.train()
    kind = torch.optim.AdamW if options["optimizer"] == "adamw" else torch.optim.SGD
    optimizer = kind(params, lr=options["lr"])

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.enable_grad():
            losses = [t.float().pow(2).mean() for t in _float_tensors(prepared()) if t.requires_grad]
            if not losses:
                raise RuntimeError("no output depends on the parameters: nothing to train")
            torch.stack(losses).sum().backward()
        optimizer.step()

    run = train(step, options["steps"], options["warmup"], ctx.sync, ctx.clock)
    batch = next((t.shape[0] for t in _leaves(prepared.args, prepared.kwargs) if t.dim()), 1)
    facts = {
        "first_step_ms": run.first_step_s * 1e3,
        "batch": batch,
        "optimizer": options["optimizer"],
        "loss": "mean square of the floating outputs (what a step costs, not what it learns)",
    }
    return {"step": tuple(s * 1e3 for s in run.samples_s)}, facts


_RUNNERS = {"offline": _offline, "server": _server, "generation": _generation, "training": _training}


def _not_applicable(spec: ScenarioSpec, ctx: ScenarioContext) -> str | None:
    from bakeoff.target.engines import ENGINES

    engine = ctx.target.backend in ENGINES
    if spec.name == "generation":
        if _cache_argument(ctx.workload.model) is None or not hasattr(ctx.workload.model, "lm_head"):
            return "not a generative language model (its forward takes no input_ids and KV cache, or it has no lm_head)"
        if ctx.workload.make_inputs is None:
            return "the workload cannot build prompts of other lengths"
        if engine:
            return f"the {ctx.target.backend} engine runs one exported input signature, without a KV cache"
    if spec.name == "training":
        if engine:
            return f"the {ctx.target.backend} engine is inference only"
        if not any(p.is_floating_point() for p in ctx.workload.model.parameters()):
            return "the model has no floating-point parameters to train"
    return None


def run_scenario(spec: ScenarioSpec, ctx: ScenarioContext) -> ScenarioResult:
    """Run one scenario on a prepared target; never raises for the workload's or target's faults."""
    from bakeoff.measure.memory import peak_rss_bytes, reset_peak_rss
    from bakeoff.target.execute import device_peak_memory, reset_device_peak_memory

    reason = _not_applicable(spec, ctx)
    if reason is not None:
        return ScenarioResult(spec.name, "not_applicable", reason, spec.options)
    reset_peak_rss()
    reset_device_peak_memory(ctx.target)
    started = time.monotonic()
    try:
        import torch

        grad = torch.enable_grad() if spec.name == "training" else torch.no_grad()
        with grad:
            series, facts = _RUNNERS[spec.name](ctx, spec.options)
    except Exception as exc:
        return ScenarioResult(
            spec.name,
            "error",
            f"{type(exc).__name__}: {str(exc).strip()[:500]}",
            spec.options,
            run_seconds=time.monotonic() - started,
        )
    return ScenarioResult(
        spec.name,
        "ok",
        "",
        spec.options,
        series=series,
        facts=facts,
        run_seconds=time.monotonic() - started,
        peak_host_rss_bytes=peak_rss_bytes(),
        device_peak_bytes=device_peak_memory(ctx.target),
    )
