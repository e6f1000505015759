"""Will it fit (``bakeoff fit``): :func:`fit` checks every argument before anything runs, then
hands the work to :mod:`bakeoff.fit.run`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bakeoff.api.common import PathLike, _store_for, _targets
from bakeoff.errors import SpecError
from bakeoff.scenarios.fit import FitResult, fit_of
from bakeoff.settings.fit import FIT_OPTIONS
from bakeoff.settings.option import describe_options, read_options
from bakeoff.target.detect import unavailable_reason

__all__ = ["fit"]


def fit(
    workload: str,
    on: str = "cpu",
    *,
    db: PathLike | None = None,
    progress: Callable[[str], None] | None = None,
    **settings: Any,
) -> FitResult:
    """The peak memory of ``workload`` over a grid of batch sizes (and sequence lengths) on one
    target: predicted on the host under fake tensors, calibrated and verified on the target,
    with the largest batch that fits per sequence length. The answer is stored as a run (its
    ``run_id``): ``show``, the reports and ``rerun`` read it.

    Args:
        workload: a workload spec, e.g. ``arch:llama``.
        on: one target, e.g. ``cuda`` or ``emu?dtype=bf16``.
        db: database path or URL (default ``BAKEOFF_DB`` or ``./bakeoff.db``).
        progress: called with a short message as each stage starts.
        {settings}

    Raises:
        SpecError: bad input (an unknown target, several targets, a malformed grid or size, a
            device that reports no capacity without ``memory``).
        WorkloadError: the workload cannot be predicted (it does not build under fake tensors,
            or cannot vary its input shape).
    """
    from bakeoff.fit.record import fit_run
    from bakeoff.fit.run import fit_workload
    from bakeoff.workload.base import parse_workload

    values = read_options(FIT_OPTIONS, settings, "fit setting")
    if values["optimizer"] != "adamw" and not values["training"]:
        raise SpecError("--optimizer sets a training step's optimiser", hint="add --training, or drop --optimizer")
    kind = parse_workload(workload).kind
    targets = _targets(on)
    if len(targets) != 1:
        raise SpecError(f"bakeoff fit takes one target, got {len(targets)}", hint="run it once per target")
    (target,) = targets
    if target.is_compiled:
        raise SpecError(
            f"bakeoff fit runs the step eagerly: {target.spec} names a compile backend",
            hint=f"use --on {target.device}" + (f":{target.index}" if target.index is not None else ""),
        )
    unavailable = unavailable_reason(target)
    if unavailable is not None:
        raise SpecError(f"{target.spec} cannot run here: {unavailable}", hint="run `bakeoff targets` to see what can")
    store = _store_for(db)  # one that cannot be written is refused before any work
    run = fit_run(fit_workload(workload, target, values, progress), target, values, kind)
    (store() if callable(store) else store).save_run(run)
    found = fit_of(run.results[0].scenario("fit"))
    assert found is not None
    return found


fit.__doc__ = (fit.__doc__ or "").replace("{settings}", describe_options(FIT_OPTIONS, " " * 8))
