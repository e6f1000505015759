"""A trial: one workload against several targets, measured against one baseline.

The eager CPU target is always measured as the *reference* in the same run (added if the
user did not list it), so every speed figure is a ratio measured under the same conditions.

What libraries say while this process builds the workload, runs it eagerly and computes the
baseline is kept off the terminal like a target's (:mod:`bakeoff.runner.capture`), and counted
in the reference's log under those phases: the reference is where that eager CPU work belongs.
"""

from __future__ import annotations

import itertools
import shutil
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from bakeoff.analysis.buckets import optimal_buckets, padding_waste, power_of_two_buckets
from bakeoff.analysis.compare import (
    break_even_requests,
    ratio_of_medians,
    ratio_of_paired_blocks,
    with_process_spread,
)
from bakeoff.analysis.requirements import Requirement
from bakeoff.env import capture_environment
from bakeoff.errors import SpecError
from bakeoff.launch.tempdirs import owned_tempdir
from bakeoff.results.librarylog import LibraryLog, merge_logs
from bakeoff.results.values import RunResult, TargetResult
from bakeoff.runner.capture import Capture
from bakeoff.runner.job import REFERENCE, TargetJob, with_reference
from bakeoff.runner.keeping import Keeping, ensure_baseline, now, resolve_requirements
from bakeoff.runner.localize import localize_measured, split_off
from bakeoff.runner.reference_job import eager_run, reference_launcher, references_on
from bakeoff.runner.workers import first_wave, preloaded_sessions, session_factory, start_workers
from bakeoff.scenarios.base import ScenarioSpec
from bakeoff.scenarios.registry import parse_scenario, scenario_named
from bakeoff.scenarios.rounds import FirstRound, align, aligned_specs, scenario_rounds
from bakeoff.settings import TrialSettings
from bakeoff.target.detect import unavailable_reason
from bakeoff.target.spec import Target
from bakeoff.verdicts.metrics import check_target
from bakeoff.workload.base import WorkloadSpec, parse_workload
from bakeoff.workload.profile import InputProfile
from bakeoff.workload.registry import build_workload

__all__ = ["REFERENCE", "TrialSettings", "run_trial"]

Progress = Callable[[str], None]


def resolve_buckets(profile: InputProfile | None, buckets: str | None, max_buckets: int) -> dict | None:
    """The buckets to pad to (``auto``: the optimum for the profile) and how they compare.

    Raises:
        SpecError: buckets without a profile, malformed sizes, or a request longer than them.
    """

    if buckets is None:
        return None
    if profile is None:
        raise SpecError("--pad-to-buckets needs an input profile", hint="add --profile, e.g. 'seq=uniform(8,128)&n=50'")
    lengths = [r.seq for r in profile.requests]
    batches = [r.batch for r in profile.requests]
    if buckets == "auto":
        chosen = optimal_buckets(lengths, max_buckets, batches)
    else:
        try:
            chosen = sorted({int(v) for v in buckets.split(",")})
        except ValueError:
            raise SpecError(
                f"--pad-to-buckets {buckets!r} is not 'auto' or a list of sizes",
                hint="e.g. --pad-to-buckets auto or 64,128,256",
            ) from None
        if chosen[0] < 1:
            raise SpecError(f"--pad-to-buckets {buckets!r} has a size below 1", hint="e.g. 64,128,256")
        if max(lengths) > chosen[-1]:
            raise SpecError(
                f"a profile request of length {max(lengths)} exceeds the largest bucket {chosen[-1]}",
                hint=f"add a bucket of at least {max(lengths)}",
            )
    pow2 = power_of_two_buckets(lengths)
    return {
        "mode": buckets,
        "chosen": chosen,
        "waste": padding_waste(lengths, chosen, batches),
        "power_of_two": pow2,
        "power_of_two_waste": padding_waste(lengths, pow2, batches),
    }


def _rounds(result: TargetResult) -> list[tuple[float, ...]]:
    """A result's latency samples split into its timing rounds (empty if they do not add up)."""
    counts = [r["samples"] for r in (result.conditions or {}).get("rounds", ())]
    samples = result.latency.samples_ms if result.latency else ()
    if not counts or sum(counts) != len(samples):
        return []
    edges = [sum(counts[:i]) for i in range(len(counts) + 1)]
    return [samples[lo:hi] for lo, hi in itertools.pairwise(edges)]


