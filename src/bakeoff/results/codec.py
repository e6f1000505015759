"""The versioned JSON document for a run (``--format json``).

The document carries ``schema: "bakeoff.run"`` and ``schema_version``. Readers refuse a
version newer than they understand instead of misreading it. Keys are stable: later checks
add keys beside the existing ones.

The document is :meth:`RunResult.to_dict <bakeoff.results.values.RunResult.to_dict>`, like
every other value's; these are its names as functions, and the values module never imports
this one.
"""

from __future__ import annotations

from typing import Any

from bakeoff.results.values import SCHEMA, SCHEMA_VERSION, RunResult

__all__ = ["SCHEMA", "SCHEMA_VERSION", "run_from_json", "run_to_json"]


def run_to_json(run: RunResult) -> dict[str, Any]:
    return run.to_dict()


def run_from_json(data: dict[str, Any]) -> RunResult:
    return RunResult.from_dict(data)
