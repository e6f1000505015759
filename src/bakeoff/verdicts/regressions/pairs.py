"""Which runs to compare, and the comparison of a pair of runs with their identity.

:func:`find_regressions` pairs, for each workload + target + variant, the latest result with the
newest earlier one from a different environment or from the runs given as the baseline
(:func:`pair_runs`, from run headers alone), and :func:`compare_pair` compares the two with each
run's environment, noise, settings and prices (:func:`~bakeoff.verdicts.regressions.rules.compare_results`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from bakeoff.results.values import RunResult, TargetResult
from bakeoff.verdicts.decision import cost_in_run, price_in_run
from bakeoff.verdicts.regressions.comparability import settings_difference
from bakeoff.verdicts.regressions.rules import compare_results
from bakeoff.verdicts.regressions.values import Comparison, Thresholds, environment_diff
from bakeoff.verdicts.timing import timing_noise

__all__ = ["compare_pair", "find_regressions", "pair_runs"]


def compare_pair(
    before_run: RunResult,
    before: TargetResult,
    after_run: RunResult,
    after: TargetResult,
    thresholds: Thresholds | None = None,
) -> Comparison:
    """:func:`compare_results` with the identity of both runs and their environment difference,
    each side's noise judged with its machine's core count, the settings both runs measured
    with, and each side's cost within its run where both runs priced the target."""
    t = thresholds or Thresholds()
    priced = price_in_run(before_run, before) is not None and price_in_run(after_run, after) is not None
    variant = after.variant if before.variant == after.variant else "as-is"
    outcome, reason, metrics = compare_results(
        before,
        after,
        before_fingerprint=before_run.fingerprint,
        after_fingerprint=after_run.fingerprint,
        thresholds=t,
        costs=(cost_in_run(before_run, before), cost_in_run(after_run, after)) if priced else None,
        noise=(timing_noise(before, before_run.environment), timing_noise(after, after_run.environment)),
        settings=settings_difference(before_run, after_run, variant),
        runs=(before_run.run_id, after_run.run_id),
    )
    return Comparison(
        workload=after_run.workload["spec"],
        target=before.target.spec,
        after_target=after.target.spec,
        variant=after.variant,
        before_run=before_run.run_id,
        after_run=after_run.run_id,
        before_created_at=before_run.created_at,
        after_created_at=after_run.created_at,
        outcome=outcome,
        reason=reason,
        metrics=metrics,
        environment=environment_diff(before_run.environment, after_run.environment),
        thresholds=t,
    )


def pair_runs(
    runs: Iterable[tuple[str, str, str, str, Iterable[tuple[str, str]]]],
    against: Collection[str] | None = None,
) -> list[tuple[tuple[str, str, str], str, str]]:
    """Which runs to compare, from run headers alone.

    Args:
        runs: ``(run_id, created_at, workload_spec, environment_fingerprint, [(target, variant), ...])``.
        against: the run ids to take the baseline from (the runs a tag names), whatever their
            environment; None: any run from another environment.

    Returns:
        ``((workload, target, variant), before_run_id, after_run_id)`` for each key whose latest
        run has an earlier run to compare with: the newest earlier run in ``against``, or
        without it the newest earlier run in a different environment, is ``before``. Keys
        without one are left out. Sorted by key.
    """
    by_key: dict[tuple[str, str, str], list[tuple[str, str, str]]] = {}
    for run_id, created_at, workload, env_fp, keys in runs:
        for target, variant in keys:
            by_key.setdefault((workload, target, variant), []).append((created_at, run_id, env_fp))
    pairs = []
    for key in sorted(by_key):
        ordered = sorted(by_key[key])
        _, latest_id, latest_env = ordered[-1]
        earlier = next(
            (
                run_id
                for _, run_id, env in reversed(ordered[:-1])
                if (run_id in against if against is not None else env != latest_env)
            ),
            None,
        )
        if earlier is not None:
            pairs.append((key, earlier, latest_id))
    return pairs


def find_regressions(
    runs: Sequence[RunResult], thresholds: Thresholds | None = None, against: Collection[str] | None = None
) -> list[Comparison]:
    """For each workload + target + variant in ``runs``: its latest result against the newest
    earlier result from a different environment, or from the runs ``against`` names (see
    :func:`pair_runs`)."""
    by_id = {run.run_id: run for run in runs}
    headers = [
        (
            run.run_id,
            run.created_at,
            run.workload["spec"],
            run.environment.fingerprint,
            [(r.target.spec, r.variant) for r in run.results],
        )
        for run in runs
    ]
    comparisons = []
    for (_, target, variant), before_id, after_id in pair_runs(headers, against):
        before_run, after_run = by_id[before_id], by_id[after_id]
        comparisons.append(
            compare_pair(
                before_run, before_run.result(target, variant), after_run, after_run.result(target, variant), thresholds
            )
        )
    return comparisons
