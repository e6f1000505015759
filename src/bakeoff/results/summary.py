"""One line of history: a stored run's counts, as the knowledge base lists them.

A value like the others in :mod:`bakeoff.results`: the store produces it and the report renders
it, and neither of those two imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass

from bakeoff.codec import Value

__all__ = ["RunSummary"]


@dataclass(frozen=True)
class RunSummary(Value):
    """One line of history."""

    run_id: str
    created_at: str
    workload_spec: str
    fingerprint: str
    environment_fingerprint: str
    targets: int
    ok: int
    passed: int
    failed: int
    errors: int
    skipped: int
