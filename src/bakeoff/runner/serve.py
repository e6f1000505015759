"""``bakeoff serve``: the team's own service on each target, under the same traffic, stored as a run.

:func:`serve_service` reads everything the run needs before any service starts (the traffic
file, the arrival schedule, the objectives, a comparison function), draws one schedule, and
measures the reference first, then each target, one at a time on this machine
(:func:`bakeoff.serve.measure.measure_service`: started with its device remapped, warmed up,
sent the same requests at the same planned times, stopped). Each target's result holds:

* ``latency``: its answered requests' latencies from their *scheduled* send (ms);
* the ``service`` scenario (:mod:`bakeoff.scenarios.service`): the series, the lifecycle, the
  judgement of the objectives and the response comparison, as stored facts;
* ``requirements``: each objective's verdict as a requirement's (met or not met only when the
  whole interval is on one side; too few samples; not measured when the run was invalid);
* ``correctness`` (targets only): its responses against the reference service's, request by
  request (:mod:`bakeoff.serve.responses`);
* ``placement`` (and ``compilation`` when the service called ``torch.compile``), non-CPU
  targets, unless ``--no-audit``: where its process's work ran, audited on a start of its own
  over the warm-up requests (:mod:`bakeoff.serve.audit`; the measured start runs unaudited);
* ``status`` error, with the fault, for a service that never became healthy, died or hung;
  processes it left running are a note;
* with ``--cold`` (10 s by default): the fresh replica's first seconds of traffic, sent before its
  warm-up: the share of requests within every objective there against the warm run's, its first
  request's latency, as a note and the scenario's ``cold``;
* with ``--search`` (or ``--peak``): the highest rate within the objectives, searched on the
  measured start after its traffic (:mod:`bakeoff.serve.search`), as a note and the scenario's
  ``search``; with ``--peak``, the capacity plan (:mod:`bakeoff.analysis.capacity`, priced by
  ``--price``). The decision's cost per million requests is priced at the searched rate.

The run is a ``service:COMMAND`` workload, fingerprinted by the command and the traffic file.
"""

from __future__ import annotations

import hashlib
import math
import re
import shutil
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from bakeoff.analysis.capacity import capacity_plan
from bakeoff.analysis.cost import parse_prices, price_for
from bakeoff.analysis.requirements import Requirement, RequirementCheck
from bakeoff.analysis.tail import requests_to_claim
from bakeoff.analysis.tolerance import tolerance_for
from bakeoff.checks.comparison import Correctness
from bakeoff.checks.script_audit import host_placement
from bakeoff.env import capture_environment
from bakeoff.errors import SpecError
from bakeoff.launch.tempdirs import owned_tempdir
from bakeoff.results.values import ErrorInfo, Latency, RunResult, TargetResult
from bakeoff.scenarios.base import ScenarioResult
from bakeoff.serve.address import words
from bakeoff.serve.load import TIMED_OUT, LoadRun
from bakeoff.serve.measure import Measured, measure_service
from bakeoff.serve.objectives import (
    MIN_REQUESTS,
    ObjectiveVerdict,
    ServiceJudgement,
    attainment,
    judge_run,
    latency_series,
    parse_objectives,
)
from bakeoff.serve.responses import ResponseParity, answers_by_body, compare_by_body, compare_responses, load_compare
from bakeoff.serve.schedule import from_trace, parse_schedule
from bakeoff.serve.search import RateSearch, SearchPlan
from bakeoff.serve.traffic import Traffic, read_traffic
from bakeoff.settings.serve import ServeSettings, run_settings, traffic_path
from bakeoff.stats import percentile
from bakeoff.store.db import Store
from bakeoff.store.schema import utc_now
from bakeoff.target.detect import unavailable_reason
from bakeoff.target.spec import Target
from bakeoff.units import duration

Places = Callable[[int], int]

__all__ = ["serve_service", "service_workload"]


def service_workload(command: str, traffic: bytes, shown: str, dtype: str) -> dict[str, Any]:
    """The workload a service run is stored as: ``service:COMMAND``, fingerprinted by the command
    and the traffic file's content (``shown``: the file as the user named it)."""
    digest = hashlib.sha256(command.encode() + b"\0" + traffic).hexdigest()[:16]
    details = {"command": command, "traffic": shown, "traffic_sha256": hashlib.sha256(traffic).hexdigest()}
    return {"spec": f"service:{command}", "kind": "service", "fingerprint": digest, "seed": 0, "dtype": dtype,
            "details": details}  # fmt: skip


