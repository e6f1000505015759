"""The values a trial produces. Frozen, serialisable, and free of presentation.

Every value round-trips through ``to_dict``/``from_dict``; :mod:`bakeoff.results.codec`
wraps a whole run in the versioned JSON document.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from bakeoff.env import Environment
from bakeoff.errors import BakeoffError
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


def known_fields(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` without the keys ``cls`` does not have: a document written by a newer bakeoff
    may carry fields added since, which this reader keeps reading around (adding a field is a
    compatible change; changing a meaning bumps the document's version)."""
    known = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in known}


STATUSES = ("ok", "error", "skipped")


@dataclass(frozen=True)
class Latency:
    """Raw per-call latencies in milliseconds; statistics are derived, never stored."""

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
    def noisy(self) -> bool:
        return is_noisy(self.samples_ms)

    def to_dict(self) -> dict[str, Any]:
        return {
            "p50_ms": self.p(50),
            "p90_ms": self.p(90),
            "p99_ms": self.p(99),
            "mean_ms": mean(self.samples_ms),
            "min_ms": min(self.samples_ms),
            "samples": self.count,
            "noisy": self.noisy,
            "samples_ms": list(self.samples_ms),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Latency:
        return cls(tuple(float(x) for x in data["samples_ms"]))


@dataclass(frozen=True)
class TensorComparison:
    """One output tensor against its reference.

    ``max_rel_err`` is the largest absolute error divided by the largest reference magnitude
    (a scale-aware figure that does not explode where the reference is near zero). ``rule``
    says which test passed: ``golden`` (error and bias against the float64 golden within a
    multiple of the eager same-dtype run's own; see :mod:`bakeoff.analysis.tolerance`),
    ``allclose`` (within the dtype's tolerance of the same-dtype eager reference: the fallback
    without a golden), ``exact`` (integers), or ``fp64`` in documents stored before the golden
    rule; empty when it failed.

    The golden rule's figures, all relative to rms(golden) and None without a golden:
    ``golden_err`` the target's RMS error, ``floor`` the eager reference's (the dtype's noise
    floor on this workload), ``bias`` the target's relative bias, and ``sensitivity`` the
    smallest uniform relative bias of this output the rule flags.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    max_abs_err: float
    max_rel_err: float
    cosine: float
    passed: bool
    rule: str = ""
    problem: str = ""
    golden_err: float | None = None
    floor: float | None = None
    bias: float | None = None
    sensitivity: float | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["shape"] = list(self.shape)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TensorComparison:
        known = {f.name for f in fields(cls)}  # keep reading documents with fields added later
        return cls(**{**{k: v for k, v in data.items() if k in known}, "shape": tuple(data["shape"])})


@dataclass(frozen=True)
class Correctness:
    """The verdict for a target's outputs against the baseline.

    A target in another dtype is judged against the eager CPU run *in its dtype*; ``drift``
    then adds, for information, how far its outputs are from the workload's own dtype
    (``{"reference": "eager:float32", "max_abs_err": ...}``): what the dtype change costs.

    ``sensitivity`` (derived from the outputs, stored with them) is the largest of the outputs'
    sensitivities: the smallest uniform relative bias of every output that this check flags,
    i.e. what a ``pass`` rules out. None when no output was judged against a float64 golden
    (the allclose fallback has no such figure).
    """

    verdict: str
    reason: str = ""
    reference: str = ""
    tolerance: float | None = None
    outputs: tuple[TensorComparison, ...] = ()
    drift: dict[str, Any] | None = None

    @property
    def max_abs_err(self) -> float | None:
        return max((o.max_abs_err for o in self.outputs), default=None)

    @property
    def max_rel_err(self) -> float | None:
        return max((o.max_rel_err for o in self.outputs), default=None)

    @property
    def min_cosine(self) -> float | None:
        return min((o.cosine for o in self.outputs), default=None)

    @property
    def sensitivity(self) -> float | None:
        return max((o.sensitivity for o in self.outputs if o.sensitivity is not None), default=None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "reason": self.reason,
            "reference": self.reference,
            "tolerance": self.tolerance,
            "max_abs_err": self.max_abs_err,
            "max_rel_err": self.max_rel_err,
            "min_cosine": self.min_cosine,
            "sensitivity": self.sensitivity,
            "outputs": [o.to_dict() for o in self.outputs],
            "drift": self.drift,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Correctness:
        return cls(
            verdict=data["verdict"],
            reason=data.get("reason", ""),
            reference=data.get("reference", ""),
            tolerance=data.get("tolerance"),
            outputs=tuple(TensorComparison.from_dict(o) for o in data.get("outputs", ())),
            drift=data.get("drift"),
        )


@dataclass(frozen=True)
class Placement:
    """Where a target's work ran (see :mod:`bakeoff.checks.placement` for the verdicts).

    ``device_op_share`` is the share of recorded op calls whose outputs were on the target
    device; ``device_flop_share`` the same weighted by estimated FLOPs (matmuls, convolutions,
    attention), None where no op had a FLOP estimate. ``transfers`` has ``count`` and ``bytes``
    per direction (``host_to_device``, ``device_to_host``); ``transfer_sites`` says in which
    module each kind of copy happened. ``scope`` says what the dispatch-level audit saw.
    ``ops_on_device`` counts op calls that ran on the device, after taking out what the
    backend's own fallback ran on the host (``ops_total`` on a CPU target, where the host is
    the device). ``host_state_copies`` lists, per module, host-to-device copies per forward
    pass of data that was not an input (host state left behind); ``engine_work`` is what an
    engine reports of the op calls handed to it and how many it ran itself (``share``).
    """

    verdict: str
    explanation: str
    scope: str = ""
    ops_total: int = 0
    ops_on_device: int = 0
    device_op_share: float | None = None
    device_flop_share: float | None = None
    host_ops: dict[str, int] = field(default_factory=dict)
    fallback_ops: dict[str, int] = field(default_factory=dict)
    transfers: dict[str, dict[str, int]] = field(default_factory=dict)
    transfer_sites: tuple[dict[str, Any], ...] = ()
    host_syncs: dict[str, int] = field(default_factory=dict)
    stray_parameters: tuple[str, ...] = ()
    device_map: dict[str, Any] | None = None
    signals: dict[str, Any] = field(default_factory=dict)
    host_state_copies: tuple[dict[str, Any], ...] = ()
    engine_work: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["transfer_sites"] = list(self.transfer_sites)
        data["stray_parameters"] = list(self.stray_parameters)
        data["host_state_copies"] = list(self.host_state_copies)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Placement:
        known = {f.name for f in fields(cls)}
        return cls(
            **{
                **{k: v for k, v in data.items() if k in known},  # a newer document's extra keys are left out
                "transfer_sites": tuple(data.get("transfer_sites", ())),
                "stray_parameters": tuple(data.get("stray_parameters", ())),
                "host_state_copies": tuple(data.get("host_state_copies", ())),
            }
        )


@dataclass(frozen=True)
class Compilation:
    """What a compiled target did over the input profile (see :mod:`bakeoff.target.dynamo`).

    ``graphs`` counts the graphs dynamo produced; ``recompiles`` the recompilations, with the
    guard failures that caused them in ``recompile_reasons``; ``graph_breaks`` the breaks, with
    reason and user-code location in ``graph_break_reasons``; ``recompile_limit_hits`` the
    times dynamo gave up and ran a frame eagerly; ``compilations`` one entry per compilation
    (seconds, backend seconds, cache hit/miss, the shape that triggered it); ``steady`` whether
    a pass over every profile shape under ``fail_on_recompile`` succeeded after warm-up, and
    ``still_recompiling`` the shapes that did not; ``per_shape`` the first-call and steady-state
    latency of each shape.
    """

    graphs: int = 0
    recompiles: int = 0
    recompile_reasons: tuple[str, ...] = ()
    graph_breaks: int = 0
    graph_break_reasons: tuple[dict[str, Any], ...] = ()
    eager_frames: int = 0
    recompile_limit_hits: int = 0
    compile_seconds_total: float = 0.0
    compilations: tuple[dict[str, Any], ...] = ()
    cache: str = ""
    steady: bool | None = None
    still_recompiling: tuple[str, ...] = ()
    per_shape: tuple[dict[str, Any], ...] = ()
    signals: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("recompile_reasons", "graph_break_reasons", "compilations", "still_recompiling", "per_shape"):
            data[key] = list(getattr(self, key))
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Compilation:
        values = known_fields(cls, data)
        for key in ("recompile_reasons", "graph_break_reasons", "compilations", "still_recompiling", "per_shape"):
            values[key] = tuple(values.get(key, ()))
        return cls(**values)


@dataclass(frozen=True)
class ScenarioResult:
    """One scenario on one target (see :mod:`bakeoff.runner.scenarios`).

    ``series`` keeps the raw samples in milliseconds by name (``latency``, ``wait``, ``ttft``,
    ``tpot``, ``step``, ``batch=8``...); ``facts`` the measured scalars and settings that came
    with them (batch sizes tried, achieved rate, queue depths). ``status`` is ok, error or
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

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["series"] = {k: list(v) for k, v in self.series.items()}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScenarioResult:
        return cls(**{**known_fields(cls, data), "series": {k: tuple(v) for k, v in data.get("series", {}).items()}})


