"""Will it fit (``bakeoff fit``): :func:`fit` checks every argument before anything runs, then
hands the work to :mod:`bakeoff.fit.run`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bakeoff.api.common import _targets
from bakeoff.errors import SpecError
from bakeoff.results.fit import FitResult
from bakeoff.settings.fit import FIT_OPTIONS
from bakeoff.settings.option import describe_options, read_options

__all__ = ["fit"]


def fit(workload: str, on: str = "cpu", *, progress: Callable[[str], None] | None = None, **settings: Any) -> FitResult:
    """The peak memory of ``workload`` over a grid of batch sizes (and sequence lengths) on one
    target: predicted on the host under fake tensors, calibrated and verified on the target,
    with the largest batch that fits per sequence length.

    Args:
        workload: a workload spec, e.g. ``arch:llama``.
        on: one target, e.g. ``cuda`` or ``emu?dtype=bf16``.
        progress: called with a short message as each stage starts.
        {settings}

    Raises:
        SpecError: bad input (an unknown target, several targets, a malformed grid or size, a
            device that reports no capacity without ``memory``).
        WorkloadError: the workload cannot be predicted (it does not build under fake tensors,
            or cannot vary its input shape).
    """
    from bakeoff.fit.run import fit_workload
    from bakeoff.workload.base import parse_workload

    values = read_options(FIT_OPTIONS, settings, "fit setting")
    if values["optimizer"] != "adamw" and not values["training"]:
        raise SpecError("--optimizer sets a training step's optimiser", hint="add --training, or drop --optimizer")
    parse_workload(workload)
    targets = _targets(on)
    if len(targets) != 1:
        raise SpecError(f"bakeoff fit takes one target, got {len(targets)}", hint="run it once per target")
    return fit_workload(workload, targets[0], values, progress)


fit.__doc__ = (fit.__doc__ or "").replace("{settings}", describe_options(FIT_OPTIONS, " " * 8))