def _requirement(verdict: ObjectiveVerdict, judgement: ServiceJudgement) -> dict[str, Any]:
    """An objective's verdict as a stored requirement's, in the words every report reads
    (:func:`~bakeoff.analysis.requirements.requirement_state`)."""
    req = verdict.requirement
    common = {"value": verdict.value, "low": verdict.low, "high": verdict.high, "samples": judgement.answered,
              "reason": verdict.reason, "judged_at": judgement.offered_rate,
              "confidence": judgement.confidence}  # fmt: skip
    if verdict.verdict in ("met", "not_met"):
        return RequirementCheck(req, verdict.verdict, confident=True, **common).to_dict()
    if verdict.verdict == "inconclusive":
        side = "met" if verdict.value is not None and req.holds(verdict.value) else "not_met"
        return RequirementCheck(req, side, confident=False, **common).to_dict()
    if judgement.valid and verdict.value is not None:  # too few requests to claim its percentile
        side = "met" if req.holds(verdict.value) else "not_met"
        return RequirementCheck(req, side, enough=False, **common).to_dict()
    why = "; ".join(judgement.invalid_reasons) or verdict.reason
    return RequirementCheck(req, "not_measured", **{**common, "reason": f"the run was not judged: {why}"}).to_dict()


def _correctness(
    parity: ResponseParity, reference: str, dtype: str, elsewhere: Sequence[tuple[str, ResponseParity]] = ()
) -> Correctness:
    """The target's responses as its correctness: a request the reference answered and the
    target did not (an error status, a timeout, a refused connection) is a wrong answer too.
    ``elsewhere``: the answers of its other traffic (the cold replica's, each search step's),
    each labelled; a differing one fails the target as the measured traffic's would."""
    verdict = {"pass": "pass", "fail": "fail"}.get(parity.verdict, "not_comparable")
    reason = parity.reason
    if parity.not_compared_target:
        verdict = "fail"
        reason = f"{parity.not_compared_target} request(s) the reference answered failed on the target; {reason}"
    wrong = [(label, other) for label, other in elsewhere if other.differing]
    if wrong:
        verdict = "fail"
        reason = f"{reason}; " + "; ".join(f"in {label}, {other.reason}" for label, other in wrong)
    return Correctness(verdict, reason, f"the service on {reference}", tolerance_for(dtype))


