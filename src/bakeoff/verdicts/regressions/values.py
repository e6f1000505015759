"""The values a regression comparison is made of, and the difference between two environments.

:class:`Thresholds` (when a change counts), :class:`MetricChange` (one metric before and after),
:class:`Comparison` (a target's result in one run against another, metric by metric) and
:class:`EnvironmentDiff` (what differs between the two environments, kept as a difference and
never tested as the cause), with :func:`environment_diff` and :func:`flattened` that make it.
The vocabulary of outcomes (:data:`OUTCOMES`) and what the detail of a not conclusive timing
figure begins with (:data:`INCONCLUSIVE`) are here too; see :mod:`bakeoff.verdicts.regressions`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bakeoff.env import VOLATILE, VOLATILE_ENV, Environment

__all__ = [
    "INCONCLUSIVE",
    "OUTCOMES",
    "Comparison",
    "EnvironmentChange",
    "EnvironmentDiff",
    "MetricChange",
    "Thresholds",
    "environment_diff",
    "flattened",
]

OUTCOMES = ("improved", "regressed", "unchanged", "not_comparable", "failed")
#: How the detail of a timing metric that moved, but cannot be called better or worse, begins.
INCONCLUSIVE = "not conclusive"


@dataclass(frozen=True)
class Thresholds:
    """When a change counts.

    Attributes:
        latency: a p50 latency change counts only when ``|after/before - 1|`` exceeds this
            (0.10 = 10%) *and* the bootstrap interval of the ratio excludes 1.
        confidence: the bootstrap interval's level (:func:`~bakeoff.analysis.compare.ratio_of_medians`).
        resamples: bootstrap resamples.
        min_samples: fewer timing samples than this on either side: latency is not comparable
            (an interval from a handful of samples means little).
        first_call: the first call (which includes compilation) is a single observation with no
            interval, so it needs a larger relative change to count (0.5 = 50%) ...
        first_call_floor_ms: ... and an absolute change of more than this many milliseconds (a
            first eager call of 0.2 ms that takes 1.4 ms next time is scheduling jitter, not news).
        op_share: an absolute change of the device op share beyond this counts (0.05 = 5 points).
        compile_counts: graphs, recompiles and graph breaks change when they differ by more than
            this (0: they are exact counts for a fixed input profile).
        cost: a change of cost per million requests counts only when ``|after/before - 1|``
            exceeds this *and* the data can tell the two apart: their intervals do not overlap
            (a single-stream cost's interval is its speed-up's) or, for a reference timed
            against itself, the latency ratio's interval times the price ratio excludes 1. A
            cost at a sustained server rate is a single observation: only its size counts.
    """

    latency: float = 0.10
    confidence: float = 0.95
    resamples: int = 2000
    min_samples: int = 5
    first_call: float = 0.5
    first_call_floor_ms: float = 5.0
    op_share: float = 0.05
    compile_counts: int = 0
    cost: float = 0.10

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class MetricChange:
    """One metric before and after, and what the change means.

    ``change`` is the ratio after/before for times and costs, the difference for counts and
    shares, None for verdicts; ``low``/``high`` bound the latency ratio (bootstrap interval), and
    the cost ratio where it is read from the latency's.
    """

    metric: str
    outcome: str
    before: Any
    after: Any
    change: float | None = None
    low: float | None = None
    high: float | None = None
    detail: str = ""

    @property
    def inconclusive(self) -> bool:
        """A timing figure that moved beyond its threshold inside noise or overlapping intervals."""
        return self.outcome == "not_comparable" and self.detail.startswith(INCONCLUSIVE)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class EnvironmentChange:
    """One environment key (dotted for nested keys, e.g. ``packages.torch``) that differs."""

    key: str
    before: Any
    after: Any

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class EnvironmentDiff:
    """What differs between two environments, volatile keys (capture time, load) left out."""

    before: str
    after: str
    changes: tuple[EnvironmentChange, ...] = ()

    @property
    def same(self) -> bool:
        return not self.changes

    @property
    def libraries(self) -> tuple[EnvironmentChange, ...]:
        """Changes of library versions (torch and the packages list)."""
        return tuple(c for c in self.changes if c.key == "torch" or c.key.startswith("packages."))

    def summary(self, limit: int = 6) -> str:
        """``torch 2.13.0 -> 2.14.0, env.OMP_NUM_THREADS unset -> 4``: libraries first, each once."""
        if self.same:
            return "same environment"
        ordered = [*self.libraries, *(c for c in self.changes if c not in self.libraries)]
        parts = list(
            dict.fromkeys(f"{c.key.removeprefix('packages.')} {_show(c.before)} -> {_show(c.after)}" for c in ordered)
        )
        if len(parts) > limit:
            parts = [*parts[:limit], f"and {len(parts) - limit} more"]
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "before": self.before,
            "after": self.after,
            "changes": [c.to_dict() for c in self.changes],
            "summary": self.summary(),
        }


def _show(value: Any) -> str:
    return "unset" if value is None else str(value)


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):  # an empty dict adds no keys: {} and a missing dict are the same
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def flattened(environment: Environment) -> dict[str, Any]:
    """Every key of ``environment``, nested ones dotted (``packages.torch``), as diffs name them."""
    return _flatten(environment.data)


def environment_diff(before: Environment, after: Environment) -> EnvironmentDiff:
    """Every stable key that differs between two environments, sorted by key."""
    skip = set(VOLATILE) | {f"env.{k}" for k in VOLATILE_ENV}
    a, b = _flatten(before.data), _flatten(after.data)
    changes = tuple(
        EnvironmentChange(key, a.get(key), b.get(key))
        for key in sorted(set(a) | set(b))
        if key not in skip and a.get(key) != b.get(key)
    )
    return EnvironmentDiff(before.fingerprint, after.fingerprint, changes)


@dataclass(frozen=True)
class Comparison:
    """A target's result in one run against its result in another, metric by metric."""

    workload: str
    target: str
    variant: str
    before_run: str
    after_run: str
    before_created_at: str
    after_created_at: str
    outcome: str
    reason: str
    metrics: tuple[MetricChange, ...]
    environment: EnvironmentDiff
    after_target: str = ""
    thresholds: Thresholds = field(default_factory=Thresholds)

    @property
    def regressed(self) -> tuple[MetricChange, ...]:
        return tuple(m for m in self.metrics if m.outcome in ("regressed", "failed"))

    @property
    def improved(self) -> tuple[MetricChange, ...]:
        return tuple(m for m in self.metrics if m.outcome == "improved")

    @property
    def inconclusive(self) -> tuple[MetricChange, ...]:
        """Timing figures that moved, but inside noise or overlapping intervals (see the module
        docstring); none when the pair as a whole is not comparable."""
        return () if self.outcome == "not_comparable" else tuple(m for m in self.metrics if m.inconclusive)

    def metric(self, name: str) -> MetricChange:
        return next(m for m in self.metrics if m.metric == name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "target": self.target,
            "after_target": self.after_target or self.target,
            "variant": self.variant,
            "before_run": self.before_run,
            "after_run": self.after_run,
            "before_created_at": self.before_created_at,
            "after_created_at": self.after_created_at,
            "outcome": self.outcome,
            "reason": self.reason,
            "metrics": [m.to_dict() for m in self.metrics],
            "environment": self.environment.to_dict(),
            "thresholds": self.thresholds.to_dict(),
        }
