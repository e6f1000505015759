"""Each measured target's case, read from its result: the :class:`Standing` the decision rule
(:mod:`bakeoff.verdicts.decision`) is applied to. :func:`standing_of` turns a target's result
into what rules it out (``misses``), what leaves it undecided (``doubts``), its speed against the
reference and, with prices, its cost; the helpers around it read the run's own prices, its
reference's rate and a language model's tokens per request. A cost states its basis
(:attr:`~bakeoff.analysis.cost.Cost.basis_text`): one stream's rate, single-stream or the server
scenario's, times the streams the price's instance holds, assumed to scale; the bundled test
device (``emu``) gets a *rehearsal* cost from its measured rate, never ranked.
"""

from __future__ import annotations

from dataclasses import dataclass

from bakeoff.analysis.cost import SERVICE_BASIS, Cost, Price, cost_of, parse_prices, price_for, streams_of
from bakeoff.analysis.requirements import requirement_state
from bakeoff.checks.comparison import Correctness
from bakeoff.checks.placement import UNMEASURED
from bakeoff.checks.registry import guarded, registered_checks
from bakeoff.codec import Value
from bakeoff.emu import NAME as TEST_DEVICE
from bakeoff.errors import SpecError
from bakeoff.metrics import metric_estimate
from bakeoff.results.values import RunResult, TargetResult
from bakeoff.units import clip, figure

__all__ = [
    "Standing",
    "cost_in_run",
    "label_of",
    "lost_output",
    "price_in_run",
    "reference_rate_of",
    "standing_of",
    "stored_prices",
    "tokens_per_request",
]

_PLACED = ("on_device", "not_applicable")


@dataclass(frozen=True)
class Standing(Value):
    """One target's case: ``misses`` rule it out, ``doubts`` leave it undecided; ``speed`` is its
    speed-up against the reference with its interval ``(value, low, high)``, None when it was not
    timed; ``cost`` per million requests where it has a price, and where prices were given but
    it has no cost, ``cost_note`` says why. A target that is not a ``candidate`` (the eager
    reference of a plan that did not list it) is shown, never chosen."""

    target: str
    is_reference: bool = False
    misses: tuple[str, ...] = ()
    doubts: tuple[str, ...] = ()
    speed: tuple[float, float, float] | None = None
    cost: Cost | None = None
    candidate: bool = True
    cost_note: str = ""

    @property
    def qualifies(self) -> bool:
        return self.candidate and not self.misses and not self.doubts


def label_of(result: TargetResult) -> str:
    """The target's spec, and for a padded variant the buckets it was padded to."""
    if result.variant != "bucketed":
        return result.target.spec
    sizes = next((a["value"] for a in result.adjustments if a.get("name") == "pad to buckets"), None)
    return result.target.spec + (f" padded to {','.join(map(str, sizes))}" if isinstance(sizes, list) else " padded")


def _figure(value: float | None, unit: str) -> str:
    return "?" if value is None else figure(value, unit)


def _requirement(item: dict) -> tuple[str | None, str | None]:
    """(miss, doubt) for one requirement's stored verdict, by the one word every report uses
    for it (:func:`~bakeoff.analysis.requirements.requirement_state`)."""
    text, unit = item["text"], item.get("unit") or ""
    value = _figure(item.get("value"), unit)
    interval = ""
    if item.get("low") is not None and item.get("high") is not None:
        low, high = _figure(item["low"], unit), _figure(item["high"], unit)
        interval = f" ({low} to {high})" if item["low"] < 0 else f" ({low}-{high})"
    state = requirement_state(item)
    if state in ("met", "not applicable"):
        return None, None
    if state == "not measured":
        return None, f"{text} not measured: {item.get('reason') or 'no figure'}"
    if state == "too few samples":
        return None, f"{text}: {value} from too few samples ({item.get('samples')})"
    if state == "not met":
        if item.get("value") is None:  # no figure (a percentile among timed-out requests): its reason says why
            reason = item.get("reason") or "no figure"
            return (reason if reason.startswith(f"{text} not met") else f"{text} not met: {reason}"), None
        return f"{text} not met: {value}{interval}", None
    return None, f"{text} not conclusive: {value}, its interval{interval} straddles the limit"


