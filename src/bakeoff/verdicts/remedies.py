"""What moving to a target would take: the changes a team must make, derived from the evidence.

The adjustments ledger records what bakeoff changed to run a target; this list turns it
forward: for each target, what its evidence says must change before it can serve, each item
with its figure, and whether bakeoff already measured the remedy in this run (a padded-to-
buckets variant beside the as-is one, a target with another precision option). Items come in
order of effect: what makes the target wrong or leaves work off its device first, then the
requirements it misses (by how much), then what costs speed (recompilations, graph breaks).

What it cannot see: remedies nobody measured are suggestions from the evidence, not
measurements; an op that runs on the host is named by its ATen name, not by the line of model
code that called it; a requirement missed by a factor may need more than one item below.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bakeoff.checks.placement import REDUCED_PRECISIONS, UNMEASURED, Placement, top_counts
from bakeoff.codec import Value
from bakeoff.results.values import RunResult, TargetResult
from bakeoff.units import clip, figure, human_bytes
from bakeoff.verdicts.standing import lost_output

__all__ = ["Remedy", "remedies_for", "what_it_takes"]

#: The order of kinds, most effect first.
KINDS = ("wrong", "precision", "placement", "requirement", "recompiles", "graph breaks")


@dataclass(frozen=True)
class Remedy(Value):
    """One change a target needs: ``kind`` (see :data:`KINDS`), ``finding`` (what the evidence
    shows, with its figure), ``change`` (what to do) and ``measured`` (the remedy's effect as
    this run measured it; empty: not measured)."""

    kind: str
    finding: str
    change: str
    measured: str = ""


def _reduced_precision(p: Placement | None) -> tuple[str, str] | None:
    """``(engine, precision)`` when an engine ran all its work in a reduced precision (the
    case :func:`~bakeoff.checks.placement.engine_notes` states as "ENGINE ran in PRECISION")."""
    if p is None:
        return None
    work = p.engine_work or {}
    for engine, data in p.signals.items():
        precision = data.get("precision") if isinstance(data, dict) else None
        share = work.get("share") if work.get("engine") == engine else None
        if precision and str(precision).lower() in REDUCED_PRECISIONS and (share is None or share >= 1):
            return engine, str(precision)
    return None


def _variant(run: RunResult, result: TargetResult, **want: object) -> TargetResult | None:
    """Another measured result of the run on the same device and backend whose target has the
    attributes ``want`` gives."""
    for other in run.results:
        same = (other.target.device, other.target.backend) == (result.target.device, result.target.backend)
        if other is not result and other.status == "ok" and same:
            if all(getattr(other.target, k) == v for k, v in want.items()):
                return other
    return None


def _report_wrong(run: RunResult, r: TargetResult) -> str:
    """What to do about wrong outputs: report the origin localisation found, or find it first."""
    found = r.checks.get("localization")
    first = getattr(found, "first", None)
    if first is not None:
        op = f", first wrong op {first.op_suspect}" if first.op_suspect else ""
        confirmed = " (confirmed by replay)" if first.replay == "confirmed" else f" (replay: {first.replay})"
        return (
            f"report it to the backend: the divergence starts in {first.module} ({first.cls}){op}{confirmed}; "
            "a wrong result is not tunable"
        )
    if run.workload.get("kind") in ("script", "service"):  # localize replays a trial's workload only
        return "find where the target diverges and report it to the backend (a wrong result is not tunable)"
    return (
        f"find where the target diverges (`bakeoff localize {run.run_id}:{r.target.spec}`) and report it to the "
        "backend (a wrong result is not tunable)"
    )


_REFRESH = (
    "make the workload reproducible, or refresh its baseline (`--refresh-baseline`) if the model was meant to "
    "change; then judge the targets again"
)


def _stale_baseline(run: RunResult) -> str | None:
    """Why no target can be blamed where the eager CPU reference itself fails against the
    baseline (None where it does not): the baseline no longer describes the model."""
    ref = next((x for x in run.results if x.is_reference), None)
    if ref is None or ref.correctness is None or ref.correctness.verdict != "fail":
        return None
    return (
        f"as the reference's own do ({ref.target.spec}: {clip(ref.correctness.reason, 120)}): the baseline no longer "
        "describes this model (changed in code its fingerprint does not hash) or its eager CPU run is not reproducible"
    )


def _wrong(run: RunResult, r: TargetResult) -> list[Remedy]:
    out: list[Remedy] = []
    c = r.correctness
    if c is not None and c.verdict == "fail":
        reduced = _reduced_precision(r.placement)
        if reduced is not None and r.target.precision != "f32":
            fixed = _variant(run, r, precision="f32")
            measured = ""
            if fixed is not None and fixed.correctness is not None:
                measured = f"{fixed.target.spec}: correctness {fixed.correctness.verdict}"
            out.append(
                Remedy(
                    "precision",
                    f"{reduced[0]} ran in {reduced[1]}: {clip(c.reason, 160)}",
                    f"pass the engine's precision option ({r.target.spec.split('?')[0]}?precision=f32)",
                    measured,
                )
            )
        elif (stale := _stale_baseline(run)) is not None:
            out.append(Remedy("wrong", f"outputs differ from the baseline, {stale}", _REFRESH))
        else:
            out.append(
                Remedy("wrong", f"outputs differ from the reference: {clip(c.reason, 200)}", _report_wrong(run, r))
            )
    if c is not None and c.lost is not None and not c.overflowed:
        out.append(Remedy("wrong", lost_output(r), "keep the workload's own dtype, or rescale the layers that cancel"))
    if c is not None and c.overflowed:
        native = next((x for x in run.results if x.is_reference), None)
        measured = f"{native.target.spec}: correctness {native.verdict}" if native is not None else ""
        out.append(
            Remedy(
                "wrong",
                f"outputs overflow in {r.target.dtype}: not finite where {(c.drift or {}).get('reference')} is",
                "keep the workload's own dtype, or rescale the layers that overflow",
                measured,
            )
        )
    return out


def _placement(r: TargetResult) -> list[Remedy]:
    p = r.placement
    if p is None or p.verdict in ("on_device", "not_applicable", UNMEASURED):
        return []
    per = "in the script run" if (p.signals or {}).get("script") else "per forward pass"  # bakeoff exec's audit
    if r.scenario("service") is not None:
        per = "in the audited start of the service"
    out: list[Remedy] = []
    host_ops = {**p.host_ops, **p.fallback_ops}
    if host_ops:
        out.append(
            Remedy(
                "placement",
                f"{sum(host_ops.values())} op call(s) {per} ran on the host: " + top_counts(host_ops, 4, more=True),
                "the backend must support these ops on the device (or the model must avoid them)",
            )
        )
    for copy in p.host_state_copies:
        out.append(
            Remedy(
                "placement",
                f"{copy.get('module') or 'the model'} copies host state to the device {copy.get('count')} time(s) "
                f"{per} ({human_bytes(copy.get('bytes'))})",
                "keep that tensor as a registered buffer (register_buffer) so .to(device) moves it once",
            )
        )
    if p.stray_parameters:
        shown = ", ".join(p.stray_parameters[:4]) + (" ..." if len(p.stray_parameters) > 4 else "")
        out.append(
            Remedy(
                "placement",
                f"{len(p.stray_parameters)} parameter(s) or buffer(s) left on the host: {shown}",
                "move the whole model with .to(device) after it is built (or fix the device map)",
            )
        )
    if not out:
        out.append(Remedy("placement", f"work left the device: {clip(p.explanation, 200)}", "see the placement report"))
    return out


def _requirements(r: TargetResult) -> list[Remedy]:
    out: list[Remedy] = []
    for q in r.requirements:
        value, threshold = q.get("value"), q.get("threshold")
        numbers = isinstance(value, int | float) and isinstance(threshold, int | float)
        if q.get("verdict") != "not_met" or not numbers:
            continue
        unit = q.get("unit") or ""
        if value <= 0 or threshold <= 0 or not math.isfinite(value):
            factor = ""
        elif q.get("op") in ("<=", "<"):
            factor = f": {value / threshold:.2f}x too high"
        else:
            factor = f": {threshold / value:.2f}x too low"
        check = _check_of(q.get("metric"))
        if q.get("metric") == "quality":
            change = (
                "run the examples that dropped (the quality check names them) on both sides, try the workload's own "
                "dtype or another engine, or allow a larger drop"
            )
            factor = ""
        elif check:
            change = f"see the {check} check's findings below, or relax the requirement"
            factor = ""
        elif unit == "B":
            change = "cut peak memory (smaller batch, a lower dtype, freeing what the model keeps) or raise the limit"
        else:
            change = "make it faster (the items below, another compile mode or backend) or relax the requirement"
        out.append(Remedy("requirement", f"{q['text']}: measured {figure(value, unit)}{factor}", change))
    return out


def _check_of(metric: object) -> str:
    """The check that offers ``metric`` ("" for a scenario's figure, or a name no one offers)."""
    from bakeoff.errors import SpecError
    from bakeoff.metrics import find_metric

    try:
        return find_metric(str(metric)).check
    except SpecError:
        return ""


def _compilation(run: RunResult, r: TargetResult) -> list[Remedy]:
    c = r.compilation
    if c is None or r.variant != "as-is":
        return []
    out: list[Remedy] = []
    if c.recompiles or c.recompile_limit_hits:
        limit = f", the recompile limit hit {c.recompile_limit_hits} time(s) (those shapes ran eagerly)"
        finding = f"{c.recompiles} recompilation(s) over the request shapes" + (limit if c.recompile_limit_hits else "")
        padded = next((x for x in run.results if x.target == r.target and x.variant == "bucketed"), None)
        measured = ""
        buckets = run.settings.get("buckets") or {}
        if padded is not None and padded.status == "ok" and padded.compilation is not None:
            before = r.latency.p(90) if r.latency and r.latency.count else None
            after = padded.latency.p(90) if padded.latency and padded.latency.count else None
            change = f", p90 {figure(before, 'ms')} -> {figure(after, 'ms')}" if before and after else ""
            waste = (padded.profile or {}).get("padding_waste", buckets.get("waste"))
            measured = (
                f"padded to buckets {buckets.get('chosen')}: {padded.compilation.recompiles} recompilation(s){change}"
                + (f", padding waste {waste:.1%}" if isinstance(waste, int | float) else "")
                + f", correctness {padded.verdict}"
            )
        # a script's inputs are its own: bakeoff cannot pad them (exec has no --pad-to-buckets)
        kind = run.workload.get("kind")
        pad = (
            f"pad the {kind}'s inputs to a few fixed lengths"
            if kind in ("script", "service")
            else "pad requests to a few fixed lengths (--pad-to-buckets auto)"
        )
        out.append(Remedy("recompiles", finding, f"{pad}, or compile with dynamic shapes", measured))
    if c.graph_breaks:
        where = [f"{clip(b.get('reason', '?'), 80)} at {b.get('location') or '?'}" for b in c.graph_break_reasons[:3]]
        out.append(
            Remedy(
                "graph breaks",
                f"{c.graph_breaks} graph break(s): " + "; ".join(where),
                "rewrite those lines so dynamo can trace them (fullgraph=True points at each one)",
            )
        )
    return out


def remedies_for(run: RunResult, result: TargetResult) -> list[Remedy]:
    """What ``result``'s target would take, most effect first (none for the reference, a skipped
    target or a failed one: a failure's error says what happened)."""
    if result.is_reference or result.status != "ok":
        return []
    found = [*_wrong(run, result), *_placement(result), *_requirements(result), *_compilation(run, result)]
    return sorted(found, key=lambda item: KINDS.index(item.kind))


def what_it_takes(run: RunResult) -> dict[str, list[Remedy]]:
    """Every measured target's list, by its label (a padded variant's list is its as-is target's)."""
    return {
        result.target.spec: items
        for result in run.results
        if result.variant == "as-is" and (items := remedies_for(run, result))
    }
