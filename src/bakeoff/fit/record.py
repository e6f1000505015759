"""``bakeoff fit``'s answer as a stored run: the workload ``fit``-kind (its spec as given), one
target whose ``fit`` scenario holds the whole map (:mod:`bakeoff.scenarios.fit`), and whose
requirements are the ``fits batch=B&seq=S`` verdicts in the words every report reads."""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import replace
from typing import Any

from bakeoff.analysis.requirements import Requirement, RequirementCheck
from bakeoff.env import capture_environment
from bakeoff.results.values import RunResult, TargetResult
from bakeoff.scenarios.base import ScenarioResult
from bakeoff.scenarios.fit import FitRequirement, FitResult, requirement_words
from bakeoff.store.schema import utc_now
from bakeoff.target.spec import Target

__all__ = ["fit_run", "fit_workload_record"]


def fit_workload_record(workload_spec: str, kind: str, settings: dict[str, Any]) -> dict[str, Any]:
    """The workload a fit run is stored as: its spec as given, kind ``fit``. Its fingerprint is
    of the spec and of what was asked (grid, training, optimiser, the capacity given, probes or
    not), not of the weights (the map is predicted under fake tensors: no weight is ever made),
    so only two maps of one question compare."""
    asked = {key: settings[key] for key in ("grid", "training", "optimizer", "memory", "probes")}
    digest = hashlib.sha256(json.dumps([workload_spec, asked], sort_keys=True).encode()).hexdigest()[:16]
    details = {"workload_kind": kind, **asked, "fingerprint_of": "the workload spec and the question, not the weights"}
    return {"spec": workload_spec, "kind": "fit", "fingerprint": digest, "seed": 0, "dtype": "as built",
            "details": details}  # fmt: skip


def _requirement(req: FitRequirement, capacity: int) -> dict[str, Any]:
    """A ``fits`` verdict as a stored requirement: the point's measured peak against the capacity
    (a peak that was only predicted, or a point that failed, has no measured value: the reason
    says what is known)."""
    rule = Requirement(req.text, "fits", "<=", float(capacity), "B", "fit")
    verdict = {"met": "met", "not met": "not_met"}.get(req.verdict, "not_measured")
    value = float(req.peak) if req.measured else None
    reason = requirement_words(req, capacity)
    return RequirementCheck(rule, verdict, value, samples=1 if req.measured else 0, confident=verdict != "not_measured",
                            reason=reason).to_dict()  # fmt: skip


def fit_run(result: FitResult, target: Target, settings: dict[str, Any], kind: str) -> RunResult:
    """``result`` as a run to store (``settings``: the checked fit settings, kept under ``fit``
    so that ``rerun`` repeats the same question)."""
    run_id = uuid.uuid4().hex[:12]
    scenario = ScenarioResult(
        "fit",
        "ok",
        options={key: settings[key] for key in ("grid", "training", "optimizer")},
        facts=replace(result, run_id=run_id).to_dict(),
        run_seconds=result.predict_s,
    )
    notes = [f"{r.text} {r.verdict}: {requirement_words(r, result.capacity)}" for r in result.requirements
             if r.verdict != "met"]  # fmt: skip
    outcome = TargetResult(
        target=target,
        status="ok",
        scenarios=(scenario,),
        requirements=tuple(_requirement(r, result.capacity) for r in result.requirements),
        notes=(*result.notes, *notes),
        device_peak_bytes=max((p.measured for p in result.points if p.measured is not None), default=None),
    )
    stored = {**settings, "requirements": list(settings.get("requirements", ())), "on": target.spec}
    return RunResult(
        run_id=run_id,
        created_at=utc_now(),
        workload=fit_workload_record(result.workload, kind, settings),
        environment=capture_environment(),
        results=(outcome,),
        settings={"fit": stored},
    )
