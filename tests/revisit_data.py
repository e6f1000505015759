"""Synthetic runs for the revisiting and report tests: built from values, stored through the Store."""

from __future__ import annotations

import random
from typing import Any

from bakeoff.checks.registry import registered_checks
from bakeoff.env import Environment
from bakeoff.results.values import (
    Compilation,
    Correctness,
    ErrorInfo,
    Latency,
    Placement,
    RunResult,
    TargetResult,
)
from bakeoff.target.spec import parse_target

REQUIREMENTS = (
    {
        "text": "p90<=50ms",
        "metric": "p90",
        "op": "<=",
        "threshold": 50.0,
        "unit": "ms",
        "value": 1.1,
        "low": 1.0,
        "high": 1.2,
        "verdict": "met",
        "confident": True,
    },
    {
        "text": "throughput>=2000/s",
        "metric": "throughput",
        "op": ">=",
        "threshold": 2000.0,
        "unit": "/s",
        "value": 900.0,
        "low": 850.0,
        "high": 950.0,
        "verdict": "not_met",
        "confident": True,
    },
)
XSS = '<script>document.title="pwned"</script><img src=x onerror="document.title=\'pwned\'">'


def environment(
    torch: str = "2.13.0", packages: dict[str, str] | None = None, cores: int | None = None, **env_vars: str
) -> Environment:
    """A captured environment; ``packages`` beside torch and numpy, ``cores`` the machine's CPU count
    (left out by default, so fingerprints in golden files stay as they are)."""
    machine = {} if cores is None else {"cpu_count": cores}
    return Environment(
        {
            "python": "3.11.7",
            "torch": torch,
            "cpu": "Test CPU",
            **machine,
            "os": "Linux 6.1",
            "packages": {"torch": torch, "numpy": "2.1.0", **(packages or {})},
            "env": dict(env_vars),
            "threads": {"intra_op": 1, "inter_op": 1},
            "captured_at": "2025-01-01T00:00:00+00:00",
        }
    )


def samples(median: float, n: int = 40, seed: int = 0, spread: float = 0.03) -> tuple[float, ...]:
    rng = random.Random(seed)
    return tuple(median * (1 + rng.uniform(-spread, spread)) for _ in range(n))


def target_result(
    spec: str,
    median: float = 1.0,
    *,
    seed: int = 0,
    reference: float = 2.0,
    n: int = 40,
    **extra: Any,
) -> TargetResult:
    """An ok result with latency samples, a passing verdict, a placement audit and compile counts."""
    from bakeoff.analysis.compare import ratio_of_medians

    lat = Latency(samples(median, n=n, seed=seed))
    speed = ratio_of_medians(samples(reference, n=n, seed=seed + 1000), lat.samples_ms, resamples=200)
    target = parse_target(spec)
    values: dict[str, Any] = {
        "status": "ok",
        "is_reference": spec == "cpu",
        "correctness": Correctness("pass", "", "eager:float32", 1e-4),
        "placement": Placement(
            "not_applicable" if spec.startswith("cpu") else "fallbacks",
            "" if spec.startswith("cpu") else "2 ops ran in the host fallback",
            ops_total=100,
            ops_on_device=100 if spec.startswith("cpu") else 90,
            device_op_share=1.0 if spec.startswith("cpu") else 0.9,
            fallback_ops={} if spec.startswith("cpu") else {"aten::nonzero": 2},
            host_ops={} if spec.startswith("cpu") else {"aten::nonzero": 2, "aten::index": 8},
        ),
        "compilation": Compilation(
            graphs=2,
            recompiles=1,
            recompile_reasons=("size mismatch at index 1. expected 16, actual 32",),
            per_shape=(
                {"shape": "1x16", "requests": 3, "padded_to": 16, "first_call_ms": 900.0, "steady_p50_ms": median},
                {"shape": "1x32", "requests": 2, "padded_to": 32, "first_call_ms": 700.0, "steady_p50_ms": median},
            ),
        )
        if target.is_compiled
        else None,
        "latency": lat,
        "first_call_ms": 900.0 if target.is_compiled else median * 3,
        "speedup": 1.0 if spec == "cpu" else speed.value,
        "speedup_ci": None if spec == "cpu" else speed.to_dict(),
    }
    values.update(extra)
    checks = {c.name: values.pop(c.name) for c in registered_checks() if c.name in values}
    return TargetResult(target=target, checks={k: v for k, v in checks.items() if v is not None}, **values)


def failed_result(spec: str, message: str = "backend crashed") -> TargetResult:
    return TargetResult(
        target=parse_target(spec),
        status="error",
        error=ErrorInfo("RuntimeError", message, category="crash", phase="compile", traceback="Traceback ..."),
    )


def make_run(
    run_id: str,
    created_at: str,
    env: Environment,
    results: tuple[TargetResult, ...],
    spec: str = "arch:llama",
    fingerprint: str = "f" * 16,
    settings: dict[str, Any] | None = None,
) -> RunResult:
    workload = {
        "spec": spec,
        "kind": spec.split(":")[0],
        "fingerprint": fingerprint,
        "seed": 0,
        "dtype": "float32",
        "details": {},
        "notes": [],
    }
    return RunResult(
        run_id=run_id,
        created_at=created_at,
        workload=workload,
        environment=env,
        results=results,
        settings=settings or {"reference": "cpu"},
    )


def update_series(store: Any, spec: str = "arch:llama") -> list[RunResult]:
    """Two runs before a torch update, one after: cpu+inductor 40% slower, cpu unchanged."""
    old, new = environment("2.13.0"), environment("2.14.0")
    runs = [
        make_run(
            "aaaa00000001",
            "2025-01-01T10:00:00+00:00",
            old,
            (target_result("cpu", 2.0, seed=1), target_result("cpu+inductor", 1.0, seed=2)),
            spec=spec,
        ),
        make_run(
            "aaaa00000002",
            "2025-01-02T10:00:00+00:00",
            old,
            (target_result("cpu", 2.0, seed=3), target_result("cpu+inductor", 1.0, seed=4)),
            spec=spec,
        ),
        make_run(
            "bbbb00000003",
            "2025-01-03T10:00:00+00:00",
            new,
            (target_result("cpu", 2.0, seed=5), target_result("cpu+inductor", 1.4, seed=6)),
            spec=spec,
        ),
    ]
    for run in runs:
        store.save_run(run)
    return runs
