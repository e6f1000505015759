"""What runs: Hugging Face architectures and model directories, and users' own model factories."""

from __future__ import annotations

from bakeoff.workload.base import BuiltWorkload, WorkloadSpec, parse_workload
from bakeoff.workload.registry import build_workload, list_architectures

__all__ = ["BuiltWorkload", "WorkloadSpec", "build_workload", "list_architectures", "parse_workload"]