def _result(
    target: Target,
    measured: Measured,
    reference: Measured | None,
    is_reference: bool,
    settings: ServeSettings,
    objectives: Sequence[Any],
    reference_spec: str,
    elsewhere: Sequence[tuple[str, ResponseParity]] = (),
) -> TargetResult:
    load, lifecycle = measured.load, measured.lifecycle
    judgement = None
    if load is not None and load.requests:
        judgement = judge_run(load, objectives, offered_rate=settings.rate, min_duration_s=settings.min_duration_s)
    parity = None
    if reference is not None and reference.load is not None and load is not None:
        parity = compare_responses(reference.load, load, dtype=settings.dtype, compare=settings.compare or None)
    fatal = next((f for f in lifecycle.faults if f.category != "leftover"), None)
    if fatal is None and load is not None and load.requests and not load.latencies():
        errors = ", ".join(f"{kind} {n}" for kind, n in sorted(load.errors().items()))
        message = f"none of the {len(load.requests)} requests was answered ({errors})"
        fatal = ErrorInfo("NoAnswer", message, "exception", "serve")
    notes = [f.message for f in lifecycle.faults if f.category == "leftover"]
    cold = None
    if measured.cold is not None:
        cold, said = _cold(measured.cold, objectives, judgement, settings.cold_s)
        notes.append(said)
    capacity = None
    if measured.search is not None:
        said, capacity = _searched(target, measured.search, settings)
        notes += said
    audited = measured.audit or {}
    if measured.audit_note:
        notes.append(measured.audit_note)
    if audited.get("error"):
        notes.append(f"placement audit: {audited['error']}")
    checks: dict[str, Any] = {}
    if parity is not None:
        checks["correctness"] = _correctness(parity, reference_spec, settings.dtype, elsewhere)
    for name in ("placement", "compilation"):
        if audited.get(name) is not None:
            checks[name] = audited[name]
    if target.device == "cpu" and lifecycle.ready_s is not None:
        checks["placement"] = host_placement("the service on the host (not audited: nothing to place)")
    if fatal is not None and load is not None:
        kept = "its figures up to the fault are kept, the run is not judged a pass"
        notes.append(f"the service failed ({fatal.type}): {kept}")
    # the latency figures: each timed-out request at its wait, its lag plus the request timeout
    # (a lower bound), so that a service that times out most requests does not show the few it
    # answered as its latency; a refused connection or an error status has no latency
    timeout_s = settings.request_timeout_s
    answered = load.latencies(timed_out=lambda r: r.lag_s + timeout_s) if load is not None else []
    timed_out = load.errors().get(TIMED_OUT, 0) if load is not None else 0
    if timed_out:
        notes.append(f"{timed_out} request(s) timed out: in p50, p90 and p99 each counts at its wait, "
                     f"{settings.request_timeout_s:g} s after it was sent (its latency was at least that)")  # fmt: skip
    facts: dict[str, Any] = {
        "rate": settings.rate, "arrivals": settings.arrivals, "requests": len(load.requests) if load else 0,
        "warmup": measured.warmup, "warmed": measured.warmed, "warmup_s": measured.warmup_s,
        "lifecycle": lifecycle.to_dict(), "judgement": judgement.to_dict() if judgement else None,
        "responses": parity.to_dict() if parity else None,
        "responses_elsewhere": [{"traffic": label, **other.to_dict()} for label, other in elsewhere],
        "search": measured.search.to_dict() if measured.search else None, "capacity": capacity, "cold": cold,
    }  # fmt: skip
    series = {}
    if load is not None:
        kept = [r for r in load.requests if r.error is None and r.done is not None]
        series = {
            "latency": tuple(r.latency_s * 1e3 for r in kept),
            "from_send": tuple(r.from_send_s * 1e3 for r in kept),
            "lag": tuple(r.lag_s * 1e3 for r in load.requests),
        }
        if load.streamed:  # a streamed answer's time to first token and per output token
            series["ttft"] = tuple(r.ttft_s * 1e3 for r in kept if r.ttft_s is not None)
            series["tpot"] = tuple(r.tpot_s * 1e3 for r in kept if r.tpot_s is not None)
    scenario = ScenarioResult(
        "service", "ok" if load is not None else "error", fatal.message if fatal and load is None else "",
        options={"rate": settings.rate, "arrivals": settings.arrivals, "duration_s": settings.duration_s},
        series=series, facts=facts, run_seconds=load.wall_s if load is not None else 0.0,
    )  # fmt: skip
    return TargetResult(
        target=target,
        status="error" if fatal is not None or load is None else "ok",
        reason=fatal.message if fatal is not None else "",
        is_reference=is_reference,
        checks=checks,
        latency=Latency(tuple(v * 1e3 for v in answered)) if answered else None,
        error=fatal,
        scenarios=(scenario,),
        requirements=tuple(_requirement(v, judgement) for v in judgement.objectives) if judgement else (),
        notes=tuple(notes),
        duration_s=load.wall_s if load is not None else None,
        load_average=measured.load_average,
    )


def _search_plan(
    settings: ServeSettings, traffic: Traffic, objectives: Sequence[Requirement], sent: list[tuple[float, LoadRun]]
) -> SearchPlan:
    """The search's steps: each at least ``--min-duration`` (with a margin for a drawn schedule's
    span), :data:`~bakeoff.serve.objectives.MIN_REQUESTS` requests and the requests the tightest
    percentile needs to be claimed; a recorded trace is replayed whole, scaled to each rate.
    Each step's rate and load run are appended to ``sent`` (their answers are compared after)."""
    quantiles = [found[1] for found in map(latency_series, (o.metric for o in objectives)) if found is not None]
    claim = max((requests_to_claim(q, 0.99) for q in quantiles), default=0)
    schedule = parse_schedule(settings.arrivals)

    def plan(rate: float, scale: int) -> tuple[list[Any], list[float]]:
        if traffic.at is not None:
            return list(traffic.bodies), list(from_trace(traffic.at, rate))
        count = max(math.ceil(rate * settings.min_duration_s * 1.25), MIN_REQUESTS, claim) * scale
        return traffic.take(count), list(schedule.times(rate, count, seed=settings.seed + 1))

    def judge(load: Any, rate: float) -> ServiceJudgement:
        sent.append((rate, load))
        return judge_run(load, objectives, offered_rate=rate, min_duration_s=settings.min_duration_s)

    return SearchPlan(settings.rate, settings.search_steps, plan, judge)


