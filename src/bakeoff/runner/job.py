"""One target of one trial, run to completion in the current process.

:func:`run_target` never raises for problems of the workload or the target: an exception
becomes a ``status="error"`` result with the phase it happened in and its traceback, so the
rest of a sweep goes on. It returns plain values, so a worker process can send it back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bakeoff.checks.registry import is_builtin, registered_checks
from bakeoff.entrypoints import PLUGIN_FAILURES, said_by
from bakeoff.measure.timing import TimingSettings
from bakeoff.results import strictjson
from bakeoff.target.spec import Target
from bakeoff.workload.profile import InputProfile

__all__ = ["REFERENCE", "TargetJob", "adjustments_for", "checked_value", "error_checks", "with_reference"]

#: The target every trial measures, added when a user did not list it: the eager CPU.
REFERENCE = Target("cpu")


@dataclass(frozen=True)
class TargetJob:
    """Everything a worker needs, as plain picklable values.

    ``profile`` runs the target over those request shapes instead of the workload's one input;
    ``buckets`` pads every request up to the smallest bucket that holds it (the static-shape
    what-if); ``cold_cache`` gives the compiler an empty cache directory; ``env`` sets
    environment switches (a backend's strict modes, say) while the target runs; ``checks``
    the options a user set for checks (the others run with their defaults).
    """

    workload_spec: str
    target: Target
    fingerprint: str
    baseline_path: str | None
    repeat_max_abs_err: float = 0.0
    timing: TimingSettings = field(default_factory=TimingSettings)
    is_reference: bool = False
    profile: InputProfile | None = None
    buckets: tuple[int, ...] | None = None
    cold_cache: bool = False
    env: tuple[tuple[str, str], ...] = ()
    scenarios: tuple[Any, ...] = ()  # ScenarioSpec values beyond single-stream
    checks: tuple[Any, ...] = ()  # CheckSpec values: the options a user set

    @property
    def variant(self) -> str:
        return "bucketed" if self.buckets else "as-is"


def adjustments_for(
    target: Target, buckets: tuple[int, ...] | None = None, env: tuple[tuple[str, str], ...] = ()
) -> tuple[dict[str, Any], ...]:
    """The ordered, named changes made to run ``target`` (the adjustments ledger)."""
    ledger: list[dict[str, Any]] = [{"name": "environment", "value": f"{k}={v}"} for k, v in env]
    for name, value in (
        ("dtype cast", target.dtype),
        ("compile dynamic", target.dynamic),
        ("compile mode", target.mode),
        ("inference precision", target.precision),
        ("intra-op threads", target.threads),
        ("autocast", target.amp),
    ):
        if value is not None:
            ledger.append({"name": name, "value": value})
    if target.fullgraph:
        ledger.append({"name": "compile fullgraph", "value": True})
    if buckets:
        ledger.append({"name": "pad to buckets", "value": list(buckets)})
    return tuple(ledger)


def error_checks(why: str, job: TargetJob) -> dict[str, Any]:
    """The check values a failed target records (a correctness ``error``, say); ``why`` says
    what happened. A check that runs only on request records one only when ``job`` asked for it:
    a failed target did not fail a check no one asked for."""
    asked = {spec.name for spec in job.checks}
    return {
        c.name: value
        for c in registered_checks()
        if (not getattr(c, "on_request", False) or c.name in asked) and (value := c.on_error(why)) is not None
    }


def with_reference(targets: Sequence[Target]) -> tuple[list[Target], Target]:
    """``targets`` with the reference first when they lack it, and the reference."""
    listed = list(targets)
    if REFERENCE not in listed:
        listed.insert(0, REFERENCE)
    return listed, REFERENCE


def checked_value(check: Any, produce: Callable[[], Any]) -> tuple[Any | None, str | None]:
    """``(value, None)``: what ``produce()`` gave for ``check``, read back through its codec as
    the knowledge base will read it (None: nothing to say). bakeoff's own checks raise into the
    caller; a plugin check that raises, exits, or returns something other than its value type
    gives ``(None, line)``, the line saying how it failed, for the target's notes."""
    try:
        value = produce()
        if value is None:
            return None, None
        if not isinstance(value, check.value_type):
            raise TypeError(f"returned {type(value).__name__}, not its value type {check.value_type.__name__}")
        return check.decode(strictjson.loads(strictjson.dumps(check.encode(value)))), None
    except PLUGIN_FAILURES as exc:  # sys.exit in a plugin is its failure, never the target's
        if is_builtin(check):
            raise
        return None, f"the {check.name} check {said_by(exc)}"
