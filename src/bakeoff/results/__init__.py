"""Frozen result values and their JSON codec."""

from __future__ import annotations

from bakeoff.results.values import (
    BaselineInfo,
    Correctness,
    ErrorInfo,
    Latency,
    RunResult,
    TargetResult,
    TensorComparison,
)

__all__ = [
    "BaselineInfo",
    "Correctness",
    "ErrorInfo",
    "Latency",
    "RunResult",
    "TargetResult",
    "TensorComparison",
]
