"""Service requirements (``p90<=50ms``, ``throughput>=200/s``, ...): parsing and verdicts.

A requirement names a metric, a comparison and a threshold with a unit. Parsing normalises the
threshold to the metric's base unit (milliseconds, per second, bytes). A verdict compares the
measured point estimate with the threshold and says whether the whole confidence interval lies
on the same side (``confident``): "met" with an interval that straddles the threshold means the
data cannot rule out missing it. A figure read once (time to first result, peak memory, the rate
a server sweep sustained) is a *single observation*: it has no interval, so its verdict is never
``confident``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from bakeoff.errors import SpecError
from bakeoff.stats import Estimate

__all__ = [
    "SINGLE_OBSERVATION",
    "MetricLookup",
    "Requirement",
    "RequirementCheck",
    "check_requirements",
    "parse_requirement_with",
    "percentile_of",
    "requirement_state",
]

_TIME = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1e3, "min": 60e3}
_BYTES = {
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_RATE = {"/s": 1.0, "/min": 1 / 60, "tok/s": 1.0, "samples/s": 1.0, "": 1.0}
#: the reason a verdict on one reading gives, and what renderers show for its interval
SINGLE_OBSERVATION = "single observation"
_KINDS = {
    "time": ("ms", _TIME),
    "bytes": ("B", _BYTES),
    "rate": ("/s", _RATE),
    "count": ("", {"": 1.0}),  # graphs, recompilations, op calls on the host: no unit
    "share": ("", {"": 1.0, "%": 0.01}),  # a fraction: 0.95 or 95%
    "score": ("", {"": 1.0}),  # a difference in a score's own points (quality>=-0.5): no unit
}

_PATTERN = re.compile(
    r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(<=|>=|<|>)\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(\S*)\s*$"
)
_PCT = re.compile(r"^p(\d{1,2}(?:\.\d+)?)$")


@dataclass(frozen=True)
class Requirement:
    """``metric op threshold``; ``threshold`` in the base ``unit`` (ms, /s or B)."""

    text: str
    metric: str
    op: str
    threshold: float
    unit: str
    scenario: str

    def holds(self, value: float) -> bool:
        return {"<=": value <= self.threshold, "<": value < self.threshold}.get(
            self.op, value >= self.threshold if self.op == ">=" else value > self.threshold
        )


#: What a metric name is: ``(kind, scenario that measures it, percentile or None)``.
MetricLookup = Callable[[str], tuple[str, str, float | None]]


def percentile_of(name: str) -> float | None:
    """The percentile ``pNN`` asks for (``p99.9`` -> 99.9), None for any other name."""
    match = _PCT.match(name)
    return float(match.group(1)) if match else None


def parse_requirement_with(text: str, lookup: MetricLookup) -> Requirement:
    """Parse ``p90<=50ms``, ``throughput >= 200/s``, ``peak_memory<=4GiB``, ``ttft<=0.2s``, with
    ``lookup`` saying what each metric name is (the scenarios and the checks declare them:
    :func:`bakeoff.metrics.parse_requirement`).

    Raises:
        SpecError: malformed text, an unknown metric, a percentile of 100 or more, or a unit
            that does not fit the metric (a time without a unit is refused: 50 what?).
    """
    match = _PATTERN.match(text)
    if not match and text.strip().startswith("fits "):
        raise SpecError(
            f"requirement {text!r} is judged by bakeoff fit, not by a trial",
            hint=f"run `bakeoff fit WORKLOAD --on TARGET --require '{text.strip()}'`",
        )
    if not match:
        raise SpecError(
            f"malformed requirement {text!r}",
            hint="write METRIC OP VALUE[UNIT], e.g. 'p90<=50ms' or 'throughput>=200/s'",
        )
    metric, op, number, unit = match.groups()
    kind, scenario, pct = lookup(metric)
    if pct is not None and pct >= 100:
        raise SpecError(f"percentile {pct:g} in {text!r} must be below 100", hint="e.g. p99 or p99.9")
    base, units = _KINDS[kind]
    key = unit if kind != "bytes" else unit.lower()
    if kind == "time" and not unit:
        raise SpecError(f"requirement {text!r} needs a time unit", hint="units: " + ", ".join(units))
    if key not in units:
        named = ", ".join(u for u in units if u)
        raise SpecError(
            f"requirement {text!r}: {unit} is not a {kind} unit",
            hint=("units: " + named + (" (or none)" if kind == "rate" else "")) if named else f"a {kind} takes no unit",
        )
    threshold = float(number) * units[key]
    if threshold < 0 and kind != "score":
        raise SpecError(f"requirement {text!r}: a {kind} cannot be negative", hint="give a limit of 0 or more")
    return Requirement(f"{metric}{op}{number}{unit}", metric, op, threshold, base, scenario)


@dataclass(frozen=True)
class RequirementCheck:
    """One requirement against one target: ``verdict`` is met, not_met or not_measured.

    ``judged_at`` is the offered load (requests/s) a server verdict was judged at, the same for
    every target of a trial; None for other metrics. ``confidence``: the level of the interval
    ``low``-``high`` (a trial's bootstrap intervals are 95%; a service's objectives, 99%).
    """

    requirement: Requirement
    verdict: str
    value: float | None = None
    low: float | None = None
    high: float | None = None
    samples: int = 0
    enough: bool = True
    confident: bool = False
    reason: str = ""
    judged_at: float | None = None
    confidence: float = 0.95

    def to_dict(self) -> dict:
        req = self.requirement
        return {
            "text": req.text,
            "metric": req.metric,
            "op": req.op,
            "threshold": req.threshold,
            "unit": req.unit,
            "scenario": req.scenario,
            "verdict": self.verdict,
            "value": self.value,
            "low": self.low,
            "high": self.high,
            "samples": self.samples,
            "enough": self.enough,
            "confident": self.confident,
            "reason": self.reason,
            "judged_at": self.judged_at,
            "confidence": self.confidence,
        }


#: The states of a stored requirement verdict (:func:`requirement_state`), one word each.
STATES = ("met", "not met", "not conclusive", "too few samples", "not measured", "not applicable")


def requirement_state(item: Mapping[str, object]) -> str:
    """The one word every report and the decision use for a stored requirement verdict (a
    :meth:`RequirementCheck.to_dict`): ``met`` / ``not met`` only when conclusive (the whole
    interval on one side, or a single observation, which has none), else ``not conclusive``
    (the interval straddles the threshold); ``too few samples``, ``not measured`` and ``not
    applicable`` as stored. "Met" beside an undecided decision would be two answers to one
    question."""
    verdict = item.get("verdict")
    if verdict == "not_applicable":
        return "not applicable"
    if verdict not in ("met", "not_met"):
        return "not measured"
    if not item.get("enough", True):
        return "too few samples"
    if item.get("confident") or SINGLE_OBSERVATION in str(item.get("reason") or ""):
        return "met" if verdict == "met" else "not met"
    return "not conclusive"


def check_requirements(
    requirements: Sequence[Requirement], measured: Mapping[str, Estimate], missing: Mapping[str, str] | None = None
) -> list[RequirementCheck]:
    """Verdicts for ``requirements`` against ``measured`` metrics (in base units).

    ``missing`` explains, per metric or else per scenario, why a metric was not measured (the
    scenario failed or does not apply, the check has no value); a requirement with no
    measurement is ``not_measured`` with that reason.
    """
    checks = []
    for req in requirements:
        estimate = measured.get(req.metric)
        if estimate is None:
            known = missing or {}
            why = (
                known.get(req.metric)
                or known.get(req.scenario)
                or f"the {req.scenario or 'memory'} scenario did not measure it"
            )
            checks.append(RequirementCheck(req, "not_measured", reason=why))
            continue
        met = req.holds(estimate.value)
        if estimate.samples <= 1:  # one reading: no spread to build an interval from
            checks.append(
                RequirementCheck(
                    req,
                    "met" if met else "not_met",
                    estimate.value,
                    samples=estimate.samples,
                    enough=estimate.enough,
                    reason=f"{SINGLE_OBSERVATION}: no interval",
                )
            )
            continue
        confident = all(req.holds(v) == met for v in (estimate.low, estimate.high))
        checks.append(
            RequirementCheck(
                req,
                "met" if met else "not_met",
                estimate.value,
                estimate.low,
                estimate.high,
                estimate.samples,
                estimate.enough,
                confident,
                "" if estimate.enough else f"only {estimate.samples} sample(s) back this figure",
            )
        )
    return checks
