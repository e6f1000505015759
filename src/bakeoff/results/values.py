"""The values a trial produces. Frozen, serialisable, and free of presentation.

Every value round-trips through ``to_dict``/``from_dict``, which is the generic codec of
:mod:`bakeoff.codec`; :mod:`bakeoff.results.codec` names the whole run's versioned JSON
document. A target's result holds the run-level figures and, in ``checks``, the value of each
registered check by name (:mod:`bakeoff.checks.registry`); in the document each check's value
stands under its own name, beside the run-level keys.

The document's compatibility rule: adding is compatible, readers ignore what they do not know;
removing a key or changing its meaning bumps :data:`SCHEMA_VERSION`. A reader keeps what it does
not know of a target's result (a check or a key written by a newer bakeoff, or by a plugin not
installed here) in ``unknown``, writes it back unchanged, and the reports name it; keys unknown
*inside* a known value are skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

from bakeoff.checks.compilation import Compilation
from bakeoff.checks.correctness import Correctness, TensorComparison
from bakeoff.checks.placement import UNMEASURED, Placement, unmeasured
from bakeoff.checks.registry import registered_checks
from bakeoff.codec import Value, decode_fields, encode
from bakeoff.env import Environment
from bakeoff.errors import BakeoffError
from bakeoff.scenarios.base import ScenarioResult
from bakeoff.stats import is_noisy, mean, percentile
from bakeoff.target.spec import Target

__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "VERDICTS",
    "BaselineInfo",
    "Compilation",
    "Correctness",
    "ErrorInfo",
    "Latency",
    "Placement",
    "RunResult",
    "ScenarioResult",
    "TargetResult",
    "TensorComparison",
]

VERDICTS = ("pass", "fail", "not_comparable", "error")

#: The run document's name and version (see :mod:`bakeoff.results.codec`).
SCHEMA = "bakeoff.run"
SCHEMA_VERSION = 1


STATUSES = ("ok", "error", "skipped")


@dataclass(frozen=True)
class Latency(Value):
    """Raw per-call latencies in milliseconds; statistics are derived, never read back (the
    document carries them for its readers)."""

    DERIVED: ClassVar[tuple[str, ...]] = ("p50_ms", "p90_ms", "p99_ms", "mean_ms", "min_ms", "samples", "noisy")

    samples_ms: tuple[float, ...]

    @property
    def count(self) -> int:
        return len(self.samples_ms)

    def p(self, q: float) -> float:
        return percentile(self.samples_ms, q)

    @property
    def p50_ms(self) -> float:
        return self.p(50)

    @property
    def p90_ms(self) -> float:
        return self.p(90)

    @property
    def p99_ms(self) -> float:
        return self.p(99)

    @property
    def mean_ms(self) -> float:
        return mean(self.samples_ms)

    @property
    def min_ms(self) -> float:
        return min(self.samples_ms)

    @property
    def samples(self) -> int:
        return self.count

    @property
    def noisy(self) -> bool:
        return is_noisy(self.samples_ms)


@dataclass(frozen=True)
class ErrorInfo(Value):
    """A failure kept as data. ``category``: exception, crash, timeout or out_of_memory."""

    type: str
    message: str
    category: str = "exception"
    phase: str = ""
    traceback: str = ""


@dataclass(frozen=True)
class TargetResult:
    """Everything a trial learned about one target.

    ``checks`` holds each check's value by the check's name (a check that did not apply, or did
    not run, has none: ``skipped_checks`` gives the reason where one applies); ``log`` what the
    libraries said while it ran, counted per distinct line (:mod:`bakeoff.results.librarylog`);
    ``unknown`` what a document held that this bakeoff does not know (see the module docstring).
    """

    target: Target
    status: str
    reason: str = ""
    is_reference: bool = False
    checks: Mapping[str, Any] = field(default_factory=dict)
    latency: Latency | None = None
    first_call_ms: float | None = None
    warmup_calls: int | None = None
    settled: bool | None = None
    speedup: float | None = None
    speedup_ci: dict[str, Any] | None = None
    break_even_requests: float | None = None
    peak_host_rss_bytes: int | None = None
    device_peak_bytes: int | None = None
    threads: int | None = None
    load_average: tuple[float, ...] | None = None
    duration_s: float | None = None
    notes: tuple[str, ...] = ()
    adjustments: tuple[dict[str, Any], ...] = ()
    variant: str = "as-is"
    profile: dict[str, Any] | None = None
    error: ErrorInfo | None = None
    prepare_ms: float | None = None
    scenarios: tuple[ScenarioResult, ...] = ()
    requirements: tuple[dict[str, Any], ...] = ()
    conditions: dict[str, Any] | None = None
    noise: tuple[str, ...] = ()
    skipped_checks: dict[str, str] = field(default_factory=dict)
    log: tuple[dict[str, Any], ...] = ()
    unknown: Mapping[str, Any] = field(default_factory=dict)

    #: Fields that are not document keys of their own: the target (written as its spec and
    #: ``target_detail``), the checks (each under its name) and what was not understood.
    _SPREAD: ClassVar[frozenset[str]] = frozenset({"target", "checks", "unknown"})

    def __post_init__(self) -> None:
        # The one placement rule every format reads: a run that did not finish measured no
        # placement. Its audit (a script's audit is written even when the script crashes) saw
        # only what ran before the failure, so its verdict is stored and shown as not measured.
        placement = self.checks.get("placement")
        if self.status != "ok" and isinstance(placement, Placement) and placement.verdict != UNMEASURED:
            object.__setattr__(self, "checks", {**self.checks, "placement": unmeasured(placement, self.status)})
        # A distributed answer's verdicts follow from its figures wherever it is read: its stored
        # words (a crafted import's, an older release's) are judged again, and its requirements
        # rebuilt from that judgement, so every format says the same.
        spread = next((s for s in self.scenarios if s.name == "dist"), None)
        if spread is not None:
            from bakeoff.scenarios.dist import dist_of, world_requirements

            found = dist_of(spread)
            if found is not None:
                rejudged = replace(spread, facts=found.to_dict())
                scenarios = tuple(rejudged if s is spread else s for s in self.scenarios)
                object.__setattr__(self, "scenarios", scenarios)
                object.__setattr__(self, "requirements", world_requirements(found))

    @property
    def correctness(self) -> Correctness | None:
        return self.checks.get("correctness")

    @property
    def placement(self) -> Placement | None:
        return self.checks.get("placement")

    @property
    def compilation(self) -> Compilation | None:
        return self.checks.get("compilation")

    @property
    def time_to_first_result_ms(self) -> float | None:
        """Preparing (moving, casting, compiling setup) plus the first call: a cold start's wait."""
        if self.first_call_ms is None:
            return None
        return (self.prepare_ms or 0.0) + self.first_call_ms

    def scenario(self, name: str) -> ScenarioResult | None:
        return next((s for s in self.scenarios if s.name == name), None)

    @property
    def verdict(self) -> str | None:
        if self.correctness is not None:
            return self.correctness.verdict
        spread = next((s for s in self.scenarios if s.name == "dist"), None)
        if spread is not None and isinstance(spread.facts, Mapping):  # a distributed answer's own verdict
            said = spread.facts.get("verdict")
            return {"pass": "pass", "drift": "pass", "fail": "fail", "hang": "fail", "error": "error"}.get(said)
        return "error" if self.status == "error" else None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"target": self.target.spec}
        for f in fields(self):
            if f.name not in self._SPREAD:
                data[f.name] = encode(getattr(self, f.name))
        for check in registered_checks():
            value = self.checks.get(check.name)
            data[check.name] = None if value is None else check.encode(value)
        for name, value in self.checks.items():  # a value whose check is not registered here
            data.setdefault(name, encode(value))
        for key, value in self.unknown.items():
            data.setdefault(key, value)
        data["target_detail"] = self.target.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TargetResult:
        kwargs = decode_fields(cls, {k: v for k, v in data.items() if k not in cls._SPREAD})
        kwargs["target"] = Target.from_dict(data["target_detail"])
        registered = {check.name: check for check in registered_checks()}
        kwargs["checks"] = {
            name: check.decode(data[name]) for name, check in registered.items() if data.get(name) is not None
        }
        known = {f.name for f in fields(cls)} | set(registered) | {"target_detail"}
        kwargs["unknown"] = {k: v for k, v in data.items() if k not in known}
        return cls(**kwargs)


