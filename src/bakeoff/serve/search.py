"""The highest rate a service sustains within its objectives: a bracketing search, as an interval.

:func:`search_rate` sends the service open-loop traffic at one offered rate after another (each
step a load run judged on its own, :func:`~bakeoff.serve.objectives.judge_run`) and keeps the
bracket ``[low, high)``: ``low`` the highest rate at which **every** objective was met with its
whole interval, ``high`` the lowest rate at which one was **not** met with its whole interval.
From the first rate it doubles while met, halves while not met, then bisects the bracket
geometrically until ``high / low`` is within ``1 + precision`` or the steps run out.

A step that cannot decide (an objective whose interval straddles its threshold, too few requests
to claim its percentile, a run the client could not keep to its schedule) is tried once more
with more requests (:func:`retry_scale`: enough for the effective requests it fell short of),
unless even :data:`MAX_RETRY_SCALE` times as many would be too few (latencies that climb
together near capacity: 12 effective requests of 51 needed); a second one that cannot decide,
or one not worth retrying, ends the search where it is: the answer is the bracket found so
far, never a rate guessed from a step that could not tell. So the rate is reported as what the
steps showed: "between low and high", "at least low" (no rate tried was too high), "below high"
(none was met), or nothing.

What it cannot see: a service whose capacity drifts during the search (each step is judged on
its own; a cache that warms over minutes makes later steps look better), and objectives that
hold at a higher rate after failing at a lower one (a non-monotone service; the bracket assumes
that more traffic is never easier).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bakeoff.codec import Value
from bakeoff.serve.load import LoadRun
from bakeoff.serve.objectives import ServiceJudgement, latency_series

__all__ = ["MAX_RETRY_SCALE", "RateSearch", "SearchPlan", "SearchStep", "retry_scale", "search_rate", "step_verdict"]


@dataclass(frozen=True)
class SearchPlan:
    """How a service's search runs (:func:`bakeoff.serve.measure.measure_service` runs it): from
    ``start`` per second, at most ``steps`` load runs; ``traffic(rate, scale)`` gives one step's
    request bodies and their planned send times (``scale`` times its usual count: a retried step
    sends more), ``judge(run, rate)`` its judgement."""

    start: float
    steps: int
    traffic: Callable[[float, int], tuple[Sequence[Any], Sequence[float]]]
    judge: Callable[[LoadRun, float], ServiceJudgement]


@dataclass(frozen=True)
class SearchStep(Value):
    """One offered ``rate``'s load run: ``verdict`` ``met`` (every objective met), ``not_met`` (one
    not met), or ``unknown`` (``reason``: why it could not decide); its ``requests``, the
    ``p99_ms`` from the schedule (None: none answered) and its ``goodput`` per second."""

    rate: float
    verdict: str
    requests: int
    reason: str = ""
    p99_ms: float | None = None
    goodput: float = 0.0


@dataclass(frozen=True)
class RateSearch(Value):
    """The search's ``steps`` in order and its bracket: ``low`` the highest rate met (None: none
    was), ``high`` the lowest rate not met (None: none failed); ``stopped`` says why it ended."""

    steps: tuple[SearchStep, ...]
    low: float | None
    high: float | None
    stopped: str

    @property
    def text(self) -> str:
        """The answer in words, with the figures beside it."""
        if self.low is not None and self.high is not None and self.low >= self.high:
            return f"not found ({self.stopped})"
        if self.low is not None and self.high is not None:
            return f"between {self.low:.3g}/s and {self.high:.3g}/s"
        if self.low is not None:
            return f"at least {self.low:.3g}/s (no rate tried was too high)"
        if self.high is not None:
            return f"below {self.high:.3g}/s (no rate tried met every objective)"
        return "not found (no step could decide)"


def step_verdict(judgement: ServiceJudgement) -> tuple[str, str]:
    """A step's verdict from its judgement: ``met``, ``not_met`` (one objective not met, whatever
    the others say) or ``unknown``, with the reason."""
    if not judgement.valid:
        return "unknown", "not judged: " + "; ".join(judgement.invalid_reasons)
    verdicts = [v.verdict for v in judgement.objectives]
    if not verdicts:
        return "unknown", "no objectives to judge"
    if "not_met" in verdicts:
        failed = [v.requirement.text for v in judgement.objectives if v.verdict == "not_met"]
        return "not_met", f"not met: {', '.join(failed)}"
    if all(v == "met" for v in verdicts):
        return "met", "every objective met"
    unsure = [v.reason for v in judgement.objectives if v.verdict != "met"]
    return "unknown", "; ".join(unsure)


#: The most a retried step's requests are multiplied by.
MAX_RETRY_SCALE = 4


def retry_scale(judgement: ServiceJudgement) -> int | None:
    """How many times more requests a step that could not decide is tried with: enough for the
    effective requests its percentiles fell short of (correlated latencies count as fewer), with
    a margin of 30%, at least twice; None when that is over :data:`MAX_RETRY_SCALE` times its
    first count (the retry would not decide either)."""
    short = [
        found.needed / max(found.effective, 1.0)
        for verdict in judgement.objectives
        if (series := latency_series(verdict.requirement.metric)) is not None
        and (found := judgement.quantile(series[1], series[0])) is not None
        and not found.claimable
    ]
    scale = max(2, math.ceil(max(short, default=0.0) * 1.3))
    return scale if scale <= MAX_RETRY_SCALE else None


def search_rate(
    measure: Callable[[float, int], ServiceJudgement],
    start: float,
    *,
    max_steps: int = 8,
    precision: float = 0.25,
    first: ServiceJudgement | None = None,
) -> RateSearch:
    """Search the highest rate within the objectives (see the module docstring); ``measure``
    sends one step's traffic at the rate it is given (``scale`` times its usual requests) and
    returns its judgement. A step that cannot decide is tried once more with more requests
    (:func:`retry_scale`; a percentile's interval narrows with more of them) before the search
    ends there. ``first``: a judgement already made at ``start`` (the run's measured traffic),
    taken as the first step when it decided (it counts as one of ``max_steps``).

    Raises:
        ValueError: ``start`` not positive and finite, fewer than one step, or ``precision``
            not positive.
    """
    if not (math.isfinite(start) and start > 0) or max_steps < 1 or precision <= 0:
        raise ValueError(f"a search from {start}/s in {max_steps} steps to {precision}: out of range")
    steps: list[SearchStep] = []
    low: float | None = None
    high: float | None = None
    rate = start
    stopped = f"the step limit ({max_steps}) was reached"
    retried = 0
    for number in range(max_steps):
        reuse = number == 0 and first is not None and step_verdict(first)[0] != "unknown"
        judgement = first if reuse and first is not None else measure(rate, retried or 1)
        verdict, reason = step_verdict(judgement)
        p99 = judgement.quantile(99.0)
        steps.append(
            SearchStep(rate, verdict, judgement.requests, reason, p99.value_ms if p99 else None, judgement.goodput)
        )
        if verdict == "met":
            low = rate if low is None else max(low, rate)
        elif verdict == "not_met":
            high = rate if high is None else min(high, rate)
        elif not retried:
            retried = retry_scale(judgement) or 0
            if retried:
                continue
            stopped = (
                f"a step could not decide at {rate:.3g}/s, and {MAX_RETRY_SCALE} times its requests "
                "would be too few for its percentile"
            )
            break
        else:
            stopped = f"a step could not decide at {rate:.3g}/s, twice"
            break
        retried = 0
        if low is not None and high is not None and low >= high:  # met above a rate that was not
            stopped = f"not monotone: met at {low:.3g}/s, not met at {high:.3g}/s"
            break
        if low is not None and high is not None and high / low <= 1 + precision:
            stopped = f"the bracket is within {precision * 100:g}%"
            break
        if low is None:
            assert high is not None
            rate = high / 2
        elif high is None:
            rate = low * 2
        else:
            rate = math.sqrt(low * high)
    return RateSearch(tuple(steps), low, high, stopped)