def _speedups(
    results: list[TargetResult], reference: Target, interleaved: bool = False, spread: float = 0.0
) -> list[TargetResult]:
    """Speed-up against the reference with a 95% interval, and when compiling pays off.

    Targets timed in turns get a paired block bootstrap (see
    :func:`~bakeoff.analysis.compare.ratio_of_paired_blocks`): over their replicate processes
    when there are several, else over their rounds, which accounts for drift. Either way the
    interval is widened by the between-process ``spread``
    (:func:`~bakeoff.analysis.compare.with_process_spread`): a bootstrap over rounds cannot see
    it, one over a few processes sees too little of it. The reference's own ratio is exactly 1.

    Break-even compares time to first result (preparing, compiling, first call) plus steady
    calls, for the target and the reference alike.
    """
    from bakeoff.runner.replicates import replicate_blocks

    ref = next((r for r in results if r.target == reference and r.variant == "as-is"), None)
    if ref is None or ref.latency is None or not ref.latency.count:
        return results
    updated = []
    for r in results:
        if r.latency is None or not r.latency.count or r.latency.p50_ms <= 0:
            updated.append(r)
            continue
        ref_blocks, blocks = replicate_blocks(ref), replicate_blocks(r)
        processes = (max(len(ref_blocks), 1), max(len(blocks), 1))
        resampled = bool(ref_blocks and blocks)
        if not resampled:  # one process each: pair the rounds instead
            ref_blocks, blocks = _rounds(ref), _rounds(r)
        if interleaved and ref_blocks and blocks:  # timed in turns: pair processes, or rounds
            estimate = ratio_of_paired_blocks(ref_blocks, blocks)
        else:
            estimate = ratio_of_medians(ref.latency.samples_ms, r.latency.samples_ms)
            resampled = False
        if r is not ref:  # the same samples: no process between them
            estimate = with_process_spread(estimate, spread, processes, resampled and interleaved)
        pays_back = None
        if r.target.is_compiled and r.time_to_first_result_ms is not None:
            pays_back = break_even_requests(
                r.time_to_first_result_ms, r.latency.p50_ms, ref.latency.p50_ms, ref.time_to_first_result_ms
            )
        updated.append(replace(r, speedup=estimate.value, speedup_ci=estimate.to_dict(), break_even_requests=pays_back))
    return updated


def _scenarios_for(given: Sequence[ScenarioSpec], requirements: Sequence[Requirement]) -> list[ScenarioSpec]:
    """The scenarios asked for, plus any a requirement needs (with default options), each
    adjusted to the requirements (a server latency requirement is the server sweep's bound
    unless one was given)."""
    chosen = list(given)
    for req in requirements:
        if req.scenario and not scenario_named(req.scenario).always and req.scenario not in {s.name for s in chosen}:
            chosen.append(parse_scenario(req.scenario))
    return [scenario_named(spec.name).for_requirements(spec, requirements) for spec in chosen]


def _with_requirements(result: TargetResult, requirements: Sequence[Requirement]) -> TargetResult:
    if not requirements or result.status == "skipped":
        return result

    checks = check_target(result, list(requirements))
    return replace(result, requirements=tuple(c.to_dict() for c in checks))