def _wrong(c: Correctness) -> str:
    """Why a correctness verdict rules a target out, naming the outputs that failed with their
    own (relative) figures: a passing output's large absolute error is no reason."""
    failed = [o for o in c.outputs if not o.passed]
    if not failed:
        return f"correctness {c.verdict}: {clip(c.reason, 160) or 'no output compared'}"
    first = failed[0]
    more = f" (and {len(failed) - 1} more output(s))" if len(failed) > 1 else ""
    return f"correctness {c.verdict}: {first.name}: {clip(first.problem or 'differs', 200)}{more}"


def lost_output(r: TargetResult) -> str:
    """Why ``r``'s outputs are lost in its dtype (:attr:`Correctness.lost` is set)."""
    c = r.correctness
    assert c is not None and c.lost is not None
    return (
        f"outputs lost in {r.target.dtype}: rms error against the float64 golden {c.lost:.0%} of the output, as "
        f"eager {r.target.dtype} on the CPU loses it too (the dtype cannot hold this model's result)"
    )


def standing_of(
    r: TargetResult,
    price: Price | None = None,
    reference_rate: float | None = None,
    tokens: float | None = None,
    priced: bool = False,
) -> Standing:
    """The case of a measured (not skipped) target's result; ``reference_rate`` is the
    reference's single-stream rate (requests per second) and ``tokens`` a language model's
    mean input tokens per request, for costs. ``priced``: prices were given (to some target),
    so a target without a cost says why."""
    misses: list[str] = []
    doubts: list[str] = []
    if r.status != "ok":
        what = f"{r.error.type} in {r.error.phase}: {clip(r.error.message, 120)}" if r.error else r.reason
        misses.append(f"failed ({r.status}): {what}")
    elif r.correctness is None:
        doubts.append("correctness not checked")
    elif r.correctness.verdict == "not_comparable":
        doubts.append(f"outputs not comparable: {clip(r.correctness.reason, 160)}")
    elif r.correctness.verdict != "pass":
        misses.append(_wrong(r.correctness))
    if r.correctness is not None and r.correctness.overflowed:
        native = (r.correctness.drift or {}).get("reference")
        misses.append(f"outputs not finite in {r.target.dtype} where {native} is finite (the dtype overflows)")
    elif r.correctness is not None and r.correctness.lost is not None:
        misses.append(lost_output(r))
    if r.status == "ok" and r.placement is not None and r.placement.verdict == UNMEASURED:
        doubts.append(f"placement unknown: {clip(r.placement.explanation, 160)}")  # nothing to place was seen
    elif r.status == "ok" and r.placement is not None and r.placement.verdict not in _PLACED:
        misses.append(f"work left the device: placement {r.placement.verdict}")
    elif r.placement is None and r.status == "ok" and r.target.device != "cpu":
        doubts.append("placement not audited: where the work ran is unknown")
    for check in registered_checks():  # the other checks' verdicts (training parity, plugins)
        value = r.checks.get(check.name)
        if value is not None and r.status == "ok":
            said = guarded(check, "misses", value, fallback=([], [f"the {check.name} check could not be read"]))
            misses += said[0]
            doubts += said[1]
    for item in r.requirements:
        miss, doubt = _requirement(item)
        misses += [miss] if miss else []
        doubts += [doubt] if doubt else []
    speed = _speed(r)
    cost, why = _cost(r, price, speed, reference_rate, tokens)
    return Standing(
        label_of(r), r.is_reference, tuple(misses), tuple(doubts), speed, cost,
        cost_note=why if priced or price is not None else "",
    )  # fmt: skip


def _speed(r: TargetResult) -> tuple[float, float, float] | None:
    """The speed-up against the reference with its interval, None when it was not timed or
    says nothing of a real device."""
    ci = r.speedup_ci
    speed = (ci["value"], ci["low"], ci["high"]) if ci else None
    if speed is None and r.is_reference and r.latency is not None and r.latency.count:
        speed = (1.0, 1.0, 1.0)  # the unit every other target's speed is measured in
    if r.target.device == TEST_DEVICE:  # an emulation on the host: its speed says nothing of a real device
        speed = None
    return speed


