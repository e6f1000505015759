"""What a scenario is: one way a service uses the model, owned by one module.

A scenario owns its whole slice: its typed options and their validation, when it does not apply
to a workload or target (and why), its run loop (in the target's worker, after single-stream
timing), the metrics it offers to requirements and to regressions, the headline figures the
reports show, and how it takes the reference's load or a requirement's bound. The trial, the
requirement verdicts, the regressions and the reports iterate
:func:`~bakeoff.scenarios.registry.registered_scenarios` and never name one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from bakeoff.codec import Value
from bakeoff.measure.clock import Clock
from bakeoff.specsyntax import Option
from bakeoff.stats import Estimate
from bakeoff.workload.profile import InputProfile

__all__ = [
    "MetricSpec",
    "Option",
    "Scenario",
    "ScenarioContext",
    "ScenarioResult",
    "ScenarioSpec",
    "lengths_text",
    "point",
    "tensor_leaves",
]


def point(value: float | None) -> Estimate | None:
    """A figure read once: an estimate with one sample and no interval."""
    return None if value is None else Estimate(float(value), float(value), float(value), 1)


def lengths_text(values: Sequence[int]) -> str:
    """Sizes in a few words: ``16``, or ``8-212 (12 distinct)``."""
    distinct = sorted(set(values))
    if len(distinct) == 1:
        return str(distinct[0])
    return f"{distinct[0]}-{distinct[-1]} ({len(distinct)} distinct)"


def tensor_leaves(args: tuple, kwargs: dict) -> list[Any]:
    """The tensors anywhere in a call's arguments."""
    import torch
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]


@dataclass(frozen=True)
class ScenarioResult(Value):
    """One scenario on one target.

    ``series`` keeps the raw samples in milliseconds by name (``latency``, ``wait``, ``ttft``,
    ``tpot``, ``step``, ``batch=8``...); ``facts`` the measured scalars and settings that came
    with them (batch sizes tried, achieved rate, queue depths; ``inputs``, where a scenario
    builds inputs of its own, says which in words). ``status`` is ok, error or
    not_applicable (``reason`` says why). Memory is the peak during this scenario alone where
    the OS allows resetting it (Linux), else the process's peak so far.
    """

    name: str
    status: str
    reason: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    series: dict[str, tuple[float, ...]] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
    run_seconds: float = 0.0
    peak_host_rss_bytes: int | None = None
    device_peak_bytes: int | None = None


@dataclass(frozen=True)
class MetricSpec:
    """A metric a scenario offers to requirements (``--require NAME<=VALUE``).

    ``kind`` is time (ms), rate (/s) or bytes. A *percentile family* reads percentiles of one of
    the scenario's series: ``series`` names it (or ``samples(result, scenario)`` gives them), and
    the metric is written ``NAME.pNN`` (``NAME`` alone is the median when ``bare``); the
    single-stream family has the empty name, so its metrics are ``p50``, ``p90``... A *fixed*
    metric has an ``estimate(result, scenario)`` of its own. ``scenario`` is the scenario's
    result when it ran and None otherwise; only the single-stream metrics are read without it.
    """

    name: str
    kind: str
    help: str
    series: str = ""
    bare: bool = False
    samples: Callable[[Any, Any], Sequence[float]] | None = None
    estimate: Callable[[Any, Any], Any] | None = None

    @property
    def percentiled(self) -> bool:
        return bool(self.series) or self.samples is not None


@dataclass(frozen=True)
class ScenarioSpec:
    """A scenario and its options, e.g. ``server?rate=20&requests=200``.

    Besides the options a user writes, a trial may add options of its own (a server sweep's
    ``ladder`` and ``judge_at``, from the reference); they are kept with the results but not in
    :attr:`spec`.
    """

    name: str
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def spec(self) -> str:
        from bakeoff.scenarios.registry import scenario_named

        known = scenario_named(self.name).options
        given = {k: v for k, v in self.options.items() if k in known and v != known[k].default}
        return self.name + ("?" + "&".join(f"{k}={v}" for k, v in given.items()) if given else "")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "options": dict(self.options)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScenarioSpec:
        return cls(data["name"], dict(data.get("options", {})))


@dataclass
class ScenarioContext:
    """What a scenario needs from the target's session; ``profile`` is the trial's input
    profile (None without ``--profile``), for scenarios that build inputs of their own."""

    workload: Any
    prepared: Any
    target: Any
    sync: Callable[[], None]
    clock: Clock | None
    service_s: list[float]  # single-stream samples: the server sweep scales its rates and bound to them
    requests: list[Callable[[], Any]]  # one call per request of the traffic, in arrival order
    profile: InputProfile | None = None


class Scenario:
    """The base of every scenario; subclasses set the class attributes and override what they use.

    Attributes:
        name: how users name it (``--scenario NAME?option=value``) and the key of its result.
        options: its options, by name.
        metrics: what it offers to requirements.
        compared: regressions compare these series between runs (metric name -> series name;
            lower is better).
        always: every trial runs it, timed by the session itself (single-stream).
        runs_last: it changes the model (training), so it runs after the checks.
        needs_grad: it runs with gradients enabled.
    """

    name: ClassVar[str]
    always: ClassVar[bool] = False
    options: ClassVar[Mapping[str, Option]] = {}
    metrics: ClassVar[tuple[MetricSpec, ...]] = ()
    compared: ClassVar[Mapping[str, str]] = {}
    runs_last: ClassVar[bool] = False
    needs_grad: ClassVar[bool] = False

    def validate(self, options: dict[str, Any], text: str) -> None:
        """Refuse option values that are well-typed but wrong (SpecError); types and minimums
        are checked before, from :attr:`options`."""

    def not_applicable(self, context: ScenarioContext) -> str | None:
        """Why the scenario does not fit this workload or target (None: it does)."""
        return None

    def run(self, context: ScenarioContext, options: dict[str, Any]) -> tuple[dict, dict]:
        """``(series, facts)``: raw samples in milliseconds by name, and the measured scalars."""
        raise NotImplementedError

    def figures(self, result: Any, scenario: ScenarioResult, estimate: Callable[..., str | None]) -> list[str]:
        """Headline figures of this scenario's result; ``estimate(metric, label, unit)`` renders
        a requirement metric with its interval."""
        return []

    def rates(self, scenario: ScenarioResult) -> Mapping[str, float | None]:
        """Higher-is-better single figures regressions compare (metric name -> value)."""
        return {}

    def judge(self, result: Any, scenario: ScenarioResult, check: Any) -> Any:
        """A requirement's verdict on this scenario's metric, adjusted where the scenario must
        say under which conditions it holds (the server's load)."""
        return check

    def for_requirements(self, spec: ScenarioSpec, requirements: Sequence[Any]) -> ScenarioSpec:
        """The spec adjusted to the requirements (a server's bound from a latency requirement)."""
        return spec

    def aligned(self, spec: ScenarioSpec, reference: Any) -> ScenarioSpec:
        """The spec a non-reference target runs, given the reference's finished result, so that
        no two targets are compared under different conditions."""
        return spec
