"""Runs to store in the knowledge-base tests: real ones recorded by bakeoff, varied by id and environment."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bakeoff.env import Environment
from bakeoff.results.values import BaselineInfo, RunResult

FIXTURES = Path(__file__).parents[1] / "fixtures"
V1_DB = FIXTURES / "kb_v1.db"
V1_CONTENT: dict[str, Any] = json.loads((FIXTURES / "kb_v1.json").read_text())


def recorded_run(index: int = 0) -> RunResult:
    """One of the two real runs kept in the version-1 fixture (a 2-layer llama on cpu targets)."""
    return RunResult.from_dict(V1_CONTENT["runs"][index])


def recorded_baseline() -> BaselineInfo:
    return BaselineInfo.from_dict(V1_CONTENT["baseline"])


def environment(n: int) -> Environment:
    """The recorded run's environment with a different torch build: fingerprint ``n``."""
    data = dict(recorded_run().environment.data)
    data["torch"] = f"2.13.0+test{n}"
    return Environment(data)


def variant(run_id: str, *, env: Environment | None = None, created_at: str | None = None, **changes: Any) -> RunResult:
    """The first recorded run under another id (and environment, time or fields), without its baseline."""
    data = recorded_run().to_dict()
    data["run_id"] = run_id
    data["baseline_id"] = None
    if env is not None:
        data["environment"] = env.to_dict()
    if created_at is not None:
        data["created_at"] = created_at
    data.update(changes)
    return RunResult.from_dict(data)
