"""``bakeoff plan``: search the adjustments for the user, within a time budget.

A plan runs trials in stages, each stored in the knowledge base like any trial:

1. **as given**: the targets as the user wrote them, and, with a request profile, each one
   padded to the buckets ``auto`` chooses (up to 4);
2. **variants**: for every option the user did not set, the alternative worth trying: dynamic
   shapes for a compiled target (``dynamic=true``), the engine's float32 precision where an
   engine takes a precision (``precision=f32``); with a profile, every target padded to one
   bucket (the longest request: a single compiled shape).

An option the user set is kept (a backend that needs static shapes was written
``?dynamic=false``: the plan never tries ``dynamic=true`` on it).

The plan keeps its budget. Before each stage it estimates the stage's time: the first from
what its timing alone needs (its sessions times the minimum timed seconds each; start-up and
compiles are unknown until something has run), a later one from the time per session the
earlier stages took; it skips a stage whose estimate does not fit in what is left. A stage that
runs is stopped when the budget runs out: every step is limited to what is left (the trial's
per-step timeout), and the plan raises :class:`BudgetSpent` in its own thread at the budget's
end (:func:`alarm`, a ``SIGALRM`` timer), which ends the trial, its worker processes with it;
a stage stopped so keeps none of its evidence (its trial never returned). The tolerance the
plan states, :data:`STOP_TOLERANCE_S`, is for ending a stopped stage and deciding (a signal
lands between Python instructions: a stage running in this process, ``isolate=False``, is
stopped once a long native call such as a compile returns). Outside the main thread (no
signal can reach it) a stage ends only when its steps do, and the plan says so. Whatever was
left untried is named, with why. The clock and the stop are injectable, so the accounting is tested without timing
anything. The decision is taken over every stage together by the one rule
(:data:`~bakeoff.verdicts.decision.RULE`): a variant that is wrong is never recommended,
however fast. The eager CPU reference is a candidate only when the user listed it: a plan
for ``neuron`` answers how to make ``neuron`` work, and shows the reference for comparison.
The recommended variant's ledger (its adjustments) says what it changed.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace

from bakeoff.results.values import RunResult
from bakeoff.runner.trial import REFERENCE
from bakeoff.settings import TrialSettings
from bakeoff.target.engines import engine_for
from bakeoff.target.spec import Target
from bakeoff.units import duration
from bakeoff.verdicts.decision import label_of
from bakeoff.verdicts.plan import Plan, Stage, plan_decision

__all__ = [
    "STOP_TOLERANCE_S",
    "BudgetSpent",
    "Plan",
    "Stage",
    "alarm",
    "run_plan",
    "sessions_of",
    "variants_of",
]

#: What a plan may take beyond its budget: ending a stage stopped at the budget's end (its
#: worker processes are killed) and deciding over the stages that finished.
STOP_TOLERANCE_S = 15.0
#: The least a step of a stage is given: its timeout never drops to nothing.
_MIN_STEP_S = 1.0


class BudgetSpent(BaseException):
    """The plan's budget ran out while a stage ran. A ``BaseException``, as ``KeyboardInterrupt``
    is: no step of the trial may record it as its own failure and carry on."""


def variants_of(target: Target) -> list[Target]:
    """The alternatives worth trying for options the user left unset (see the module docstring)."""
    found: list[Target] = []
    if target.is_compiled and target.dynamic is None:
        found.append(replace(target, dynamic=True))
    if target.is_compiled and target.precision is None and engine_for(target.backend or "").takes("precision"):
        found.append(replace(target, precision="f32"))
    return found


def sessions_of(targets: Sequence[Target], settings: TrialSettings) -> int:
    """How many sessions a trial of ``targets`` runs: each target, the eager reference when it is
    not among them, each other target padded to buckets when a profile is padded, and all of
    it per replicate (targets that cannot run here are counted too: an estimate errs long)."""
    listed = list(dict.fromkeys(targets))
    padded = settings.profile is not None and settings.pad_to_buckets is not None
    others = sum(1 for t in listed if t != REFERENCE)
    return (len(listed) + (REFERENCE not in listed) + (others if padded else 0)) * settings.replicates


@contextlib.contextmanager
def alarm(seconds: float) -> Iterator[bool]:
    """Raise :class:`BudgetSpent` in this thread after ``seconds`` (a ``SIGALRM`` timer), and
    kill the worker processes the interrupted work had started; yields whether it could arm
    (only the main thread of a POSIX process can: elsewhere it yields False and stops nothing).
    Another user's ``SIGALRM`` handler and timer are given back afterwards."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield False
        return
    import multiprocessing

    before = {child.pid for child in multiprocessing.active_children()}
    armed = [True]

    def spent(_signum: int, _frame: object) -> None:
        if armed[0]:
            armed[0] = False
            raise BudgetSpent(f"the budget ran out ({seconds:.0f} s)")

    previous = signal.signal(signal.SIGALRM, spent)
    outer = signal.setitimer(signal.ITIMER_REAL, max(seconds, 1e-3))
    began = time.monotonic()
    try:
        yield True
    except BudgetSpent:
        for child in multiprocessing.active_children():  # the stopped trial's workers, by their ids
            if child.pid not in before:
                child.kill()
                child.join(5)
        raise
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous if previous is not None else signal.SIG_DFL)
        if outer[0] > 0:  # someone else's timer: what is left of it
            signal.setitimer(signal.ITIMER_REAL, max(outer[0] - (time.monotonic() - began), 1e-3), outer[1])


