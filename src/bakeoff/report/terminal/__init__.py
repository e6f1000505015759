"""Rich tables for runs, history, targets and workloads.

The views are grouped by what they show: one run (:mod:`.run`), its detail tables
(:mod:`.sections`), the decision, a plan and the remedies (:mod:`.decision`), and the listing
commands' tables (:mod:`.listings`). This package re-exports every view, so callers write
``from bakeoff.report.terminal import run_view`` and the CLI finds ``terminal.<name>_view``.
"""

from __future__ import annotations

from bakeoff.report.terminal.decision import decision_view, plan_view, remedies_view
from bakeoff.report.terminal.dist import dist_view
from bakeoff.report.terminal.fit import fit_view
from bakeoff.report.terminal.listings import baseline_view, checks_view, history_table, targets_view, workloads_view
from bakeoff.report.terminal.run import run_view, stored_line
from bakeoff.report.terminal.sections import buckets_view, log_view, requirements_view, scenarios_view

__all__ = [
    "baseline_view",
    "buckets_view",
    "checks_view",
    "decision_view",
    "dist_view",
    "fit_view",
    "history_table",
    "log_view",
    "plan_view",
    "remedies_view",
    "requirements_view",
    "run_view",
    "scenarios_view",
    "stored_line",
    "targets_view",
    "workloads_view",
]
