"""Which environment change causes a regression: the verdicts of ``bakeoff regressions --bisect``.

A regression between two runs comes with a list of what differs between their environments
(:class:`~bakeoff.verdicts.regressions.EnvironmentDiff`), never tested as causes. Bisection
tests them: the "after" run's trial is repeated here as it is (the *control*, once before the
changes and once after them), and once more per change with that change alone put back to the
"before" run's value (:mod:`bakeoff.runner.bisect` does the running). Pure functions over the
timing samples that gives; every verdict comes from those measurements.

The figure is the target's median single-stream latency. Each change's run is compared with
the controls' pooled samples: the ratio control / variant with its bootstrap interval, widened
by how far the two controls differ from each other (each trial is its own process at its own
time, and the controls show what that alone moves; at least by :data:`PROCESS_FLOOR`). With
``t`` the latency threshold:

* **moves it back**: the whole interval is above ``1 + t``: putting this change back makes the
  target faster by more than the threshold;
* **no effect**: the whole interval is within ``1 / (1 + t)`` .. ``1 + t``;
* **makes it worse**: the whole interval is below ``1 / (1 + t)``;
* **not conclusive**: anything else (measure on a quieter machine).

First of all, the controls must show the regression: their samples against the "before" run's
(``reproduced``: at least half the regression on a log scale, and more than the threshold). If
the trial as it is now runs as fast as the before run, or only a little slower than it, no
environment change is the cause; the difference was the machine's state when one of them ran.
A change measured faster than the controls then moves back nothing: it is ``not conclusive``
(:func:`within_reproduction`), its figures kept.

What it cannot see: two changes that only matter together (each is put back alone), a change
of what bisect cannot put back (the machine, the Python version, a package that was added), and
anything that differs between this machine now and the one the after run ran on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from bakeoff.analysis.compare import ratio_of_medians
from bakeoff.codec import Value
from bakeoff.stats import percentile
from bakeoff.units import duration

__all__ = [
    "PROCESS_FLOOR",
    "BisectStep",
    "Bisection",
    "conclude",
    "control_spread",
    "judge_change",
    "put_back",
    "reproduced",
    "within_reproduction",
]


@dataclass(frozen=True)
class BisectStep(Value):
    """One environment change, put back alone (or why it was not), and what that did.

    ``speedup`` is control / this run's median with its widened interval (``value``, ``low``,
    ``high``); ``verdict`` one of the module docstring's, ``not tested`` (``why`` says why) or
    ``failed`` (the trial did not give a timing: ``why`` says what happened).
    """

    key: str
    before: Any
    after: Any
    verdict: str
    why: str = ""
    run_id: str | None = None
    p50_ms: float | None = None
    speedup: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Bisection(Value):
    """The bisection of one regressed workload + target (see the module docstring)."""

    workload: str
    target: str
    before_run: str
    after_run: str
    before_p50_ms: float
    after_p50_ms: float
    control_p50_ms: float | None
    control_spread: float | None
    reproduced: str
    steps: tuple[BisectStep, ...]
    conclusion: str


def put_back(key: str, before: Any, after: Any) -> str | None:
    """Why change ``key`` cannot be put back alone here (None: it can). Packages are installed
    at their before version in a throwaway directory; environment variables are set (or unset)
    in the trial's process."""
    if key.startswith("env."):
        return None
    if key == "torch" or key.startswith("packages."):
        if before is None:
            return "added since the before run: removing a package is not tried"
        return None
    return "the machine's or the interpreter's: bisect puts back packages and environment variables only"


def control_spread(controls: Sequence[Sequence[float]]) -> float:
    """How far the control runs' medians differ, as ``|ln(a / b)|`` of the two furthest apart:
    what running the same trial twice moves on this machine."""
    medians = [percentile(c, 50) for c in controls if c]
    if len(medians) < 2 or min(medians) <= 0:
        return 0.0
    return abs(math.log(max(medians) / min(medians)))


#: The least that separate processes are taken to differ by (``|ln|`` of a ratio of medians),
#: however close the two controls came: about 2.5 standard deviations of the trial's default
#: spread between processes (0.02), since two runs cannot show their own spread.
PROCESS_FLOOR = 0.05


def _widened(faster: Sequence[float], slower: Sequence[float], spread: float) -> dict[str, float]:
    """median(slower) / median(faster) with its bootstrap interval widened by ``spread`` (at
    least :data:`PROCESS_FLOOR`)."""
    est = ratio_of_medians(slower, faster)
    spread = max(spread, PROCESS_FLOOR)
    return {"value": est.value, "low": est.low * math.exp(-spread), "high": est.high * math.exp(spread)}


