"""The registered scenarios: bakeoff's own, then those of installed plugins; and what follows
from them: parsing a scenario spec, running one, and the metric names requirements may use.

A plugin ships a scenario through the ``bakeoff.scenarios`` entry point group, naming a
:class:`~bakeoff.scenarios.base.Scenario` subclass (or instance); one that fails to load, or
whose name is taken, is left out with a line on stderr.
"""

from __future__ import annotations

import time
from functools import cache
from typing import Any

from bakeoff.analysis.requirements import Requirement, parse_requirement_with, percentile_of
from bakeoff.entrypoints import PLUGIN_FAILURES, load_plugins, said_by
from bakeoff.errors import SpecError
from bakeoff.measure.memory import peak_rss_bytes, reset_peak_rss
from bakeoff.scenarios.base import MetricSpec, Scenario, ScenarioContext, ScenarioResult, ScenarioSpec, point
from bakeoff.scenarios.dist import Dist
from bakeoff.scenarios.fit import Fit
from bakeoff.scenarios.generation import Generation
from bakeoff.scenarios.offline import Offline
from bakeoff.scenarios.server import Server
from bakeoff.scenarios.service import Service
from bakeoff.scenarios.single_stream import SingleStream
from bakeoff.scenarios.training import Training
from bakeoff.specsyntax import split_options, typed_options
from bakeoff.target.execute import device_peak_memory, reset_device_peak_memory

__all__ = [
    "ENTRY_POINTS",
    "RUN_METRICS",
    "always_run",
    "find_scenario_metric",
    "known_scenario",
    "parse_scenario",
    "parse_scenario_requirement",
    "registered_scenarios",
    "run_scenario",
    "scenario_metric_help",
    "scenario_named",
]

ENTRY_POINTS = "bakeoff.scenarios"

#: bakeoff's own scenarios, in the order reports list them.
BUILTIN: tuple[Scenario, ...] = (
    SingleStream(),
    Offline(),
    Server(),
    Generation(),
    Training(),
    Service(),
    Fit(),
    Dist(),
)


def _peak(key: str) -> Any:
    """The largest peak of the target and its scenarios (every scenario measures memory)."""

    def estimate(result: Any, _scenario: Any) -> Any:
        values = [getattr(s, key) for s in result.scenarios if getattr(s, key) is not None]
        if getattr(result, key) is not None:
            values.append(getattr(result, key))
        return point(max(values)) if values else None

    return estimate


#: Metrics of the whole target, measured by every scenario.
RUN_METRICS = (
    MetricSpec(
        "peak_memory", "bytes", "peak host memory (RSS) over the scenarios run", estimate=_peak("peak_host_rss_bytes")
    ),
    MetricSpec(
        "device_memory", "bytes", "peak device memory over the scenarios run", estimate=_peak("device_peak_bytes")
    ),
)


def _claims(scenario: Scenario) -> set[str]:
    """The names a scenario's metrics take: its metric names and the series it compares."""
    return {spec.name for spec in scenario.metrics} | set(scenario.compared)


@cache
def registered_scenarios() -> tuple[Scenario, ...]:
    """bakeoff's scenarios, then every plugin scenario that loads (each once per process).

    A plugin scenario may not take a metric name already taken (``p90`` is the single-stream
    family's, ``throughput`` the offline scenario's): it would change what a requirement or a
    regression on that name measures. Such a plugin is left out with one line.
    """
    claimed = {spec.name for spec in RUN_METRICS}.union(*(_claims(s) for s in BUILTIN))
    names = (s.name for s in BUILTIN)
    return (*BUILTIN, *load_plugins(ENTRY_POINTS, Scenario, "scenario", names, claims=_claims, claimed=claimed))


def always_run() -> tuple[str, ...]:
    """The scenarios every trial runs (single-stream), timed by the session itself."""
    return tuple(s.name for s in registered_scenarios() if s.always)


def known_scenario(name: str) -> Scenario | None:
    """The registered scenario called ``name``, or None (a stored result of a scenario this
    bakeoff does not have: written by a newer one, or by an absent plugin)."""
    return next((s for s in registered_scenarios() if s.name == name), None)


def scenario_named(name: str) -> Scenario:
    """The registered scenario called ``name``.

    Raises:
        SpecError: no scenario has that name.
    """
    found = known_scenario(name)
    if found is None:
        names = ", ".join(s.name for s in registered_scenarios() if not s.recorded_by)
        raise SpecError(f"unknown scenario {name!r}", hint=f"use one of {names}")
    return found