@dataclass(frozen=True)
class BaselineInfo(Value):
    """A preserved reference for one workload fingerprint and seed."""

    id: str
    workload_spec: str
    fingerprint: str
    seed: int
    created_at: str
    environment_fingerprint: str
    references: tuple[str, ...]
    deterministic: bool
    repeat_max_abs_err: float
    path: str
    sha256: str = ""  # of the tensor file; empty for baselines stored before hashes were kept


@dataclass(frozen=True)
class RunResult(Value):
    """One trial: a workload against several targets, in one environment."""

    run_id: str
    created_at: str
    workload: dict[str, Any]
    environment: Environment
    results: tuple[TargetResult, ...]
    baseline_id: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def fingerprint(self) -> str:
        return self.workload["fingerprint"]

    def to_dict(self) -> dict[str, Any]:
        """The versioned JSON document (see :mod:`bakeoff.results.codec`)."""
        return {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "run_id": self.run_id,
            "created_at": self.created_at,
            "workload": self.workload,
            "environment": self.environment.to_dict(),
            "baseline_id": self.baseline_id,
            "settings": self.settings,
            "results": [r.to_dict() for r in self.results],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        """Read the versioned JSON document, refusing one newer than this release understands."""
        if data.get("schema") != SCHEMA:
            raise BakeoffError(
                f"not a bakeoff run document (schema={data.get('schema')!r})",
                hint="pass JSON written by `bakeoff ... --format json`",
            )
        version = data.get("schema_version")
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise BakeoffError(
                f"run document schema version {version} is newer than this bakeoff understands ({SCHEMA_VERSION})",
                hint="upgrade bakeoff to read it",
            )
        return cls(
            run_id=data["run_id"],
            created_at=data["created_at"],
            workload=data["workload"],
            environment=Environment.from_dict(data["environment"]),
            results=tuple(TargetResult.from_dict(r) for r in data["results"]),
            baseline_id=data.get("baseline_id"),
            settings=data.get("settings", {}),
        )

    def failures(self, placement: bool = False, requirements: bool = False) -> list[str]:
        """Specs of targets that fail a gate: an error or a failed correctness check, and with
        ``placement`` also work that did not stay on the device or in the engine (any placement
        verdict but ``on_device``, except ``not_applicable`` for CPU targets: ``fallbacks``,
        ``left_on_host`` and ``engine_did_not_run`` fail), with ``requirements`` also a
        requirement not met or not measured (one that cannot apply to the target, a compile
        count on an eager target, does not fail it)."""
        failed = []
        for item in self.results:
            bad = item.status == "error" or item.verdict in ("fail", "error")
            if placement and item.placement is not None:
                bad = bad or item.placement.verdict not in ("on_device", "not_applicable")
            if requirements and item.status == "ok":
                bad = bad or any(r["verdict"] not in ("met", "not_applicable") for r in item.requirements)
            if bad:
                failed.append(item.target.spec)
        return failed

    def result(self, spec: str, variant: str = "as-is") -> TargetResult:
        for item in self.results:
            if item.target.spec == spec and item.variant == variant:
                return item
        raise KeyError(f"{spec} ({variant})")