def _cost(
    r: TargetResult, price: Price | None, speed: tuple | None, reference_rate: float | None, tokens: float | None
) -> tuple[Cost | None, str]:
    """The target's cost per million requests, or None and why it has none: one stream's rate
    (the rate its server scenario sustained, else its single-stream rate with the speed-up's
    interval) times the streams its price's instance holds. The bundled test device gets a
    rehearsal cost from its own measured speed-up (its ``speed`` is never ranked)."""
    if price is None:
        return None, "not priced"
    if r.status != "ok":
        return None, f"did not run ({r.status})"
    if r.scenario("service") is not None:  # a service: one replica per priced instance, at its searched rate
        searched = metric_estimate(r, "service.rate")
        if searched is None:
            ran = (r.scenario("service").facts or {}).get("search")  # type: ignore[union-attr]
            return None, "no rate shown within the objectives" if ran else "no rate searched"
        said = {"streams": 1, "streams_from": "one replica per instance", "rehearsal": r.target.device == TEST_DEVICE}
        interval = (searched.low, searched.high) if searched.low < searched.high else None
        return cost_of(price, searched.value, SERVICE_BASIS, interval, tokens, **said), ""
    streams, streams_from = streams_of(price, r.target.device, r.target.effective_threads)
    if streams < 1:
        return None, f"needs {r.target.effective_threads} threads, its price buys {price.buys}"
    rehearsal = r.target.device == TEST_DEVICE
    said = {"streams": streams, "streams_from": streams_from, "rehearsal": rehearsal}
    sustained = metric_estimate(r, "server.rate")  # None when no server scenario ran
    if sustained is not None and sustained.value:
        measured = sustained.samples > 1 and sustained.low < sustained.high
        interval = (sustained.low, sustained.high) if measured else None
        return cost_of(price, sustained.value, "server", interval, tokens, **said), ""
    if rehearsal:  # its measured speed, for the rehearsal only
        ci = r.speedup_ci
        speed = (ci["value"], ci["low"], ci["high"]) if ci else None
    if speed is None:
        return None, "not timed"
    if not reference_rate:
        return None, "the reference was not timed"
    value, low, high = speed
    interval = (reference_rate * low, reference_rate * high)
    return cost_of(price, reference_rate * value, "single-stream", interval, tokens, **said), ""


def reference_rate_of(run: RunResult) -> float | None:
    """The single-stream rate (requests per second) of ``run``'s reference, None when it was
    not timed: the unit a single-stream cost is computed from."""
    reference = next((r for r in run.results if r.is_reference and r.latency is not None and r.latency.count), None)
    return 1000.0 / reference.latency.p50_ms if reference and reference.latency.p50_ms > 0 else None


def price_in_run(run: RunResult, r: TargetResult) -> Price | None:
    """The price ``run`` was given for the target of ``r`` (its own, else its device's), None
    when the run priced neither."""
    return price_for(r.target.spec, r.target.device, stored_prices(run))


def cost_in_run(run: RunResult, r: TargetResult) -> Cost | None:
    """The cost per million requests of ``r`` within its ``run``, priced by the prices the run
    was given: the figure the run's decision ranks it by. None when the run did not price it,
    or it has no rate to be costed at (it did not run or was not timed, or its price's cores
    hold none of its streams), or its cost is the bundled test device's rehearsal (never ranked,
    so never compared as a cost)."""
    price = price_in_run(run, r)
    if price is None:
        return None
    cost = _cost(r, price, _speed(r), reference_rate_of(run), tokens_per_request(run))[0]
    return None if cost is not None and cost.rehearsal else cost


def tokens_per_request(run: RunResult) -> float | None:
    """A language model's mean input tokens per request: over the profile's requests, else the
    workload's own input (None for a workload without ``input_ids``)."""
    inputs = (run.workload.get("details") or {}).get("inputs") or {}
    shape = inputs.get("input_ids")
    if not isinstance(shape, list) or len(shape) != 2:
        return None
    profile = run.settings.get("profile") or {}
    requests = [r for r in profile.get("requests") or () if isinstance(r, list) and len(r) == 2]
    if requests:
        return sum(batch * seq for batch, seq in requests) / len(requests)
    return float(shape[0] * shape[1])


def stored_prices(run: RunResult) -> tuple[Price, ...]:
    """The prices a run was given (none where its stored prices are not ones this release reads)."""
    texts = run.settings.get("prices")
    try:
        return parse_prices(texts) if isinstance(texts, list) and all(isinstance(t, str) for t in texts) else ()
    except SpecError:
        return ()