@dataclass(frozen=True)
class ErrorInfo:
    """A failure kept as data. ``category``: exception, crash, timeout or out_of_memory."""

    type: str
    message: str
    category: str = "exception"
    phase: str = ""
    traceback: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ErrorInfo:
        return cls(**known_fields(cls, data))


@dataclass(frozen=True)
class TargetResult:
    """Everything a trial learned about one target."""

    target: Target
    status: str
    reason: str = ""
    is_reference: bool = False
    correctness: Correctness | None = None
    placement: Placement | None = None
    compilation: Compilation | None = None
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
        return "error" if self.status == "error" else None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "target":
                value = value.spec
            elif hasattr(value, "to_dict"):
                value = value.to_dict()
            elif f.name == "scenarios":
                value = [s.to_dict() for s in value]
            elif isinstance(value, tuple):
                value = list(value)
            data[f.name] = value
        data["target_detail"] = self.target.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TargetResult:
        kwargs = known_fields(cls, data)
        kwargs["target"] = Target.from_dict(data["target_detail"])
        for key, kind in (
            ("compilation", Compilation),
            ("correctness", Correctness),
            ("placement", Placement),
            ("latency", Latency),
            ("error", ErrorInfo),
        ):
            if kwargs.get(key) is not None:
                kwargs[key] = kind.from_dict(kwargs[key])
        for key in ("notes", "load_average", "adjustments", "requirements", "noise"):
            if kwargs.get(key) is not None:
                kwargs[key] = tuple(kwargs[key])
        kwargs["scenarios"] = tuple(ScenarioResult.from_dict(s) for s in kwargs.get("scenarios", ()))
        return cls(**kwargs)


@dataclass(frozen=True)
class BaselineInfo:
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

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["references"] = list(self.references)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BaselineInfo:
        return cls(**{**known_fields(cls, data), "references": tuple(data["references"])})


@dataclass(frozen=True)
class RunResult:
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
        requirement not met or not measured."""
        failed = []
        for item in self.results:
            bad = item.status == "error" or item.verdict in ("fail", "error")
            if placement and item.placement is not None:
                bad = bad or item.placement.verdict not in ("on_device", "not_applicable")
            if requirements and item.status == "ok":
                bad = bad or any(r["verdict"] != "met" for r in item.requirements)
            if bad:
                failed.append(item.target.spec)
        return failed

    def result(self, spec: str, variant: str = "as-is") -> TargetResult:
        for item in self.results:
            if item.target.spec == spec and item.variant == variant:
                return item
        raise KeyError(f"{spec} ({variant})")
