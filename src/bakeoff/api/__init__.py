"""The keyword API. The CLI calls exactly these functions; so can your own code.

Example:
    >>> import bakeoff
    >>> run = bakeoff.trial("arch:llama", on=["cpu", "cpu+aot_eager"], db="results.db")
    >>> run.result("cpu+aot_eager").correctness.verdict
    'pass'
"""

from __future__ import annotations

from bakeoff.api.catalogue import checks, demo, targets, workloads
from bakeoff.api.common import PathLike as PathLike
from bakeoff.api.coverage_sweeps import SWEEP_TIMING as SWEEP_TIMING
from bakeoff.api.coverage_sweeps import coverage, sweep, sweep_regressions, sweeps
from bakeoff.api.distributed import dist
from bakeoff.api.fitting import fit
from bakeoff.api.knowledge_base import (
    db_status,
    db_upgrade,
    export_runs,
    import_runs,
    note,
    notes_and_tags,
    select_runs,
    show,
    tag,
)
from bakeoff.api.planning import plan
from bakeoff.api.reporting import report
from bakeoff.api.revisit import (
    bisect,
    compare,
    decide,
    exec_keywords,
    history,
    localize,
    regressions,
    remedies,
    rerun,
    rerun_keywords,
)
from bakeoff.api.scripts import exec_script
from bakeoff.api.services import serve_service
from bakeoff.api.trials import baseline, trial
from bakeoff.results.values import BaselineInfo as BaselineInfo
from bakeoff.results.values import RunResult as RunResult
from bakeoff.settings import TrialSettings as TrialSettings
from bakeoff.settings import describe_options as describe_options
from bakeoff.store.db import RunSummary as RunSummary
from bakeoff.store.db import Store as Store

__all__ = [
    "baseline",
    "bisect",
    "compare",
    "coverage",
    "db_status",
    "db_upgrade",
    "decide",
    "demo",
    "dist",
    "exec_script",
    "export_runs",
    "fit",
    "history",
    "import_runs",
    "note",
    "notes_and_tags",
    "plan",
    "regressions",
    "remedies",
    "report",
    "rerun",
    "serve_service",
    "show",
    "sweep",
    "sweep_regressions",
    "sweeps",
    "tag",
    "targets",
    "trial",
    "workloads",
]

# the functions say they are bakeoff.api's, where users find them (help() names that module)
for _function in (*(globals()[name] for name in __all__), checks, exec_keywords, localize, rerun_keywords, select_runs):
    _function.__module__ = __name__
del _function
