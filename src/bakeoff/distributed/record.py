"""``bakeoff dist``'s answer as a stored run: the workload ``dist``-kind (``dist:collectives``),
one target whose ``dist`` scenario holds the whole answer (:mod:`bakeoff.scenarios.dist`), and
one requirement per world size (``collectives at N ranks``: met when every collective gave its
analytic value there, not met when one did not, hung or failed) in the words every report reads."""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import replace
from typing import Any

from bakeoff.env import capture_environment
from bakeoff.results.values import ErrorInfo, RunResult, TargetResult
from bakeoff.scenarios.base import ScenarioResult
from bakeoff.scenarios.dist import DistResult, world_requirements, world_verdict, world_words
from bakeoff.store.schema import utc_now
from bakeoff.target.spec import Target

__all__ = ["ASKED", "dist_run", "dist_workload_record"]

#: The settings that make the question, by mode: two runs compare only when they asked the same.
ASKED = {"collectives": ("ranks", "sizes", "dtypes", "iterations"), "training": ("ranks", "modes", "steps", "lr")}


def dist_workload_record(result: DistResult, settings: dict[str, Any]) -> dict[str, Any]:
    """The workload a dist run is stored as: ``dist:<workload>``, fingerprinted by the question."""
    keys = ASKED["collectives" if result.mode == "collectives" else "training"]
    asked = {key: list(settings[key]) if isinstance(settings[key], tuple) else settings[key] for key in keys}
    asked["check"] = result.mode
    spec = f"dist:{result.workload}"
    digest = hashlib.sha256(json.dumps([spec, asked], sort_keys=True).encode()).hexdigest()[:16]
    details = {**asked, "fingerprint_of": "the question asked (the check, world sizes, sizes, dtypes)"}
    return {"spec": spec, "kind": "dist", "fingerprint": digest, "seed": 0, "dtype": "as asked", "details": details}


def _error(result: DistResult) -> ErrorInfo | None:
    stopped = next((w for w in result.worlds if w.verdict in ("hang", "error")), None)
    if stopped is None:
        return None
    hung = stopped.verdict == "hang"  # a hang is a timeout, as every launcher files one
    return ErrorInfo("Hang" if hung else "RankFailure", world_words(stopped)[:300], "timeout" if hung else "exception",
                     f"{stopped.world} ranks")  # fmt: skip


def dist_run(result: DistResult, target: Target, settings: dict[str, Any]) -> RunResult:
    """``result`` as a run to store (``settings``: the checked settings, kept under ``dist`` so
    that ``rerun`` asks the same question)."""
    run_id = uuid.uuid4().hex[:12]
    result = replace(result, worlds=tuple(world_verdict(w) for w in result.worlds))  # verdicts from the figures
    options = {key: list(value) if isinstance(value, tuple) else value for key, value in settings.items()}
    scenario = ScenarioResult("dist", "ok", options=options, facts=replace(result, run_id=run_id).to_dict(),
                              run_seconds=sum(w.seconds for w in result.worlds))  # fmt: skip
    error = _error(result)
    outcome = TargetResult(
        target=target,
        status="ok" if error is None else "error",
        reason=error.message if error is not None else "",
        error=error,
        scenarios=(scenario,),
        requirements=world_requirements(result),
        notes=result.notes,
        duration_s=round(sum(w.seconds for w in result.worlds), 2),
    )
    return RunResult(
        run_id=run_id,
        created_at=utc_now(),
        workload=dist_workload_record(result, settings),
        environment=capture_environment(),
        results=(outcome,),
        settings={"dist": {**options, "on": target.spec}},
    )
