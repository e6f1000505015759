"""A plan keeps its budget: the accounting of :func:`bakeoff.runner.plan.run_plan` on a fake
clock, with fake trials that take known times and a stop that fires on that clock. Nothing here
is timed, so no machine's speed can move an answer."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence

import pytest
from tests.revisit_data import environment, make_run, target_result

from bakeoff.results.values import RunResult
from bakeoff.runner.plan import STOP_TOLERANCE_S, BudgetSpent, alarm, run_plan, sessions_of
from bakeoff.settings import TrialSettings
from bakeoff.target.spec import Target, parse_target

GIVEN = [parse_target("cpu+inductor")]
#: min_seconds 2: the first stage (the reference, cpu+inductor and it padded) needs 6 s of timing
SETTINGS = TrialSettings.from_options(profile="seq=4,8", min_seconds=2.0, isolate=False)
VARIANTS = "cpu+inductor?dynamic=true, padded to 8 (variants)"


class Clock:
    """Seconds that pass only when a fake trial spends them."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Stop:
    """:func:`alarm`'s shape on the fake clock: a trial that would run past the deadline is
    stopped exactly at it. ``armed`` False plays a plan outside the main thread."""

    def __init__(self, clock: Clock, armed: bool = True) -> None:
        self.clock, self.armed = clock, armed
        self.deadline: float | None = None
        self.given: list[float] = []

    @contextlib.contextmanager
    def __call__(self, seconds: float) -> Iterator[bool]:
        self.given.append(seconds)
        self.deadline = self.clock.now + seconds if self.armed else None
        try:
            yield self.armed
        finally:
            self.deadline = None


class Trials:
    """Fake stage trials: the n-th takes ``takes[n]`` seconds of the clock and returns a run of
    correct results (cpu+inductor twice the reference's speed)."""

    def __init__(self, clock: Clock, stop: Stop, takes: Sequence[float]) -> None:
        self.clock, self.stop, self.takes = clock, stop, list(takes)
        self.calls: list[tuple[tuple[str, ...], TrialSettings]] = []

    def __call__(self, targets: Sequence[Target], settings: TrialSettings) -> RunResult:
        seconds = self.takes[len(self.calls)]
        self.calls.append((tuple(t.spec for t in targets), settings))
        deadline = self.stop.deadline
        if deadline is not None and self.clock.now + seconds > deadline:
            self.clock.now = deadline
            raise BudgetSpent("the budget ran out")
        self.clock.now += seconds
        results = [target_result("cpu")] + [target_result(t.spec, 1.0, reference=2.0) for t in targets]
        if settings.pad_to_buckets:  # each padded too, as a trial with a profile runs them
            pad = [{"name": "pad to buckets", "value": [8]}]
            results += [target_result(t.spec, 1.0, reference=2.0, variant="bucketed", adjustments=pad) for t in targets]
        return make_run(f"run{len(self.calls)}", "2025-01-01T00:00:00+00:00", environment(), tuple(results),
                        settings={"reference": "cpu", "reference_added": True})  # fmt: skip


def _plan(budget: float, takes: Sequence[float], settings: TrialSettings = SETTINGS, armed: bool = True):
    clock = Clock()
    stop = Stop(clock, armed)
    trials = Trials(clock, stop, takes)
    tags: list[str] = []

    def tag(run_id: str) -> str:
        tags.append(run_id)
        return f"plan-{tags[0]}"

    plan = run_plan(trials, "arch:llama", GIVEN, settings, budget, tag=tag, clock=clock, stop=stop)
    return plan, trials, stop


def _keeps_its_accounting(plan) -> None:
    """What every plan's record must show: no stage started on an estimate beyond what was
    left, the stages' times add up within the plan's, and the plan within its budget."""
    for stage in plan.stages:
        if stage.run_id or stage.stopped:
            assert stage.estimate_s is not None and stage.estimate_s <= stage.left_s
        else:
            assert stage.skipped and not stage.seconds
    assert sum(s.seconds for s in plan.stages) <= plan.seconds + 1e-9
    assert plan.seconds <= plan.budget_s + plan.tolerance_s
    assert [line.split(":")[0] for line in plan.untried] == [
        f"{', '.join(s.targets)} ({s.name})" for s in plan.stages if s.untried
    ]


def test_a_plan_that_fits_runs_every_stage_and_leaves_nothing_untried():
    plan, trials, stop = _plan(600, [60, 90])
    assert [s.run_id for s in plan.stages] == ["run1", "run2"] and plan.untried == ()
    assert plan.seconds == 150 and plan.tolerance_s == STOP_TOLERANCE_S
    # the first stage's estimate is its timing floor: 3 sessions x 2 s; the second's, 20 s per
    # session measured in the first times its 5 sessions (the reference, 2 variants, each padded)
    assert [s.estimate_s for s in plan.stages] == [6.0, 100.0]
    assert [s.left_s for s in plan.stages] == [600, 540]
    assert stop.given == [600, 540]  # each stage is stopped at the budget's end
    assert [settings.timeout_s for _, settings in trials.calls] == [600, 540]  # and each step too
    _keeps_its_accounting(plan)


def test_a_stage_that_would_not_fit_is_skipped_and_named():
    plan, trials, _ = _plan(120, [60, 90])
    assert len(trials.calls) == 1  # the second stage never started
    variants = plan.stages[1]
    assert (variants.run_id, variants.skipped) == ("", "estimated 100 s, more than the 60 s of the budget left")
    assert plan.untried == (f"{VARIANTS}: estimated 100 s, more than the 60 s of the budget left",)
    assert plan.seconds == 60 and plan.decision.target == "cpu+inductor"  # decided on what ran
    _keeps_its_accounting(plan)


