"""Planning: :func:`plan` searches a workload's adjustments on its targets within a time
budget, one stored trial per stage (:mod:`bakeoff.runner.plan`), and recommends the variant to
use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from bakeoff.api.common import PathLike, _targets, _would_create
from bakeoff.results.values import RunResult
from bakeoff.settings import TrialSettings, read_options
from bakeoff.store.db import Store

if TYPE_CHECKING:
    from bakeoff.verdicts.plan import Plan


def plan(
    workload: str,
    on: str | Iterable[str] = "cpu",
    *,
    budget: str | float = "10min",
    db: PathLike | None = None,
    progress: Callable[[str], None] | None = None,
    **settings: Any,
) -> Plan:
    """Search the adjustments for ``workload`` on the targets in ``on`` within ``budget``
    (``"10min"``, ``"90s"``, or seconds) and recommend the cheapest (with prices) or fastest
    variant that is correct, on its device and meets every requirement; see
    :mod:`bakeoff.runner.plan`. Every stage's run is stored, tagged ``plan-RUN_ID`` (the first
    stage's run), so ``bakeoff report --tag`` shows them together. ``settings`` are
    :func:`trial`'s keywords (``profile``, ``requirements``, ``prices``, ``min_samples``...).

    Raises:
        SpecError, WorkloadError, StoreError: bad input; nothing is stored.
        TypeError: a keyword that is not a trial setting.
    """
    from bakeoff.runner.plan import run_plan
    from bakeoff.runner.trial import run_trial
    from bakeoff.settings.plan import PLAN_OPTIONS
    from bakeoff.workload.base import parse_workload

    spec = parse_workload(workload)
    parsed = _targets(on)
    seconds = read_options(PLAN_OPTIONS, {"budget": budget}, "plan setting")["budget"]
    trial_settings = TrialSettings.from_options(**settings)
    opened: list[Store] = []

    def store() -> Store:  # opened once, and (for a new file) only after the workload ran
        if not opened:
            opened.append(Store.open(db))
        return opened[0]

    def one_trial(targets: Any, stage: TrialSettings) -> RunResult:
        run = run_trial(store() if opened or not _would_create(db) else store, spec, targets, stage, progress)
        store().save_run(run)
        return run

    named: list[str] = []

    def tag(run_id: str) -> str:  # every stage's run carries the first stage's plan-RUN tag
        named.append(named[0] if named else f"plan-{run_id}")
        store().add_tag(run_id, named[-1])
        return named[-1]

    return run_plan(one_trial, spec.spec, parsed, trial_settings, seconds, progress or (lambda _line: None), tag)
