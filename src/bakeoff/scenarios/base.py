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
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from bakeoff.codec import Value
from bakeoff.measure.clock import Clock
from bakeoff.specsyntax import Option
from bakeoff.stats import Estimate, percentile, percentile_estimate
from bakeoff.workload.profile import InputProfile

__all__ = [
    "ROUNDS",
    "MetricSpec",
    "Option",
    "Scenario",
    "ScenarioContext",
    "ScenarioResult",
    "ScenarioSpec",
    "lengths_text",
    "point",
    "pooled_estimate",
    "round_series",
    "rounds_text",
    "tensor_leaves",
]

#: How many times a scenario runs, each time in turns with the trial's other targets (A B C,
#: then B C A...), so that drift on a busy machine falls on every target alike. Its figures
#: pool the rounds, and their intervals also cover how far the rounds' own figures differ.
ROUNDS = Option(
    int,
    3,
    minimum=1,
    help="times it runs, in turns with the other targets; intervals cover how far the rounds differ",
)


def point(value: float | None) -> Estimate | None:
    """A figure read once: an estimate with one sample and no interval."""
    return None if value is None else Estimate(float(value), float(value), float(value), 1)


def lengths_text(values: Sequence[int]) -> str:
    """Sizes in a few words: ``16``, or ``8-212 (12 distinct)``."""
    distinct = sorted(set(values))
    if len(distinct) == 1:
        return str(distinct[0])
    return f"{distinct[0]}-{distinct[-1]} ({len(distinct)} distinct)"


def round_series(scenario: ScenarioResult, name: str) -> list[tuple[float, ...]]:
    """A pooled series cut back into its rounds (one part when it ran once)."""
    samples = tuple(scenario.series.get(name, ()))
    sizes = (scenario.facts.get("round_sizes") or {}).get(name)
    if not sizes or sum(sizes) != len(samples):
        return [samples]
    parts, start = [], 0
    for size in sizes:
        parts.append(samples[start : start + size])
        start += size
    return parts


def pooled_estimate(scenario: ScenarioResult, name: str, pct: float) -> Estimate | None:
    """The ``pct``-th percentile of series ``name`` over every round, with an interval that
    covers both the bootstrap over the pooled samples and each round's own percentile: rounds
    that disagree more than their samples suggest (the machine's load changed between them)
    widen it, so a verdict or a ranking never rests on one round's luck."""
    samples = scenario.series.get(name, ())
    if not samples:
        return None
    pooled = percentile_estimate(samples, pct)
    per_round = [percentile(part, pct) for part in round_series(scenario, name) if part]
    if len(per_round) < 2:
        return pooled
    return replace(pooled, low=min(pooled.low, *per_round), high=max(pooled.high, *per_round))


def rounds_text(scenario: ScenarioResult) -> str | None:
    """The words for a scenario merged from more than one round (``3 rounds in turns, pooled``),
    else None (the single-stream scenario's ``rounds`` are its timing rounds, not these)."""
    rounds = len(scenario.facts.get("each_round") or ())
    return f"{rounds} rounds in turns, pooled" if rounds > 1 else None


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
        rates_are: what its :meth:`rates` count and their unit, for a regression's detail
            (``("best batch size's items/s", "item")``).
        state_rank: the verdict words its :meth:`states` give, best highest (words of equal rank
            are different kinds of failure).
        always: every trial runs it, timed by the session itself (single-stream).
        runs_last: it changes the model (training), so it runs after the checks.
        needs_grad: it runs with gradients enabled.
        recorded_by: the command that records it, where a trial does not run it (``service``:
            ``bakeoff serve``); it reads back and renders like any other.
    """

    name: ClassVar[str]
    always: ClassVar[bool] = False
    options: ClassVar[Mapping[str, Option]] = {}
    metrics: ClassVar[tuple[MetricSpec, ...]] = ()
    compared: ClassVar[Mapping[str, str]] = {}
    rates_are: ClassVar[tuple[str, str]] = ("items/s", "item")
    state_rank: ClassVar[Mapping[str, int]] = {}
    runs_last: ClassVar[bool] = False
    recorded_by: ClassVar[str] = ""
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

    def merge(self, rounds: Sequence[ScenarioResult]) -> ScenarioResult:
        """One result from this scenario's rounds, in the order they ran.

        Every series is pooled (``round_sizes`` says where each round's part ends, for
        :func:`round_series`); the facts are the first round's (the load it set is every later
        round's), with ``rounds`` and ``each_round`` (every round's facts) added and the graphs
        the rounds compiled summed. A round that did not end ok is the result, named by round:
        a scenario that failed once is not reported as measured.
        """
        first = rounds[0]
        if len(rounds) == 1 or first.status != "ok":
            return first
        seconds = sum(r.run_seconds for r in rounds)
        failed = next((i for i, r in enumerate(rounds) if r.status != "ok"), None)
        if failed is not None:
            bad = rounds[failed]
            why = f"round {failed + 1} of {len(rounds)}: {bad.reason}"
            return replace(bad, reason=why, run_seconds=seconds)
        names = list(dict.fromkeys(name for r in rounds for name in r.series))
        facts = {**first.facts, "rounds": len(rounds), "each_round": [r.facts for r in rounds]}
        facts["round_sizes"] = {name: [len(r.series.get(name, ())) for r in rounds] for name in names}
        if all("graphs" in r.facts for r in rounds):
            facts["graphs"] = sum(r.facts["graphs"] for r in rounds)
        peaks = [r.peak_host_rss_bytes for r in rounds if r.peak_host_rss_bytes is not None]
        device = [r.device_peak_bytes for r in rounds if r.device_peak_bytes is not None]
        return replace(
            first,
            series={name: tuple(x for r in rounds for x in r.series.get(name, ())) for name in names},
            facts=facts,
            run_seconds=seconds,
            peak_host_rss_bytes=max(peaks) if peaks else None,
            device_peak_bytes=max(device) if device else None,
        )

    def figures(self, result: Any, scenario: ScenarioResult, estimate: Callable[..., str | None]) -> list[str]:
        """Headline figures of this scenario's result; ``estimate(metric, label, unit)`` renders
        a requirement metric with its interval."""
        return []

    def rates(self, scenario: ScenarioResult) -> Mapping[str, float | None]:
        """Higher-is-better single figures regressions compare (metric name -> value)."""
        return {}

    def states(self, scenario: ScenarioResult) -> Mapping[str, str]:
        """Verdict-like parts of the result regressions compare (metric name -> a word of
        :attr:`state_rank`): which part got worse, not only that the whole did."""
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
