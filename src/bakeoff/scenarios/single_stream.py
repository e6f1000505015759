"""Single-stream: one request at a time, the main timing of every trial.

The session times it itself (interleaved with the other targets, round by round); this module
declares what it offers: request latency percentiles (``p50``, ``p90``...) and the time to first
result (preparing, compiling and the first call), and its headline figures.
"""

from __future__ import annotations

from typing import Any

from bakeoff.scenarios.base import MetricSpec, Scenario, ScenarioResult, point
from bakeoff.stats import percentile
from bakeoff.units import figure

__all__ = ["SingleStream"]


class SingleStream(Scenario):
    """One request at a time: every trial's own timing (never run by :func:`run_scenario`)."""

    name = "single-stream"
    always = True
    metrics = (
        MetricSpec("", "time", "request latency", samples=lambda r, s: r.latency.samples_ms if r.latency else ()),
        MetricSpec(
            "first_result",
            "time",
            "time to first result: preparing, compiling and the first call",
            estimate=lambda r, s: point(r.time_to_first_result_ms),
        ),
    )

    def figures(self, result: Any, scenario: ScenarioResult, estimate: Any) -> list[str]:
        count = result.latency.count if result.latency else 0
        figures = [estimate(m, m) for m in ("p50", "p90", "p99")] + [f"{count} requests"]
        shapes = list(scenario.series.items())
        for shape, samples in shapes[:6]:  # per profile shape
            few = f"only {len(samples)} samples: p99 needs 100" if len(samples) < 100 else f"n={len(samples)}"
            figures.append(f"{shape}: p50 {_ms(percentile(samples, 50))}, p99 {_ms(percentile(samples, 99))} ({few})")
        if len(shapes) > 6:
            figures.append(f"{len(shapes) - 6} more shape(s) in the JSON")
        return figures


def _ms(value: float) -> str:
    return figure(value, "ms")
