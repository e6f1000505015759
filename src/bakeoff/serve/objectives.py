"""A service's objectives (``p99<=300ms``, ``error_rate<=1%``, ``goodput>=20/s``) judged on one load run.

:func:`judge_run` reads a :class:`~bakeoff.serve.load.LoadRun` into a :class:`ServiceJudgement`:

* the latency summary: p50, p90, p99 and p99.9 of the answered requests, timed from the
  *schedule* (what a user arriving on time saw) and from the *send* (the coordinated-omission
  contrast), each with the interval of :mod:`bakeoff.analysis.tail`, which accounts for the
  correlation between successive requests; ``high_ms`` is None where the run cannot bound the
  percentile from above;
* errors by kind and the error rate, with a Wilson score interval;
* goodput: requests answered without error *and* within every latency objective (``holds`` on the
  schedule-anchored latency; with no latency objective, every answered request), per second of
  the run's scheduled span, and as a share of all requests, with a Wilson interval;
* the client's dispatch lag p99, and a verdict per objective: ``met`` (the whole interval on the
  right side of the threshold), ``not_met`` (the whole interval on the wrong side),
  ``inconclusive`` (it straddles the threshold) or ``invalid`` (not judged, with why).

Validity, after MLPerf LoadGen's rules (a run too short or too small is INVALID, never judged):
the run is invalid when it lasted less than ``min_duration_s`` or sent fewer than
``min_requests`` (LoadGen's server scenario asks 600 s and 100 queries; 10 s here suits a
developer's run), or when the client did not keep its schedule for the tightest latency objective
(:meth:`LoadRun.kept_schedule_for`): then the client, not the service, shaped the figures. An
invalid run judges nothing: every objective is ``invalid``. A percentile objective is also
``invalid`` on its own when the run has fewer *effective* requests than
:func:`~bakeoff.analysis.tail.requests_to_claim` asks for that percentile at ``confidence``
(p99 at 99%: 528; p99.9: 5,296). The effective count (:attr:`TailEstimate.effective`: the answered
requests divided by their integrated autocorrelation time) is the one that counts, not the raw
count: the rule's arithmetic (the largest of N draws above the percentile with the interval's
probability) holds for independent draws, and 500 requests of which a burst of 50 shared one
stall have shown the tail a few times, not 500. It is the stricter count, and, being estimated, a
noisy one on short runs. Too few to bound a percentile can still be enough to say it is over:
an overloaded service's latencies climb together (a handful of effective requests), and when
the share of requests answered within the threshold is below the percentile with its whole
Wilson interval (on that indicator's own effective count), ``pQ<=T`` is ``not_met``; never
``met`` that way.

The error rate and goodput intervals use the effective count of their own indicator sequence
(errors come in bursts when a service stalls or restarts); for independent outcomes that is the
plain Wilson interval. The overall verdict is ``met`` only when the run is valid and every
objective is met, ``not_met`` when any objective is not met, else ``invalid`` when any objective
is invalid, else ``inconclusive``.

A request that timed out counts as an error *and*, for a percentile objective, as slower than
every answer and the objective (it waited past its timeout): a service that times out its
slowest requests does not flatter its p99. A refused connection or an error status has no
latency and counts in the error rate and goodput only. The latency summary (each percentile's
interval) is of the answered requests alone; the run's own latency figures (the table's p50, p90
and p99) count a timed-out request at its wait (:mod:`bakeoff.runner.serve`). The correlation
limits of :mod:`bakeoff.analysis.tail` apply.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

from bakeoff.analysis.requirements import Requirement, parse_requirement_with
from bakeoff.analysis.tail import correlated_percentile, integrated_time, requests_to_claim
from bakeoff.codec import Value
from bakeoff.errors import SpecError
from bakeoff.serve.load import MAX_LAG_S, MAX_LAG_SHARE, TIMED_OUT, LoadRun, Sent

__all__ = [
    "MIN_DURATION_S",
    "MIN_REQUESTS",
    "SUMMARY_PERCENTILES",
    "VERDICTS",
    "ObjectiveVerdict",
    "Quantile",
    "ServiceJudgement",
    "attainment",
    "judge_run",
    "latency_series",
    "parse_objectives",
    "wilson_interval",
]

#: The percentiles every judgement summarises, from the schedule and from the send.
SUMMARY_PERCENTILES = (50.0, 90.0, 99.0, 99.9)
MIN_DURATION_S = 10.0  # the shortest scheduled span and the fewest requests of a valid run
MIN_REQUESTS = 100
VERDICTS = ("met", "not_met", "inconclusive", "invalid")
_SCENARIO = "serve"
_METRICS = (
    "pNN or pNN.N (latency, 'p99<=300ms'), ttft_pNN and tpot_pNN (a streamed answer's time to first token and "
    "per output token), error_rate ('error_rate<=1%'), goodput ('goodput>=20/s')"
)
_PCT = re.compile(r"^(?:(ttft|tpot)_)?p(\d+(?:\.\d+)?)$")
#: The series a latency objective is judged on, by its metric's prefix (see :func:`latency_series`).
_ANCHORS = {None: "schedule", "ttft": "ttft", "tpot": "tpot"}


def latency_series(metric: str) -> tuple[str, float] | None:
    """The series (:meth:`LoadRun.latencies`'s anchor) and percentile a latency objective's
    metric reads: ``p99`` -> (``schedule``, 99), ``ttft_p90`` -> (``ttft``, 90), ``tpot_p50`` ->
    (``tpot``, 50); None for another metric."""
    match = _PCT.match(metric)
    return (_ANCHORS[match.group(1)], float(match.group(2))) if match else None


def _lookup(name: str) -> tuple[str, str, float | None]:
    """What a service metric is, for :func:`parse_requirement_with`."""
    if name == "error_rate":
        return "share", _SCENARIO, None
    if name == "goodput":
        return "rate", _SCENARIO, None
    match = _PCT.match(name)
    if match is None:
        raise SpecError(f"unknown service metric {name!r}", hint="metrics: " + _METRICS)
    if float(match.group(2)) <= 0:
        raise SpecError(f"percentile {name!r} must be above 0", hint="e.g. p50, p99 or p99.9")
    return "time", _SCENARIO, float(match.group(2))


def parse_objectives(texts: Sequence[str]) -> tuple[Requirement, ...]:
    """Parse service objectives (thresholds in ms, a share, or per second).

    Raises:
        SpecError: malformed text, an unknown metric, a percentile outside (0, 100), a unit
            that does not fit (a latency needs a time unit), a latency or error rate given as a
            lower bound (``p99>=5ms``), goodput as an upper one, or an error rate above 100%.
    """
    found = tuple(parse_requirement_with(text, _lookup) for text in texts)
    for req in found:
        upper = req.op in ("<=", "<")
        if (req.metric == "goodput") == upper:
            bound = "at least (>=)" if req.metric == "goodput" else "at most (<=)"
            raise SpecError(f"objective {req.text!r}: {req.metric} is held to {bound}", hint="e.g. " + _METRICS)
        if req.metric == "error_rate" and req.threshold > 1:
            raise SpecError(f"objective {req.text!r}: an error rate is at most 100%", hint="e.g. error_rate<=1%")
    return found


@dataclass(frozen=True)
class Quantile(Value):
    """One latency percentile ``q`` in ms from the ``schedule`` or the ``send``, its interval at the
    judgement's confidence (``high_ms`` None: too few effective requests to bound it from above),
    the ``effective`` requests behind it and the ``needed`` ones to claim it at that confidence."""

    q: float
    anchor: str
    value_ms: float
    low_ms: float
    high_ms: float | None
    effective: float
    needed: int

    DERIVED = ("claimable",)

    @property
    def claimable(self) -> bool:
        return self.effective >= self.needed


@dataclass(frozen=True)
class ObjectiveVerdict(Value):
    """One objective's ``verdict`` (one of :data:`VERDICTS`), its measured ``value`` and interval in
    the requirement's unit (None where not measured or not bounded) and a one-line ``reason``."""

    requirement: Requirement
    verdict: str
    value: float | None = None
    low: float | None = None
    high: float | None = None
    reason: str = ""


@dataclass(frozen=True)
class ServiceJudgement(Value):
    """A service's objectives judged on one load run (see the module docstring). Rates are per
    second, shares fractions, latencies ms; ``span_s`` is the run's scheduled span."""

    verdict: str
    reason: str
    valid: bool
    invalid_reasons: tuple[str, ...]
    objectives: tuple[ObjectiveVerdict, ...]
    latency: tuple[Quantile, ...]
    requests: int
    answered: int
    errors: dict[str, int]
    error_rate: float
    error_low: float
    error_high: float
    goodput: float
    goodput_low: float
    goodput_high: float
    goodput_share: float
    lag_p99_ms: float
    span_s: float
    offered_rate: float
    confidence: float

    def quantile(self, q: float, anchor: str = "schedule") -> Quantile | None:
        return next((x for x in self.latency if x.q == q and x.anchor == anchor), None)


def wilson_interval(share: float, trials: float, confidence: float) -> tuple[float, float]:
    """The Wilson score interval of a binomial ``share`` over ``trials`` (may be an effective,
    fractional count); (0, 1) with no trials."""
    if trials <= 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf((1 + confidence) / 2)
    scale = 1 + z * z / trials
    centre = (share + z * z / (2 * trials)) / scale
    half = z / scale * math.sqrt(share * (1 - share) / trials + z * z / (4 * trials * trials))
    return max(0.0, centre - half), min(1.0, centre + half)


def _share(flags: Sequence[bool], confidence: float) -> tuple[float, float, float]:
    """The share of true ``flags`` and its Wilson interval on their effective count."""
    if not flags:
        return 0.0, 0.0, 1.0
    share = sum(flags) / len(flags)
    low, high = wilson_interval(share, len(flags) / integrated_time([float(f) for f in flags]), confidence)
    return share, low, high


def _span_s(run: LoadRun, offered_rate: float) -> float:
    """The scheduled span: as many mean gaps as requests (``n / rate`` for a schedule at ``rate``,
    whose first request is due at 0 and last at ``(n - 1) / rate``); ``n / offered_rate`` when
    the schedule has no gaps."""
    planned = [r.planned for r in run.requests]
    n = len(planned)
    if n >= 2 and max(planned) > min(planned):
        return (max(planned) - min(planned)) * n / (n - 1)
    return n / offered_rate


def _pct(share: float) -> str:
    return f"{share * 100:.2f}%"


def _show(value: float | None, unit: str, timed_out: bool = False) -> str:
    if value is None:
        return "over the request timeout" if timed_out else "unbounded"
    return {"ms": f"{value:.1f} ms", "/s": f"{value:.2f}/s"}.get(unit, _pct(value))


def _side(req: Requirement, low: float, high: float | None) -> str:
    """met / not_met / inconclusive for an interval (``high`` None: no upper bound)."""
    ends = (req.holds(low), req.holds(math.inf if high is None else high))
    return "met" if all(ends) else "not_met" if not any(ends) else "inconclusive"


def _quantile(run: LoadRun, q: float, anchor: str, confidence: float) -> Quantile:
    est = run.percentile(q, anchor, confidence)
    high = est.high * 1e3 if est.enough else None
    return Quantile(q, anchor, est.value * 1e3, est.low * 1e3, high, est.effective, requests_to_claim(q, confidence))


def _judge(
    req: Requirement, run: LoadRun, figures: dict[str, tuple[float, float, float]], confidence: float
) -> ObjectiveVerdict:
    series = latency_series(req.metric)
    if series is None:
        value, low, high = figures[req.metric]
    else:
        anchor, q = series
        timed = _timed(run, req.threshold / 1e3, anchor)
        if not timed:
            what = "was answered" if anchor == "schedule" else "was answered as a stream of events"
            return ObjectiveVerdict(req, "invalid", reason=f"{req.text} invalid: no request {what}")
        found = correlated_percentile(timed, q, confidence)
        needed = requests_to_claim(q, confidence)
        # a request that timed out stands above every answer and the objective: a percentile there is unknown
        beyond = max(timed) if TIMED_OUT in run.errors() else math.inf
        value, low = (None if v >= beyond else v * 1e3 for v in (found.value, found.low))
        high = found.high * 1e3 if found.enough and found.high < beyond else None
        if found.effective < needed:
            missed = _share_missed(req, q, timed, confidence)
            if missed is not None:  # too few to bound the percentile, enough to say it is over
                return ObjectiveVerdict(req, "not_met", value, low, high, missed)
            why = (
                f"{req.text} invalid: {found.effective:.0f} effective requests, {needed} needed to "
                f"claim p{q:g} at {confidence * 100:g}% confidence"
            )
            return ObjectiveVerdict(req, "invalid", value, low, high, why)
        verdict = _side(req, math.inf if low is None else low, high)
        shown = f"{_show(low, req.unit, timed_out=True)} to {_show(high, req.unit)}"
        point = _show(value, req.unit, timed_out=True)
        why = f"{req.text} {verdict.replace('_', ' ')} ({req.metric} {point}, interval {shown})"
        return ObjectiveVerdict(req, verdict, value, low, high, why)
    verdict = _side(req, low, high)
    shown = f"{_show(low, req.unit)} to {_show(high, req.unit)}"
    why = f"{req.text} {verdict.replace('_', ' ')} ({req.metric} {_show(value, req.unit)}, interval {shown})"
    return ObjectiveVerdict(req, verdict, value, low, high, why)


def _share_missed(req: Requirement, q: float, timed: Sequence[float], confidence: float) -> str | None:
    """Why ``pQ<=T`` is not met when too few effective requests bound the percentile itself (an
    overloaded service's latencies climb together, so they count as few): the share of requests
    answered within ``T`` (a timed-out one never is), with its Wilson interval over the
    indicator's effective count, is below ``Q``% with its whole interval. None: it is not shown."""
    if req.op not in ("<=", "<"):
        return None
    threshold_s = req.threshold / 1e3
    within = [t <= threshold_s if req.op == "<=" else t < threshold_s for t in timed]
    share, _, high = _share(within, confidence)
    if high >= q / 100:
        return None
    return (
        f"{req.text} not met: {_pct(share)} of requests within {_show(req.threshold, req.unit)} (at most "
        f"{_pct(high)} at {confidence * 100:g}% confidence), under the {q:g}% the objective asks; too few "
        f"effective requests to bound p{q:g} itself"
    )


def _timed(run: LoadRun, threshold_s: float, anchor: str = "schedule") -> list[float]:
    """The values a percentile objective is judged on, in schedule order: each answered
    request's (of the ``anchor`` series: :meth:`LoadRun.latencies`; an answer without it, as an
    unstreamed one for ``ttft``, is left out), and for each request that timed out a value above
    every answer and the objective (it waited longer than its timeout: leaving it out would
    flatter the tail). Requests that failed otherwise (a refused connection, an error status)
    are left out."""
    beyond = 2 * max([threshold_s, *run.latencies(anchor)]) + 1.0
    return run.latencies(anchor, timed_out=lambda _r: beyond)


def _within(r: Sent, objectives: Sequence[Requirement]) -> bool:
    """Whether request ``r`` was answered within every latency objective (an answer that has no
    time per output token, one event or none, meets a ``tpot`` objective; one that has no first
    token, an unstreamed answer, does not meet a ``ttft`` one)."""
    if r.error is not None or r.latency_s is None:
        return False
    for o in objectives:
        anchor, _ = latency_series(o.metric)  # type: ignore[misc]
        value = r.value(anchor)
        if value is None and anchor == "tpot":
            continue
        if value is None or not o.holds(value * 1e3):
            return False
    return True


def _problems(
    run: LoadRun, latency_objectives: Sequence[Requirement], span_s: float, min_duration_s: float, min_requests: int
) -> list[str]:
    """Why the run cannot be judged (empty: it can)."""
    found = []
    if span_s < min_duration_s:
        found.append(f"the run lasted {span_s:.1f} s, under the minimum {min_duration_s:g} s")
    if len(run.requests) < min_requests:
        found.append(f"the run sent {len(run.requests)} requests, under the minimum {min_requests}")
    lag = run.lag_p99_s()
    answered = run.latencies()
    if answered:
        # the client's lag delays what is timed from the schedule; a time per output token is not
        anchored = [o for o in latency_objectives if (latency_series(o.metric) or ("", 0))[0] != "tpot"]
        tightest = min((o.threshold / 1e3 for o in anchored), default=None)
        if not run.kept_schedule_for(tightest):
            scale = tightest if tightest is not None else run.percentile(99).value
            what = "the tightest objective" if tightest is not None else "the run's own p99"
            found.append(
                f"the client did not keep its schedule: dispatch lag p99 {lag * 1e3:.1f} ms, over the lesser of "
                f"{MAX_LAG_S * 1e3:g} ms and {MAX_LAG_SHARE * 100:g}% of {what} ({scale * 1e3:.1f} ms)"
            )
    elif lag > MAX_LAG_S:
        found.append(f"the client did not keep its schedule: dispatch lag p99 {lag * 1e3:.1f} ms")
    return found


def attainment(run: LoadRun, objectives: Sequence[Requirement], confidence: float = 0.99) -> tuple[float, float, float]:
    """The share of ``run``'s requests answered within every latency objective (every answered
    request where there is none), with its Wilson interval on their effective count: the
    fraction goodput counts."""
    latency_objectives = [o for o in objectives if latency_series(o.metric) is not None]
    return _share([_within(r, latency_objectives) for r in run.requests], confidence)


def judge_run(
    run: LoadRun,
    objectives: Sequence[Requirement],
    *,
    offered_rate: float,
    min_duration_s: float = MIN_DURATION_S,
    min_requests: int = MIN_REQUESTS,
    confidence: float = 0.99,
) -> ServiceJudgement:
    """Judge ``objectives`` (from :func:`parse_objectives`) on ``run``, sent at ``offered_rate``
    requests per second; every interval at ``confidence`` (see the module docstring).

    Raises:
        SpecError: ``offered_rate`` not positive or ``confidence`` outside (0, 1).
    """
    if offered_rate <= 0 or not 0 < confidence < 1:
        raise SpecError(
            f"offered rate {offered_rate:g} and confidence {confidence:g} are out of range",
            hint="a positive rate, a confidence between 0 and 1 (e.g. 0.99)",
        )
    latency_objectives = [o for o in objectives if latency_series(o.metric) is not None]
    n = len(run.requests)
    span = _span_s(run, offered_rate)
    per_s = n / span if span > 0 else 0.0
    share, good_low, good_high = attainment(run, objectives, confidence)
    errors = _share([r.error is not None for r in run.requests], confidence)
    figures = {"error_rate": errors, "goodput": (share * per_s, good_low * per_s, good_high * per_s)}
    answered = len(run.latencies())
    anchors = ("schedule", "send", *(("ttft", "tpot") if run.streamed else ()))
    summary = tuple(
        _quantile(run, q, anchor, confidence)
        for anchor in anchors
        for q in SUMMARY_PERCENTILES
        if run.latencies(anchor)
    )
    problems = _problems(run, latency_objectives, span, min_duration_s, min_requests)
    if problems:
        verdicts = tuple(ObjectiveVerdict(o, "invalid", reason=f"{o.text} not judged") for o in objectives)
        verdict, details = "invalid", problems
    else:
        verdicts = tuple(_judge(o, run, figures, confidence) for o in objectives)
        found = {v.verdict for v in verdicts}
        verdict = next((v for v in ("not_met", "invalid", "inconclusive", "met") if v in found), "inconclusive")
        details = [v.reason for v in verdicts] or ["no objectives to judge"]
    lag_ms = run.lag_p99_s() * 1e3
    facts = (
        f"{n} requests ({answered} answered) over {span:.1f} s at {offered_rate:g}/s offered, "
        f"error rate {_pct(errors[0])}, goodput {share * per_s:.2f}/s ({_pct(share)} of requests), "
        f"dispatch lag p99 {lag_ms:.1f} ms"
    )
    return ServiceJudgement(
        verdict=verdict,
        reason=f"{verdict}: " + "; ".join([*details, facts]),
        valid=not problems,
        invalid_reasons=tuple(problems),
        objectives=verdicts,
        latency=summary,
        requests=n,
        answered=answered,
        errors=run.errors(),
        error_rate=errors[0],
        error_low=errors[1],
        error_high=errors[2],
        goodput=share * per_s,
        goodput_low=good_low * per_s,
        goodput_high=good_high * per_s,
        goodput_share=share,
        lag_p99_ms=lag_ms,
        span_s=span,
        offered_rate=offered_rate,
        confidence=confidence,
    )
