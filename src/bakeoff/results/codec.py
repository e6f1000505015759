"""The versioned JSON document for a run (``--format json``).

The document carries ``schema: "bakeoff.run"`` and ``schema_version``. Readers refuse a
version newer than they understand instead of misreading it. Keys are stable: later checks
add keys beside the existing ones.
"""

from __future__ import annotations

from typing import Any

from bakeoff.env import Environment
from bakeoff.errors import BakeoffError
from bakeoff.results.values import RunResult, TargetResult

__all__ = ["SCHEMA", "SCHEMA_VERSION", "run_from_json", "run_to_json"]

SCHEMA = "bakeoff.run"
SCHEMA_VERSION = 1


def run_to_json(run: RunResult) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "run_id": run.run_id,
        "created_at": run.created_at,
        "workload": run.workload,
        "environment": run.environment.to_dict(),
        "baseline_id": run.baseline_id,
        "settings": run.settings,
        "results": [r.to_dict() for r in run.results],
    }


def run_from_json(data: dict[str, Any]) -> RunResult:
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
    return RunResult(
        run_id=data["run_id"],
        created_at=data["created_at"],
        workload=data["workload"],
        environment=Environment.from_dict(data["environment"]),
        results=tuple(TargetResult.from_dict(r) for r in data["results"]),
        baseline_id=data.get("baseline_id"),
        settings=data.get("settings", {}),
    )