def _drive(
    sessions: list[tuple[str, TargetJob]], make: Callable[[TargetJob], Any], interleave: bool, say: Progress
) -> list[TargetResult]:
    """Run every session's steps: round by round across sessions, or one session at a time.

    Without interleaving only one worker lives at a time, and the reference runs first, all its
    scenario rounds included. In turns, the scenarios run in rounds too: round ``k`` on every
    target before round ``k + 1`` on any, in a rotating order, the reference first in the first.
    Either way the server load the reference's first round sets (the rates it swept, its bound
    and the highest rate within it) is every other target's, and its own later rounds': see
    :meth:`~bakeoff.scenarios.server.Server.aligned`. Results come back in the order given.
    """

    order = sorted(range(len(sessions)), key=lambda i: not sessions[i][1].is_reference)
    results: dict[int, TargetResult] = {}
    reference: TargetResult | None = None
    if not interleave:
        from bakeoff.runner.session import run_steps

        for i in order:
            label, job = sessions[i]
            if not job.is_reference:
                job = replace(job, scenarios=aligned_specs(job.scenarios, reference))
            say(f"running {label}")
            results[i] = run_steps(make(job))
            if job.is_reference and job.scenarios:
                reference = results[i]
        return [results[i] for i in range(len(sessions))]
    live = []
    for label, job in sessions:
        say(f"preparing {label}")
        session = make(job)
        session.start()
        live.append(session)
    say(f"timing {len(live)} target(s) in turns")
    active, turn = [s for s in live if not s.timing_done], 0
    while active:
        # rotate the order (A B C, B C A, C A B; with two, A B, B A): each target takes every
        # place in turn, so drift and order effects fall on all alike, and with three or more no
        # target ever follows itself (a warm start the others would not get)
        start = turn % len(active)
        order_now = active[start:] + active[:start]
        finished = {id(s) for s in order_now if s.round()}
        active = [s for s in active if id(s) not in finished]
        turn += 1
    rounds = max((scenario_rounds(job.scenarios) for _, job in sessions), default=0)
    first: FirstRound | None = None  # the reference's first round, once it ran
    for index in range(rounds):
        shift = index % len(order)
        for i in order[shift:] + order[:shift]:  # the reference first in the first round
            (label, job), session = sessions[i], live[i]
            if not job.scenarios:
                continue
            if index == 0 and not job.is_reference:
                align(session, first)
            say(f"scenarios on {label}" + (f", round {index + 1} of {rounds}" if rounds > 1 else ""))
            ran = session.run_scenarios(index)
            if index == 0 and job.is_reference:  # its load is every later round's and target's
                first = FirstRound(ran)
                align(session, first)
    return [live[i].finish() for i in range(len(sessions))]


def run_trial(
    keeping: Keeping | Callable[[], Keeping],
    workload_spec: WorkloadSpec | str,
    targets: Sequence[Target],
    settings: TrialSettings | None = None,
    progress: Progress | None = None,
    pool: Any = None,
    workers: Any = None,
) -> RunResult:
    """Run every target (skipping those that cannot run here) and return the run, unsaved: the
    caller stores it (a sweep with its cell, in one transaction). The baseline and requirements
    are read and kept through ``keeping`` (:mod:`bakeoff.runner.keeping`).

    ``keeping`` may be a callable that opens (and so creates) the knowledge base: it is called
    only once the workload has been built and run eagerly, so a workload refused as bad input
    leaves no new, empty database behind. ``pool`` (a
    :class:`~bakeoff.runner.isolation.SessionPool`) gives isolated targets warm workers kept
    between trials, as a sweep does.

    Without a ``pool``, an isolated trial starts its workers before it builds the workload (see
    :func:`start_workers`; ``workers`` is a pool the caller started so, taken over here), and
    ends them, used or not, when it returns or raises.
    """
    settings = settings or TrialSettings()
    spec = parse_workload(workload_spec) if isinstance(workload_spec, str) else workload_spec
    if pool is not None or not settings.isolate:
        if workers is not None:
            workers.close()
        return _run_trial(keeping, spec, targets, settings, progress, pool)
    try:
        if workers is None:
            workers = start_workers(spec, settings, targets)
        else:
            workers.prestart(first_wave(preloaded_sessions(targets, settings), settings))
        return _run_trial(keeping, spec, targets, settings, progress, workers)
    finally:
        workers.close()


