"""``bakeoff plan``: search the adjustments for the user, within a time budget.

A plan runs trials in stages, each stored in the knowledge base like any trial:

1. **as given**: the targets as the user wrote them, and, with a request profile, each one
   padded to the buckets ``auto`` chooses (up to 4);
2. **variants**: for every option the user did not set, the alternative worth trying: dynamic
   shapes for a compiled target (``dynamic=true``), the engine's float32 precision where an
   engine takes a precision (``precision=f32``); with a profile, every target padded to one
   bucket (the longest request: a single compiled shape).

An option the user set is kept (a backend that needs static shapes was written
``?dynamic=false``: the plan never tries ``dynamic=true`` on it). Before each stage the plan
estimates its time from the first stage's time per target and skips it, saying so, when it
would not fit in what is left of the budget; every step of a stage is also limited to what is
left. The decision is taken over every stage together by the one rule
(:data:`~bakeoff.verdicts.decision.RULE`): a variant that is wrong is never recommended,
however fast. The eager CPU reference is a candidate only when the user listed it: a plan
for ``neuron`` answers how to make ``neuron`` work, and shows the reference for comparison.
The recommended variant's ledger (its adjustments) says what it changed.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from bakeoff.errors import SpecError
from bakeoff.results.values import RunResult
from bakeoff.settings import TrialSettings
from bakeoff.target.engines import engine_for
from bakeoff.target.spec import Target
from bakeoff.verdicts.decision import label_of
from bakeoff.verdicts.plan import Plan, Stage, plan_decision

__all__ = ["Plan", "Stage", "parse_budget", "run_plan", "variants_of"]

_BUDGET = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|min|m|h)?\s*$")
_SECONDS = {"s": 1, "sec": 1, None: 1, "min": 60, "m": 60, "h": 3600}
#: The least a stage may be given: below this, a compile alone would not finish.
MIN_STAGE_S = 30.0


def parse_budget(text: str) -> float:
    """``10min``, ``90s``, ``1.5h`` or a number of seconds -> seconds.

    Raises:
        SpecError: anything else, or a budget under a minute.
    """
    found = _BUDGET.match(text)
    if found is None:
        raise SpecError(f"budget {text!r} is not a duration", hint="e.g. --budget 10min, 90s or 1h")
    seconds = float(found.group(1)) * _SECONDS[found.group(2)]
    if seconds < 60:
        raise SpecError(f"budget {text!r} is under a minute", hint="give a plan at least --budget 1min")
    return seconds


def variants_of(target: Target) -> list[Target]:
    """The alternatives worth trying for options the user left unset (see the module docstring)."""
    found: list[Target] = []
    if target.is_compiled and target.dynamic is None:
        found.append(replace(target, dynamic=True))
    if target.is_compiled and target.precision is None and engine_for(target.backend or "").takes("precision"):
        found.append(replace(target, precision="f32"))
    return found


def _longest(settings: TrialSettings) -> str | None:
    """One bucket: the profile's longest request, when it has more than one length."""
    if settings.profile is None or len({r.seq for r in settings.profile.shapes}) < 2:
        return None
    return str(max(r.seq for r in settings.profile.shapes))


def run_plan(
    trial: Callable[[Sequence[Target], TrialSettings], RunResult],
    workload: str,
    targets: Sequence[Target],
    settings: TrialSettings,
    budget_s: float,
    say: Callable[[str], None] = lambda _line: None,
    tag: Callable[[str], str] | None = None,
) -> Plan:
    """Run the stages (each through ``trial``, which stores its run) within ``budget_s`` and
    decide over all of them. ``tag(run_id)`` tags a stage's run with the plan's tag (named
    after the first stage's run) and returns it; each run is tagged as soon as it is stored, so
    a plan interrupted in its second stage leaves its first stage's run tagged."""
    name = ""
    started = time.monotonic()
    left = lambda: budget_s - (time.monotonic() - started)  # noqa: E731
    stages: list[Stage] = []
    runs: list[RunResult] = []
    given = list(targets)
    first = settings  # buckets the user asked for are kept; with a profile and none asked, auto
    if settings.profile is not None and settings.pad_to_buckets is None:
        first = replace(settings, pad_to_buckets="auto")
    padded = ", and padded to buckets" if first.pad_to_buckets else ""
    say(f"plan stage 1 of 2: {len(given)} target(s) as given{padded}")
    run = trial(given, replace(first, timeout_s=min(settings.timeout_s, max(left(), MIN_STAGE_S))))
    runs.append(run)
    name = tag(run.run_id) if tag is not None else name
    per_target = (time.monotonic() - started) / max(len(run.results), 1)
    specs = tuple(t.spec for t in given)
    stages.append(Stage("as given", specs, first.pad_to_buckets, run.run_id, time.monotonic() - started))

    variants = [v for t in given for v in variants_of(t) if v.spec not in {g.spec for g in given}]
    single = _longest(settings)
    second = replace(settings, pad_to_buckets=single, max_buckets=1)
    tried = list(dict.fromkeys([*variants, *(given if single else [])]))
    if tried:
        names = tuple(v.spec for v in variants) + ((f"padded to {single}",) if single else ())
        estimate = per_target * (len(tried) * (2 if single else 1) + 1)  # padded variants, and the reference
        if estimate > left():
            reason = f"estimated {estimate:.0f} s, {max(left(), 0):.0f} s of the budget left"
            say(f"plan stage 2 skipped: {reason}")
            stages.append(Stage("variants", names, single, skipped=reason))
        else:
            say(f"plan stage 2 of 2: {len(variants)} variant(s)" + (f", and padded to {single}" if single else ""))
            begun = time.monotonic()
            run = trial(tried, replace(second, timeout_s=min(settings.timeout_s, max(left(), MIN_STAGE_S))))
            runs.append(run)
            name = tag(run.run_id) if tag is not None else name
            stages.append(Stage("variants", names, single, run.run_id, time.monotonic() - begun))
    decision = plan_decision(runs)
    chosen = next((r for run in runs for r in run.results if label_of(r) == decision.target), None)
    ledger = chosen.adjustments if chosen is not None else ()
    return Plan(workload, tuple(stages), decision, ledger, budget_s, time.monotonic() - started, name)