def judge_change(
    control: Sequence[float], variant: Sequence[float], spread: float, threshold: float
) -> tuple[str, dict[str, float]]:
    """The verdict on one change put back (see the module docstring) and control / variant."""
    ratio = _widened(variant, control, spread)
    if ratio["low"] > 1 + threshold:
        return "moves it back", ratio
    if ratio["high"] < 1 / (1 + threshold):
        return "makes it worse", ratio
    if ratio["low"] > 1 / (1 + threshold) and ratio["high"] < 1 + threshold:
        return "no effect", ratio
    return "not conclusive", ratio


def reproduced(
    before: Sequence[float], control: Sequence[float], spread: float, threshold: float, regression: float
) -> str:
    """Whether the trial as it is now still shows the regression against the before run, with one
    bar for both answers: more than the threshold and than half the regression (``regression``:
    after / before, halved on a log scale). ``yes`` when the whole interval of control / before
    is above the bar, ``no`` when it is below, else ``not conclusive``.

    A control a little slower than the before run (a busier machine now; a fresh process against
    a run in a warm one) does not reproduce a regression many times larger: with the threshold
    alone as the bar for ``yes``, a control 1.3x the before run "reproduced" a 6x regression."""
    ratio = _widened(before, control, spread)  # control / before: above 1 is slower now
    bar = max(1 + threshold, math.sqrt(max(regression, 1.0)))
    if ratio["low"] > bar:
        return "yes"
    if ratio["high"] < bar:
        return "no"
    return "not conclusive"


def within_reproduction(still: str, steps: Sequence[BisectStep]) -> tuple[BisectStep, ...]:
    """``steps`` as judged once ``still`` (:func:`reproduced`) is known: where the regression
    does not reproduce here, no change put back moves it back (a step measured faster than the
    controls on a busy machine said so beside a conclusion naming no cause), so such a step is
    ``not conclusive``, its figures kept and the reason given."""
    if still != "no":
        return tuple(steps)
    why = "the regression does not reproduce here now, so there is nothing for this change to move back"
    return tuple(replace(s, verdict="not conclusive", why=why) if s.verdict == "moves it back" else s for s in steps)


def _named(step: BisectStep) -> str:
    """``transformers 5.24.0 -> 5.23.0``: the change as it was put back."""
    after, before = ("unset" if v is None else v for v in (step.after, step.before))
    return f"{step.key.removeprefix('packages.')} {after} -> {before}"


def conclude(
    still: str,
    steps: Sequence[BisectStep],
    control_ms: float | None,
    before_ms: float,
    after_ms: float,
    not_here: Sequence[str] = (),
) -> str:
    """The bisection's answer in one sentence, from the verdicts beside it; ``not_here`` names
    the changes this machine does not have as the after run had them."""
    if still == "no":
        said = (
            f"the regression does not reproduce here now: the trial as it is runs at {duration(control_ms)}, "
            f"against {duration(before_ms)} before and {duration(after_ms)} after"
        )
        if not_here:  # the environment here is not the after run's: that, not the machine's state, is why
            return (
                f"{said}; this machine is not the after run's environment ({', '.join(not_here)} differ from it), "
                "so bisect it where the after run was measured"
            )
        return (
            f"{said}, so no environment change measured here is its cause; the after run was measured in another "
            "state of the machine (load, other processes) or of something bisect cannot put back"
        )
    causes = [s for s in steps if s.verdict == "moves it back"]
    prefix = "" if still == "yes" else "the regression is not clearly reproduced here (not conclusive); "
    if causes:
        said = "; ".join(
            f"putting back {_named(s)} alone gives {duration(s.p50_ms)} against {duration(control_ms)} as it is "
            f"(x{s.speedup['value']:.2f} faster, {s.speedup['low']:.2f}-{s.speedup['high']:.2f})"
            for s in causes
        )
        return f"{prefix}{'the cause' if len(causes) == 1 else 'each moves it'}: {said}"
    open_ = [s for s in steps if s.verdict in ("not conclusive", "failed")]
    untested = [s for s in steps if s.verdict == "not tested"]
    parts = ["no change put back alone moves the figure back"]
    if open_:
        parts.append(f"not conclusive for {', '.join(s.key for s in open_)}")
    if untested:
        parts.append(f"not tested: {', '.join(s.key for s in untested)}")
    parts.append("the cause may be two changes together, or one bisect cannot put back")
    return prefix + "; ".join(parts)