def test_a_stage_that_overruns_its_estimate_is_stopped_at_the_budget():
    plan, trials, _ = _plan(100, [15, 500])  # 5 s per session: 25 s estimated, 500 s taken
    assert len(trials.calls) == 2 and plan.seconds == 100  # stopped at the budget, not at 515 s
    stopped = plan.stages[1]
    assert stopped.run_id == "" and stopped.seconds == 85 and stopped.stopped.startswith("stopped after 85 s")
    assert plan.untried == (f"{VARIANTS}: {stopped.stopped}",)
    assert plan.decision.target == "cpu+inductor" and plan.tag == "plan-run1"  # the first stage's evidence
    _keeps_its_accounting(plan)


def test_a_first_stage_stopped_leaves_the_rest_untried_and_nothing_decided():
    plan, trials, _ = _plan(60, [500])
    assert len(trials.calls) == 1 and plan.seconds == 60
    assert plan.stages[0].stopped and plan.stages[1].skipped == (
        "the first stage was stopped: nothing to estimate its time from"
    )
    assert len(plan.untried) == 2 and plan.tag == ""
    assert (plan.decision.outcome, plan.decision.target) == ("none", None)
    _keeps_its_accounting(plan)


def test_a_first_stage_whose_timing_alone_exceeds_the_budget_never_starts():
    slow = TrialSettings.from_options(profile="seq=4,8", min_seconds=30.0, isolate=False)
    plan, trials, _ = _plan(60, [], slow)
    assert trials.calls == []
    assert plan.stages[0].skipped == "estimated at least 90 s, more than the 60 s of the budget left"
    assert plan.stages[1].skipped == "the first stage did not run: nothing to estimate its time from"
    _keeps_its_accounting(plan)


def test_without_a_stop_the_plan_says_so_and_limits_each_step():
    plan, trials, _ = _plan(100, [15, 500], armed=False)  # the seeded fault: nothing stops the stage
    assert plan.seconds == 515 and plan.seconds > plan.budget_s + plan.tolerance_s  # the overrun is real
    assert plan.notes and plan.notes[0].startswith("no stop at the budget's end here")
    assert trials.calls[1][1].timeout_s == 85  # each step is still limited to what was left
    # the control: with the stop, the same plan keeps its budget and says nothing of the kind
    kept, _, _ = _plan(100, [15, 500])
    assert kept.seconds == 100 and kept.notes == ()


def test_sessions_count_the_reference_padding_and_replicates():
    cpu1, inductor = parse_target("cpu?threads=1"), parse_target("cpu+inductor")
    assert sessions_of([inductor], TrialSettings()) == 2  # and the reference
    assert sessions_of([parse_target("cpu"), inductor], TrialSettings()) == 2  # the reference listed
    assert sessions_of([cpu1, inductor], SETTINGS) == 3  # no padding asked for
    padded = TrialSettings.from_options(profile="seq=4,8", pad_to_buckets="auto", replicates=2)
    assert sessions_of([cpu1, inductor], padded) == (3 + 2) * 2


def test_the_alarm_stops_the_work_inside_it_and_gives_back_the_signal():
    import signal
    import time

    before = signal.getsignal(signal.SIGALRM)
    with pytest.raises(BudgetSpent), alarm(0.05) as armed:
        assert armed
        time.sleep(5)  # interrupted: no time is asserted, only that it was stopped
    assert signal.getsignal(signal.SIGALRM) is before and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    with alarm(30) as armed:  # the control: work that ends in time is not stopped
        assert armed
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    found: list[bool] = []

    def elsewhere() -> None:
        with alarm(0.01) as armed:
            found.append(armed)

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert found == [False]  # outside the main thread nothing can be interrupted: it says so


@pytest.mark.isolated
def test_a_stage_stopped_by_the_alarm_leaves_no_worker_behind():
    import time

    from bakeoff.launch.process import Worker

    kept = Worker()  # the control: a worker started before the stage is not the stage's to end
    started: list[Worker] = []
    try:
        with pytest.raises(BudgetSpent), alarm(0.5):
            started.append(Worker(("torch",)))
            started[0].wait_ready(120)
            time.sleep(120)  # the stage's work, stopped whenever the alarm comes
        assert not started[0].process.is_alive()
        assert kept.process.is_alive()
    finally:
        for worker in [kept, *started]:
            worker.close(kill=True)


def test_the_plan_says_what_it_left_untried_and_why():
    import io

    from rich.console import Console

    from bakeoff.report.terminal import plan_view

    plan, _, _ = _plan(100, [15, 500])
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(plan_view(plan))
    shown = console.export_text()
    assert "plan arch:llama: 100 s of a 100 s budget\n" in shown
    assert "  as given: cpu+inductor (buckets auto) [run run1, 15 s (estimated at least 6000 ms)]" in shown
    assert "  variants: cpu+inductor?dynamic=true, padded to 8 (buckets 8) [stopped after 85 s]" in shown
    assert f"  left untried: {VARIANTS}: stopped after 85 s, when the budget ran out, before its trial" in shown
    document = plan.to_dict()  # --format json
    assert document["untried"] == list(plan.untried) and document["tolerance_s"] == STOP_TOLERANCE_S
    assert document["stages"][1]["stopped"] == plan.stages[1].stopped
    # the control: a plan that ran everything names nothing as untried
    whole, _, _ = _plan(600, [60, 90])
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(plan_view(whole))
    assert "untried" not in console.export_text()
