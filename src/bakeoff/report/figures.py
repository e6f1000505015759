"""Headline figures of scenarios as short strings, shared by the terminal and the reports.

Values come from :func:`bakeoff.verdicts.metrics.metric_estimate`, so every renderer shows the
same numbers with the same 95% intervals.
"""

from __future__ import annotations

from typing import Any

from bakeoff.results.values import TargetResult
from bakeoff.stats import percentile

__all__ = ["figure", "human_bytes", "placement_share", "requirement_figures", "scenario_figures"]


def human_bytes(value: int | None) -> str:
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(value)


def figure(value: float, unit: str) -> str:
    if unit == "B":
        return human_bytes(int(value))
    if unit == "/s":
        return f"{value:,.1f}/s"
    return f"{value:.3g} ms" if value < 1000 else f"{value / 1000:.3g} s"


def _estimate(result: TargetResult, metric: str, label: str, unit: str = "ms") -> str | None:
    from bakeoff.verdicts.metrics import metric_estimate

    found = metric_estimate(result, metric)
    if found is None:
        return None
    text = f"{label} {figure(found.value, unit)}"
    if found.high > found.low:
        text += f" [{figure(found.low, unit)}-{figure(found.high, unit)}]"
    if not found.enough:
        from bakeoff.analysis.requirements import metric_percentile
        from bakeoff.stats import samples_needed

        pct = metric_percentile(metric)
        need = f": p{pct:g} needs {samples_needed(pct)}" if pct is not None else ""
        text += f" (only {found.samples} samples{need})"
    elif found.samples > 1:
        text += f" (n={found.samples})"
    return text


def scenario_figures(result: TargetResult, scenario: Any) -> list[str]:
    """The headline figures of one scenario, with intervals and sample counts."""
    name, facts = scenario.name, scenario.facts
    if name == "single-stream":
        count = result.latency.count if result.latency else 0
        figures = [_estimate(result, m, m) for m in ("p50", "p90", "p99")] + [f"{count} requests"]
        shapes = list(scenario.series.items())
        for shape, samples in shapes[:6]:  # per profile shape
            few = f"only {len(samples)} samples: p99 needs 100" if len(samples) < 100 else f"n={len(samples)}"
            figures.append(
                f"{shape}: p50 {figure(percentile(samples, 50), 'ms')}, p99 {figure(percentile(samples, 99), 'ms')}"
                f" ({few})"
            )
        if len(shapes) > 6:
            figures.append(f"{len(shapes) - 6} more shape(s) in the JSON")
    elif name == "offline":
        tried = [b["batch"] for b in facts["batches"]]
        figures = [
            _estimate(result, "throughput", f"best batch {facts['best_batch']}:", "/s"),
            _estimate(result, "tokens_per_s", "tokens", "/s"),
            f"batches {tried[0]}-{tried[-1]} tried",
        ]
        stopped = next((b for b in facts["batches"] if b["error"]), None)
        if stopped:
            figures.append(f"stopped at {stopped['batch']}: {stopped['error'][:80]}")
    elif name == "server":
        figures = [
            f"rate {facts['rate']:.1f}/s (achieved {facts['achieved_rate']:.1f}/s)",
            _estimate(result, "server.p50", "p50"),
            _estimate(result, "server.p99", "p99"),
            f"queue depth mean {facts['mean_queue_depth']:.2f}, max {facts['max_queue_depth']}",
        ]
        if facts.get("sweep"):
            best = facts.get("max_rate")
            figures.append(
                f"highest rate within {facts['bound']}: "
                + (f"{best:.1f}/s" if best is not None else "none of the rates tried")
            )
            if facts.get("rates_from") == "reference":  # the load is the reference's, and says so
                judged = facts.get("judged_rate")
                figures.append(
                    "swept at the reference's rates; "
                    + (f"latency at its highest within the bound, {judged:.1f}/s" if judged else "it sustained none")
                )
    elif name == "generation":
        figures = [
            _estimate(result, "ttft", "TTFT p50"),
            _estimate(result, "tpot", "TPOT p50"),
            _estimate(result, "tpot.p90", "TPOT p90"),
            f"{facts['runs']}x{facts['tokens']} tokens",
        ]
    else:
        figures = [
            _estimate(result, "step_time", "step p50"),
            _estimate(result, "samples_per_s", "samples", "/s"),
            f"first step {facts['first_step_ms']:.4g} ms",
            f"batch {facts['batch']}, {facts['optimizer']}",
        ]
    if facts.get("graphs"):
        figures.append(f"{facts['graphs']} more graph(s) compiled for its new shapes")
    elif facts.get("compilations"):  # documents written before graphs were counted per scenario
        figures.append(f"{facts['compilations']} compilation(s) for its new shapes")
    return [f for f in figures if f]


def requirement_figures(check: dict[str, Any]) -> tuple[str, str]:
    """``(measured, interval)`` of one requirement check, in its unit ("-" where there is none).

    A value read once has no interval: its interval reads "single observation", never a
    zero-width range that would look like certainty.
    """
    from bakeoff.analysis.requirements import SINGLE_OBSERVATION

    unit = check.get("unit") or "ms"
    value, low, high = check.get("value"), check.get("low"), check.get("high")
    measured = "-" if value is None else figure(value, unit)
    interval = "-"
    if value is not None and check.get("samples") == 1:
        interval = SINGLE_OBSERVATION
    elif low is not None and high is not None and high > low:
        interval = f"{figure(low, unit)}-{figure(high, unit)}"
    return measured, interval


def placement_share(result: TargetResult) -> str:
    """Where the op calls ran, in words that match the audit's figures.

    An engine that reports its work gets its own share (of the op calls handed to it); a CPU
    target's dispatch audit says nothing about where work ran (the host is the device), so
    it gets none; a device target gets the share of op calls (and FLOPs) on the device.
    """
    p = result.placement
    if p is None:
        return ""
    work = p.engine_work
    if work and work.get("share") is not None:
        return (
            f"{work.get('engine', 'the engine')} ran {work['share']:.0%} of the op calls handed to it "
            f"({work.get('op_calls_in_engine', 0)} of {work.get('op_calls', 0)})"
        )
    if result.target.device == "cpu" or p.verdict == "not_applicable" or p.device_op_share is None:
        return ""
    text = f"{p.device_op_share:.0%} of ops on the device ({p.ops_on_device} of {p.ops_total})"
    if p.device_flop_share is not None:
        text += f", {p.device_flop_share:.0%} of FLOPs"
    return text