def parse_scenario(text: str) -> ScenarioSpec:
    """Parse ``offline``, ``server?rate=20``, ``generation?tokens=32``, ...

    Raises:
        SpecError: an unknown scenario or option, or a value of the wrong type or range.
    """
    head, given = split_options(text, "scenario")
    scenario = scenario_named(head)
    if scenario.recorded_by:
        raise SpecError(f"the {head} scenario is not run in a trial", hint=f"{scenario.recorded_by} records it")
    options = typed_options(head, given, scenario.options, "scenario", text)
    scenario.validate(options, text)
    return ScenarioSpec(head, options)


def run_scenario(spec: ScenarioSpec, ctx: ScenarioContext) -> ScenarioResult:
    """Run one scenario on a prepared target; never raises for the workload's or target's faults."""
    import torch

    scenario = scenario_named(spec.name)
    reason = scenario.not_applicable(ctx)
    if reason is not None:
        return ScenarioResult(spec.name, "not_applicable", reason, spec.options)
    reset_peak_rss()
    reset_device_peak_memory(ctx.target)
    started = time.monotonic()
    # a plugin scenario's sys.exit is its own failure, never the target's (bakeoff's own scenarios
    # let it through: there it is the workload's, and the session says so)
    failures = (Exception,) if scenario in BUILTIN else PLUGIN_FAILURES
    try:
        with torch.enable_grad() if scenario.needs_grad else torch.no_grad():
            series, facts = scenario.run(ctx, spec.options)
    except failures as exc:
        said = f"{type(exc).__name__}: {str(exc).strip()[:500]}" if isinstance(exc, Exception) else said_by(exc)
        return ScenarioResult(spec.name, "error", said, spec.options, run_seconds=time.monotonic() - started)
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


# -- metrics for requirements -----------------------------------------------------------------


def _metrics() -> list[tuple[str, MetricSpec]]:
    """Every metric with the scenario that measures it ("" for the run-level ones)."""
    return [("", m) for m in RUN_METRICS] + [(s.name, m) for s in registered_scenarios() for m in s.metrics]


def find_scenario_metric(metric: str) -> tuple[str, MetricSpec, float | None]:
    """``(scenario, metric spec, percentile)`` for a requirement's metric name that a scenario
    offers (:func:`bakeoff.metrics.find_metric` also knows the checks' metrics).

    Fixed names first (``throughput``, ``server.rate``), then percentiles: ``p90`` of the
    single-stream family, ``NAME.pNN`` of a named family, ``NAME`` alone (the median) where the
    family allows it.

    Raises:
        SpecError: an unknown metric.
    """
    families = {}
    for scenario, spec in _metrics():
        if spec.percentiled:
            families.setdefault(spec.name, (scenario, spec))  # the first to declare a name keeps it
        elif spec.name == metric:
            return scenario, spec, None
    head, dot, tail = metric.partition(".")
    whole = percentile_of(metric)
    if whole is not None and "" in families:
        return (*families[""], whole)
    if head in families and head:
        scenario, spec = families[head]
        if dot and percentile_of(tail) is not None:
            return scenario, spec, percentile_of(tail)
        if not dot and spec.bare:
            return scenario, spec, 50.0
    raise SpecError(f"unknown requirement metric {metric!r}", hint=f"use one of {scenario_metric_help()}")


def scenario_metric_help() -> str:
    """The metric names requirements accept, for a hint: the percentile families, then the rest."""
    metrics = [spec for scenario, spec in _metrics() if scenario] + list(RUN_METRICS)
    names = [
        "p50|p90|p99|p99.9 (single-stream latency)"
        if not spec.name
        else f"{spec.name}[.p90]"
        if spec.bare
        else f"{spec.name}.p99"
        for spec in metrics
        if spec.percentiled
    ]
    return ", ".join(names + [spec.name for spec in metrics if not spec.percentiled])


def _lookup(metric: str) -> tuple[str, str, float | None]:
    scenario, spec, pct = find_scenario_metric(metric)
    return spec.kind, scenario, pct


def parse_scenario_requirement(text: str) -> Requirement:
    """Parse a requirement over the metrics the registered scenarios offer (a server's latency
    bound); :func:`bakeoff.metrics.parse_requirement` also knows the checks' metrics.

    Raises:
        SpecError: malformed text, an unknown metric, a percentile of 100 or more, or a unit
            that does not fit the metric.
    """
    return parse_requirement_with(text, _lookup)