def _searched(target: Target, search: RateSearch, settings: ServeSettings) -> tuple[list[str], dict[str, Any] | None]:
    """The search's notes and the capacity plan for ``--peak`` (None: no peak, or no rate held)."""
    tried = ", ".join(f"{step.rate:.3g}/s {step.verdict.replace('_', ' ')}" for step in search.steps)
    notes = [f"highest rate within the objectives: {search.text} ({tried}; {search.stopped})"]
    if settings.peak is None:
        return notes, None
    price = price_for(target.spec, target.device, parse_prices(settings.prices))
    plan = capacity_plan(settings.peak, settings.headroom, search.low, search.high, price)
    if plan is None:
        notes.append(f"no replica count is known to hold a peak of {settings.peak:g}/s: no rate met every objective")
        return notes, None
    notes.append(f"capacity {plan.text}")
    return notes, {**plan.to_dict(), "text": plan.text}


def _cold_plan(settings: ServeSettings, traffic: Traffic) -> tuple[list[Any], list[float]] | None:
    """The cold traffic: ``--cold`` seconds at ``--rate`` (a recorded trace: its first seconds)."""
    if settings.cold_s <= 0:
        return None
    if traffic.at is not None:
        kept = [(b, t) for b, t in zip(traffic.bodies, from_trace(traffic.at, settings.rate), strict=True)]
        kept = [(b, t) for b, t in kept if t < settings.cold_s] or kept[:1]
        return [b for b, _ in kept], [t for _, t in kept]
    count = max(1, math.ceil(settings.rate * settings.cold_s))
    times = parse_schedule(settings.arrivals).times(settings.rate, count, seed=settings.seed + 2)
    return traffic.take(count), list(times)


def _cold(
    cold: LoadRun, objectives: Sequence[Requirement], judgement: ServiceJudgement | None, seconds: float
) -> tuple[dict[str, Any], str]:
    """What a fresh replica did with its first ``seconds`` of traffic, as facts and a note."""
    share, low, high = attainment(cold, objectives)
    answered = cold.latencies()
    head = cold.requests[0] if cold.requests else None
    first_ms = head.latency_s * 1e3 if head is not None and head.error is None and head.latency_s is not None else None
    facts = {
        "seconds": seconds, "requests": len(cold.requests), "answered": len(answered), "attainment": share,
        "low": low, "high": high, "first_ms": first_ms, "errors": cold.errors(),
        "p50_ms": percentile(answered, 50) * 1e3 if answered else None,
        "p99_ms": percentile(answered, 99) * 1e3 if answered else None,
        "lag_p99_ms": cold.lag_p99_s() * 1e3,
        "warm": judgement.goodput_share if judgement is not None else None,
    }  # fmt: skip
    what = "within every objective" if any(latency_series(o.metric) for o in objectives) else "answered"
    note = (
        f"cold replica: {share * 100:.1f}% of the {len(cold.requests)} requests of its first {seconds:g} s {what} "
        f"({low * 100:.1f}% to {high * 100:.1f}% at 99%)"
    )
    if facts["warm"] is not None:
        note += f", {facts['warm'] * 100:.1f}% once warm"
    if first_ms is not None:
        note += f"; its first request took {duration(first_ms)}"
    return facts, note


def _places(traffic: Traffic, cold: tuple[list[Any], list[float]] | None) -> tuple[Places, Places]:
    """Where request ``i`` of a run stands in the traffic file: in the measured traffic and a
    search step's (the file cycled, or a trace in its order), and in the cold traffic (a trace's
    first seconds are not always its first lines)."""
    count = len(traffic.bodies)
    where = {id(body): i for i, body in enumerate(traffic.bodies)}
    cold_places = [where[id(body)] for body in cold[0]] if cold is not None else []
    return (lambda i: i % count), (lambda i: cold_places[i] if i < len(cold_places) else -1)