def _run_trial(
    keeping: Keeping | Callable[[], Keeping],
    workload_spec: WorkloadSpec,
    targets: Sequence[Target],
    settings: TrialSettings,
    progress: Progress | None,
    pool: Any,
) -> RunResult:
    say = progress or (lambda _msg: None)
    say("building workload")
    here = str(owned_tempdir("capture"))
    try:
        log = LibraryLog()
        phase = ["workload build"]
        capture = Capture(log, lambda: phase[0], here)

        def said(message: str) -> None:
            with capture.suspended():
                say(message)

        with capture.active(replay_on_error=True):
            workload = build_workload(workload_spec)
            env = capture_environment()
            dtypes = sorted({t.dtype for t in targets if t.dtype} | {workload.dtype})
            profile = settings.profile
            bucket_plan = resolve_buckets(profile, settings.pad_to_buckets, settings.max_buckets)
            if profile is not None:  # fail early, with one clear line, for a workload that cannot vary its inputs
                capture.fold(phase[0])
                phase[0] = "eager run"
                workload.inputs_for(profile.shapes[0].batch, profile.shapes[0].seq)
            elsewhere = reference_launcher(workload_spec) if settings.isolate else None  # None: not forkable
            if callable(keeping):
                capture.fold(phase[0])
                phase[0] = "eager run"
                eager_run(elsewhere, workload, settings.timeout_s, log)  # a crash or hang ends its process
                keeping = keeping()
            shapes = [(r.batch, r.seq) for r in profile.shapes] if profile else []
            requirements, req_notes = resolve_requirements(keeping, workload.spec.spec, settings.requirements)
            scenarios = _scenarios_for(settings.scenarios, requirements)
            if settings.requirements is None and requirements:  # kept from an earlier trial: say so before they cost
                added = [s.name for s in scenarios if s.name not in {given.name for given in settings.scenarios}]
                said(
                    "checking the requirements kept for this workload: "
                    + ", ".join(r.text for r in requirements)
                    + (f" (they add the scenario(s) {', '.join(added)})" if added else "")
                    + "; --clear-requirements drops them, --require replaces them"
                )
            capture.fold(phase[0])
            phase[0] = "baseline"
            amp_dtypes = sorted({t.amp for t in targets if t.amp})
            compute = references_on(elsewhere, settings.timeout_s, log)
            baseline, notes = ensure_baseline(
                keeping, workload, env, dtypes, settings.refresh_baseline, said, shapes, amp_dtypes, compute
            )
    finally:
        shutil.rmtree(here, ignore_errors=True)
    notes = [*notes, *req_notes]
    ordered, reference = with_reference(targets)
    variants: list[tuple[Target, tuple[int, ...] | None]] = []
    for target in ordered:
        variants.append((target, None))
        if bucket_plan and target != reference:
            variants.append((target, tuple(bucket_plan["chosen"])))
    results: list[TargetResult | int] = []  # a result, or how many replicate sessions will give it
    sessions = []
    # a diagnostic runs after the sessions, in a worker of its own: its hang is never the target's
    session_checks, localization = split_off(settings.checks)
    for target, padding in variants:
        is_ref = target == reference and padding is None
        reason = unavailable_reason(target)
        if reason is not None:
            if padding is None:
                results.append(TargetResult(target=target, status="skipped", reason=reason, is_reference=is_ref))
            continue
        job = TargetJob(
            workload_spec=workload.spec.spec,
            target=target,
            fingerprint=workload.fingerprint,
            baseline_path=baseline.path,
            repeat_max_abs_err=baseline.repeat_max_abs_err,
            timing=settings.timing,
            is_reference=is_ref,
            profile=profile,
            buckets=padding,
            cold_cache=settings.cold_cache,
            env=() if is_ref else settings.env,  # the reference stays what the baseline measured
            scenarios=tuple(s for s in scenarios if not scenario_named(s.name).always),
            checks=session_checks,
        )
        label = target.spec + (" (reference)" if is_ref else "") + (" padded to buckets" if padding else "")
        for index in range(settings.replicates):  # scenarios describe the target: the first replicate runs them
            copy = job if index == 0 else replace(job, scenarios=())
            suffix = f" [replicate {index + 1}/{settings.replicates}]" if settings.replicates > 1 else ""
            sessions.append((label + suffix, copy))
        results.append(settings.replicates)
    if pool is not None and not getattr(pool, "reuse", True):  # the trial's own workers: stop those not needed
        pool.trim(first_wave(sum(1 for _, job in sessions if not job.env), settings))
    from bakeoff.runner.replicates import merge_replicates

    measured = iter(_drive(sessions, session_factory(settings, pool), settings.interleaved, say))
    done = [r if isinstance(r, TargetResult) else merge_replicates([next(measured) for _ in range(r)]) for r in results]
    if localization is not None:
        done = localize_measured(
            done, workload.spec.spec, workload.fingerprint, workload.dtype, localization, settings.timeout_s,
            settings.env, say,
        )  # fmt: skip
    done = [
        _with_requirements(r, requirements) for r in _speedups(done, reference, settings.interleaved, settings.spread)
    ]
    if log.entries():
        done = [
            replace(r, log=merge_logs(log.entries(), r.log)) if r.is_reference and r.variant == "as-is" else r
            for r in done
        ]
    run = RunResult(
        run_id=uuid.uuid4().hex[:12],
        created_at=now(),
        workload={**workload.to_dict(), "notes": notes},
        environment=env,
        results=tuple(done),
        baseline_id=baseline.id,
        settings=settings.to_run_dict(
            reference=reference.spec,
            reference_added=reference not in targets,
            bucket_plan=bucket_plan,
            scenarios=scenarios,
            requirements=[r.text for r in requirements],
        ),
    )
    return run
