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
from bakeoff.scenarios.fit import FitRequirement, FitResult
from bakeoff.store.schema import utc_now
from bakeoff.target.spec import Target
from bakeoff.units import human_bytes

__all__ = ["fit_run", "fit_workload_record"]


def fit_workload_record(workload_spec: str, kind: str, settings: dict[str, Any]) -> dict[str, Any]:
    """The workload a fit run is stored as: its spec as given, kind ``fit``. Its fingerprint is
    of the spec and of what was asked (grid, training, optimiser), not of the weights (the map
    is predicted under fake tensors: no weight is ever made), so two maps of one question compare."""
    asked = {key: settings[key] for key in ("grid", "training", "optimizer")}
    digest = hashlib.sha256(json.dumps([workload_spec, asked], sort_keys=True).encode()).hexdigest()[:16]
    details = {"workload_kind": kind, **asked, "fingerprint_of": "the workload spec and the question, not the weights"}
    return {"spec": workload_spec, "kind": "fit", "fingerprint": digest, "seed": 0, "dtype": "as built",
            "details": details}  # fmt: skip


def _requirement(req: FitRequirement, capacity: int) -> dict[str, Any]:
    """A ``fits`` verdict as a stored requirement: the point's peak against the capacity."""
    rule = Requirement(req.text, "fits", "<=", float(capacity), "B", "fit")
    how = "measured on the target" if req.measured else "predicted and calibrated, not run on the target"
    reason = f"peak {human_bytes(req.peak)} {how}, capacity {human_bytes(capacity)}"
    verdict = "not_met" if req.verdict == "not met" else "met"
    confident = req.verdict != "not conclusive"  # predicted to fit: the estimate says met, nothing measured it
    return RequirementCheck(rule, verdict, float(req.peak), samples=1, confident=confident, reason=reason).to_dict()


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
    refused = [p for p in result.requirements if p.verdict != "met"]
    notes = [f"{r.text} not met: peak {human_bytes(r.peak)} over {human_bytes(result.capacity)}" for r in refused]
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
