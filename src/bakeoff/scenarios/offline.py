"""Offline: doubling batch sizes until one fails or gets slow; items/s (and tokens/s for token
inputs) at the best batch size.

Items. With ``seq=N`` every item is built by the workload's input builder at length ``N``.
Otherwise, with an input profile (``--profile``), every item has the profile's median length
(over its items: a request of batch 4 counts four times; the lower median, so a length the
profile holds), built the same way: one length keeps the batch sweep one sweep, and the
median is the typical item the traffic brings (the profile's own batch sizes do not matter
here, the sweep chooses its own). Without either, the workload's example input is tiled to
each batch size. The result's ``inputs`` fact says which.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from bakeoff.measure.loops import batch_sweep
from bakeoff.scenarios.base import (
    ROUNDS,
    MetricSpec,
    Option,
    Scenario,
    ScenarioContext,
    ScenarioResult,
    lengths_text,
    pooled_estimate,
    tensor_leaves,
)
from bakeoff.stats import Estimate, percentile
from bakeoff.target.execute import place_inputs
from bakeoff.units import clip
from bakeoff.workload.profile import InputProfile

__all__ = ["Offline"]


def _tile(value: Any, times: int) -> Any:
    import torch
    from torch.utils._pytree import tree_map_only

    return tree_map_only(torch.Tensor, lambda t: torch.cat([t] * times) if t.dim() else t, value)


def _tokens_per_item(args: tuple, kwargs: dict) -> int | None:
    ids = kwargs.get("input_ids", args[0] if args else None)
    if ids is not None and hasattr(ids, "dtype") and not ids.is_floating_point() and ids.dim() == 2:
        return int(ids.shape[1])
    return None


def item_length(options: Mapping[str, Any], profile: InputProfile | None) -> tuple[int | None, str]:
    """The length every item is built at (None: the example input, tiled) and the words that
    say where it came from (see the module docstring)."""
    if options["seq"] is not None:
        why = f"seq={options['seq']} as given" + (", not the profile's lengths" if profile else "")
        return options["seq"], f"items of {options['seq']} tokens from the workload's input builder ({why})"
    if profile is None or not profile.requests:
        return None, ""
    ordered = sorted(profile.requests, key=lambda r: r.seq)
    middle, seen, median = (sum(r.batch for r in ordered) - 1) // 2, 0, ordered[-1].seq
    for request in ordered:  # the lower median item, without listing every item
        seen += request.batch
        if seen > middle:
            median = request.seq
            break
    lengths = lengths_text([r.seq for r in profile.requests])
    return median, f"profile {profile.source}: items of its median length, {median} tokens (lengths {lengths})"


def _rate(per_item: Callable[[ScenarioResult], float | None]) -> Callable[[Any, Any], Estimate | None]:
    """Items (or tokens) per second at the best batch size, from its median time per batch."""

    def estimate(result: Any, offline: ScenarioResult | None) -> Estimate | None:
        if offline is None:
            return None
        best, items = offline.facts["best_batch"], per_item(offline)
        if not items:
            return None
        median = pooled_estimate(offline, f"batch={best}", 50)
        return median.inverted(best * items * 1e3) if median is not None else None

    return estimate


class Offline(Scenario):
    """The best batch size's throughput (see the module docstring)."""

    name = "offline"
    rates_are = ("best batch size's items/s", "item")
    options: ClassVar[Mapping[str, Option]] = {
        "max_batch": Option(int, 64, minimum=1),
        "seq": Option(int, None, minimum=1, help="item length (default: the profile's median, else the example input)"),
        "rounds": ROUNDS,
    }
    metrics = (
        MetricSpec("throughput", "rate", "items per second at the best batch size", estimate=_rate(lambda s: 1)),
        MetricSpec(
            "tokens_per_s",
            "rate",
            "tokens per second at the best batch size",
            estimate=_rate(lambda s: s.facts.get("tokens_per_item")),
        ),
    )

    def run(self, ctx: ScenarioContext, options: dict) -> tuple[dict, dict]:

        workload, target = ctx.workload, ctx.target
        base_batch = next((t.shape[0] for t in tensor_leaves(workload.args, workload.kwargs) if t.dim()), 1)
        seq, inputs_text = item_length(options, ctx.profile)

        def inputs(batch: int) -> tuple[tuple, dict]:
            if seq is not None:
                return workload.inputs_for(batch, seq)
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
        if seq is None:
            per_item = f" ({tokens} tokens per item)" if tokens else ""
            inputs_text = f"example input{per_item}, tiled to each batch size (no profile)"
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
        return series, {"batches": tried, "best_batch": best["batch"], "tokens_per_item": tokens, "inputs": inputs_text}

    def figures(self, result: Any, scenario: ScenarioResult, estimate: Any) -> list[str]:
        facts = scenario.facts
        tried = [b["batch"] for b in facts["batches"]]
        figures = [
            estimate("throughput", f"best batch {facts['best_batch']}:", "/s"),
            estimate("tokens_per_s", "tokens", "/s"),
            f"batches {tried[0]}-{tried[-1]} tried",
        ]
        stopped = next((b for b in facts["batches"] if b["error"]), None)
        if stopped:
            figures.append(f"stopped at {stopped['batch']}: {clip(stopped['error'], 80)}")
        return figures

    def rates(self, scenario: ScenarioResult) -> Mapping[str, float | None]:
        best = max((b.get("items_per_s") or 0 for b in scenario.facts.get("batches", ())), default=None)
        return {"offline_items_per_s": best or None}