def _longest(settings: TrialSettings) -> str | None:
    """One bucket: the profile's longest request, when it has more than one length."""
    if settings.profile is None or len({r.seq for r in settings.profile.shapes}) < 2:
        return None
    return str(max(r.seq for r in settings.profile.shapes))


def _measured_sessions(run: RunResult, replicates: int) -> int:
    """The sessions a stage's run actually ran (a target skipped as unavailable ran none)."""
    return max(sum(1 for r in run.results if r.status != "skipped") * replicates, 1)


def run_plan(
    trial: Callable[[Sequence[Target], TrialSettings], RunResult],
    workload: str,
    targets: Sequence[Target],
    settings: TrialSettings,
    budget_s: float,
    say: Callable[[str], None] = lambda _line: None,
    tag: Callable[[str], str] | None = None,
    *,
    clock: Callable[[], float] = time.monotonic,
    stop: Callable[[float], AbstractContextManager[bool]] = alarm,
) -> Plan:
    """Run the stages (each through ``trial``, which stores its run) within ``budget_s`` and
    decide over all of them. ``tag(run_id)`` tags a stage's run with the plan's tag (named
    after the first stage's run) and returns it; each run is tagged as soon as it is stored, so
    a plan interrupted in its second stage leaves its first stage's run tagged. ``clock`` (in
    seconds) and ``stop`` (:func:`alarm`'s shape: stops the work inside it after so many
    seconds by raising :class:`BudgetSpent`) are the seams the budget is kept through."""
    name = ""
    started = clock()
    left = lambda: budget_s - (clock() - started)  # noqa: E731
    stages: list[Stage] = []
    runs: list[RunResult] = []
    notes: list[str] = []
    per_session: list[float] = []  # seconds per session, from each stage that ran

    def attempt(number: int, title: str, names: tuple[str, ...], buckets: str | None, tried: list[Target],
                stage: TrialSettings, estimate: float, what: str, starting: str) -> None:  # fmt: skip
        nonlocal name
        remaining = left()
        expected = f"estimated {what}{duration(estimate * 1e3)}"
        if estimate > remaining:
            reason = f"{expected}, more than the {duration(max(remaining, 0) * 1e3)} of the budget left"
            say(f"plan stage {number} skipped: {reason}")
            stages.append(Stage(title, names, buckets, skipped=reason, estimate_s=estimate, left_s=remaining))
            return
        say(f"plan stage {number} of 2: {starting} ({expected}, {duration(remaining * 1e3)} of the budget left)")
        begun, run = clock(), None
        try:
            with stop(remaining) as armed:
                if not armed and not notes:
                    notes.append(
                        "no stop at the budget's end here (only the main thread can be interrupted): a stage "
                        "ends when its steps do, each limited to what was left of the budget"
                    )
                limit = min(settings.timeout_s, max(remaining, _MIN_STEP_S))  # every step: at most what is left
                run = trial(tried, replace(stage, timeout_s=limit))
        except BudgetSpent:
            if run is None:  # the budget ran out before the trial returned
                used = clock() - begun
                reason = (
                    f"stopped after {duration(used * 1e3)}, when the budget ran out, before its trial finished: "
                    "none of its evidence is kept"
                )
                say(f"plan stage {number} {reason}")
                stages.append(Stage(title, names, buckets, seconds=used, estimate_s=estimate, left_s=remaining,
                                    stopped=reason))  # fmt: skip
                return
        runs.append(run)
        name = tag(run.run_id) if tag is not None else name
        seconds = clock() - begun
        per_session.append(seconds / _measured_sessions(run, stage.replicates))
        stages.append(Stage(title, names, buckets, run.run_id, seconds, estimate_s=estimate, left_s=remaining))

    given = list(targets)
    first = settings  # buckets the user asked for are kept; with a profile and none asked, auto
    if settings.profile is not None and settings.pad_to_buckets is None:
        first = replace(settings, pad_to_buckets="auto")
    padded = ", and padded to buckets" if first.pad_to_buckets else ""
    floor = sessions_of(given, first) * first.timing.min_seconds  # what its timing alone needs
    attempt(1, "as given", tuple(t.spec for t in given), first.pad_to_buckets, given, first, floor, "at least ",
            f"{len(given)} target(s) as given{padded}")  # fmt: skip

    variants = [v for t in given for v in variants_of(t) if v.spec not in {g.spec for g in given}]
    single = _longest(settings)
    second = replace(settings, pad_to_buckets=single, max_buckets=1)
    tried = list(dict.fromkeys([*variants, *(given if single else [])]))
    if tried:
        names = tuple(v.spec for v in variants) + ((f"padded to {single}",) if single else ())
        if not per_session:  # nothing measured to estimate from: the first stage did not finish
            how = "was stopped" if stages[0].stopped else "did not run"
            reason = f"the first stage {how}: nothing to estimate its time from"
            say(f"plan stage 2 skipped: {reason}")
            stages.append(Stage("variants", names, single, skipped=reason, left_s=left()))
        else:
            estimate = max(per_session) * sessions_of(tried, second)
            starting = f"{len(variants)} variant(s)" + (f", and padded to {single}" if single else "")
            attempt(2, "variants", names, single, tried, second, estimate, "", starting)
    decision = plan_decision(runs)
    chosen = next((r for run in runs for r in run.results if label_of(r) == decision.target), None)
    ledger = chosen.adjustments if chosen is not None else ()
    untried = tuple(f"{', '.join(s.targets)} ({s.name}): {s.untried}" for s in stages if s.untried)
    return Plan(workload, tuple(stages), decision, ledger, budget_s, clock() - started, name, untried,
                STOP_TOLERANCE_S, tuple(notes))  # fmt: skip
