"""Regression detection: what changed for a workload on a target between two runs.

Pure functions over stored values. The vocabulary is small and fixed (after airspeed velocity):

* ``improved`` / ``regressed``: the metric moved beyond its threshold, in the good or bad direction;
* ``unchanged``: it did not move beyond its threshold;
* ``not_comparable``: the two results do not measure the same thing (the workload's fingerprint
  differs, a setting that decides what is measured differs, the adjustments ledger differs, one
  side was skipped or lacks the metric), or a timing figure moved but the data cannot say so:
  such a metric's detail starts with :data:`INCONCLUSIVE` ("not conclusive (noisy: ...)");
* ``failed``: the later result is an error.

**A change inside a noisy measurement is not a regression.** A timing figure (median latency,
first call, scenario series and rates, cost) that moved beyond its threshold is *not conclusive*
instead of better or worse when either side's timings were flagged noisy
(:func:`timing_noise`: the noise flags stored with the result, a load average above the
machine's cores, more intra-op threads than cores) or when the data cannot tell the two apart
(the ratio's interval contains 1, the cost intervals overlap). What this cannot see: a real
change measured on a busy machine is reported not conclusive, never worse; repeat it on a quiet
machine. A not conclusive metric never makes the comparison regressed.

**Runs measured differently are not compared** (:func:`settings_difference`): another input
profile, another timing mode (worker processes or one process), a cold compile cache, other
options for a scenario both ran or for a check, other padding buckets for a padded variant;
for a script run its device map, reference, captures, seed, strict mode, file comparison and
how it was timed. The target's dtype and options are in its spec (pairs are made by spec) and
the workload's dtype in its fingerprint. Sample counts, minimum times, replicates and timing in
turns are not: they change how sure a figure is, not what it measures.

Cost per million requests is compared only where both runs priced the target (a run without
prices has no cost metric): it is the figure each run's decision ranks the target by
(:func:`~bakeoff.verdicts.decision.cost_in_run`), so a change of price and a change of speed
both move it, and the detail says which.

A result's *outcome* is the worst of its metrics, in the order failed, not_comparable (when the
pair as a whole is not comparable), regressed, improved, unchanged. Thresholds are explicit
parameters (:class:`Thresholds`), never hidden constants. What differs between the two
environments is kept with each pair (:class:`EnvironmentDiff`) as a difference, never tested
as the cause of what changed.

:func:`find_regressions` chooses the pairs: for each workload + target + variant, the latest
result against the newest earlier one *from a different environment* (reruns in the same
environment measure noise, not an update), or against the newest earlier run among the runs
given as the baseline (``against``: the runs a tag names).

Where each part lives: the values and the environment difference in
:mod:`~bakeoff.verdicts.regressions.values`, the metric rules and :func:`compare_results` in
:mod:`~bakeoff.verdicts.regressions.rules`, what makes a pair not comparable in
:mod:`~bakeoff.verdicts.regressions.comparability`, and the choice and comparison of pairs of
runs in :mod:`~bakeoff.verdicts.regressions.pairs`; this package re-exports their public names.
"""

from __future__ import annotations

from bakeoff.verdicts.regressions.comparability import settings_difference
from bakeoff.verdicts.regressions.pairs import compare_pair, find_regressions, pair_runs
from bakeoff.verdicts.regressions.rules import compare_results
from bakeoff.verdicts.regressions.values import (
    INCONCLUSIVE,
    OUTCOMES,
    Comparison,
    EnvironmentChange,
    EnvironmentDiff,
    MetricChange,
    Thresholds,
    environment_diff,
    flattened,
)
from bakeoff.verdicts.timing import timing_noise

__all__ = [
    "INCONCLUSIVE",
    "OUTCOMES",
    "Comparison",
    "EnvironmentChange",
    "EnvironmentDiff",
    "MetricChange",
    "Thresholds",
    "compare_pair",
    "compare_results",
    "environment_diff",
    "find_regressions",
    "flattened",
    "pair_runs",
    "settings_difference",
    "timing_noise",
]