def _elsewhere(
    answers: dict[int, Any], places: tuple[Places, Places], measured: Measured,
    steps: Sequence[tuple[float, LoadRun]], settings: ServeSettings,
) -> list[tuple[str, ResponseParity]]:  # fmt: skip
    """The target's answers outside its measured traffic (its cold replica's, each search step's)
    against the reference's to the same bodies, each labelled (the measured traffic, the search's
    first step when it decided, is compared on its own)."""
    if not answers:
        return []
    runs = [("the cold replica's traffic", measured.cold, places[1])] if measured.cold is not None else []
    runs += [
        (f"the search's step at {rate:.3g}/s", load, places[0]) for rate, load in steps if load is not measured.load
    ]
    options = {"dtype": settings.dtype, "compare": settings.compare or None}
    return [(label, compare_by_body(answers, load, place, **options)) for label, load, place in runs]


def _folder(spec: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", spec)


def serve_service(
    store: Store | Callable[[], Store],
    command: str,
    targets: Sequence[Target],
    settings: ServeSettings,
    *,
    reference: Target,
    progress: Callable[[str], None] | None = None,
) -> RunResult:
    """Measure ``command`` on ``reference`` and each target under ``settings``' traffic, store
    the run and return it (see the module docstring).

    Raises:
        SpecError: the traffic file, the arrival schedule, an objective or the comparison
            function cannot be read, or a target asks for a compile backend, autocast or a dtype;
            nothing has started then.
    """
    say = progress or (lambda _msg: None)
    words(command)  # a malformed command line is refused before anything starts
    for target in targets:  # as fit and dist refuse them: before the reference's whole run
        if target.is_compiled or target.amp is not None or target.dtype:
            raise SpecError(
                f"bakeoff serve runs the service as written on the target's device: {target.spec} asks for a "
                "compile backend, autocast or a dtype, which only the service's own code can choose",
                hint=f"use --on {target.torch_device}",
            )
    path = traffic_path(settings.traffic)
    traffic = read_traffic(path)
    objectives = parse_objectives(settings.slo)
    if settings.compare:
        load_compare(settings.compare)
    if traffic.at is not None:  # a recorded trace, at its own times scaled to the rate
        bodies, times = list(traffic.bodies), from_trace(traffic.at, settings.rate)
    else:
        count = max(1, math.ceil(settings.rate * settings.duration_s))
        bodies = traffic.take(count)
        times = parse_schedule(settings.arrivals).times(settings.rate, count, seed=settings.seed)
    warmup = traffic.take(settings.warmup) if settings.warmup else []
    cold_plan = _cold_plan(settings, traffic)
    workload = service_workload(command, path.read_bytes(), settings.traffic, settings.dtype)
    base = owned_tempdir("serve")
    results: list[TargetResult] = []
    try:
        ref_measured = None
        answers: dict[int, Any] = {}  # the reference's answer to each body of the traffic
        places = _places(traffic, cold_plan)
        for target in [reference, *(t for t in targets if t != reference)]:
            reason = unavailable_reason(target)
            if reason is not None:
                results.append(TargetResult(target=target, status="skipped", reason=reason))
                continue
            say(f"starting the service on {target.spec}, then {len(bodies)} requests at {settings.rate:g}/s")
            steps: list[tuple[float, LoadRun]] = []
            measured = measure_service(
                command,
                out=base / _folder(target.spec),
                device=target.torch_device,
                device_map={source: target.torch_device for source in settings.sources},
                bodies=bodies,
                times=times,
                warmup=warmup,
                health=settings.health,
                path=settings.path,
                start_timeout_s=settings.start_timeout_s,
                request_timeout_s=settings.request_timeout_s,
                audit=settings.audit and target.device != "cpu",
                search=_search_plan(settings, traffic, objectives, steps) if settings.searches else None,
                cold=cold_plan,
                clients=settings.clients,
            )
            is_reference = target == reference
            against = None if is_reference else ref_measured
            elsewhere = [] if is_reference else _elsewhere(answers, places, measured, steps, settings)
            results.append(
                _result(target, measured, against, is_reference, settings, objectives, reference.spec, elsewhere)
            )
            if is_reference:
                ref_measured = measured
                ran = [
                    (measured.load, places[0]),
                    (measured.cold, places[1]),
                    *((load, places[0]) for _, load in steps),
                ]
                answers = answers_by_body((load, place) for load, place in ran if load is not None)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    run = RunResult(
        run_id=uuid.uuid4().hex[:12],
        created_at=utc_now(),
        workload={**workload, "notes": [f"the reference service ran on {reference.spec}, remapped like the targets"]},
        environment=capture_environment(),
        results=tuple(results),
        settings=run_settings(settings, command=command, reference=reference.spec),
    )
    (store() if callable(store) else store).save_run(run)
    return run
