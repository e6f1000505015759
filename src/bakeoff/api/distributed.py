"""Does it run the same across devices (``bakeoff dist``): :func:`dist` checks every argument
before any rank starts, then hands the work to :mod:`bakeoff.distributed.run`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bakeoff.api.common import PathLike, _store_for, _targets
from bakeoff.errors import SpecError
from bakeoff.scenarios.dist import DistResult, dist_of
from bakeoff.settings.dist import DIST_OPTIONS
from bakeoff.settings.option import describe_options, read_options
from bakeoff.target.detect import unavailable_reason

__all__ = ["dist"]


def dist(
    workload: str = "collectives",
    on: str = "cpu",
    *,
    db: PathLike | None = None,
    progress: Callable[[str], None] | None = None,
    **settings: Any,
) -> DistResult:
    """Start ``ranks`` processes on one target's process-group backend (the one PyTorch names for
    its device: gloo on the CPU, nccl on CUDA, the plugin's own for an out-of-tree device) at
    each world size. For ``collectives``: every collective against its analytic value, with its
    latency percentiles and bus bandwidth. For a workload: ``steps`` DDP steps on the target
    against one float64 process on the global batch and the same job on the CPU with gloo, the
    first diverging step, rank and parameter named. A collective that does not complete is a
    hang naming it and the ranks that did not arrive. The answer is stored as a run (its
    ``run_id``).

    Args:
        workload: ``collectives``, or a workload spec (``arch:llama``, ``py:...``) to train.
        on: one target, e.g. ``cuda`` or ``emu``.
        db: database path or URL (default ``BAKEOFF_DB`` or ``./bakeoff.db``).
        progress: called with a short message as each world size starts.
        {settings}

    Raises:
        SpecError: bad input (an unknown or unavailable target, a compile backend, several
            targets, a malformed size or world size).
    """
    from bakeoff.distributed.record import dist_run
    from bakeoff.distributed.run import backend_for, check_collectives, check_training, shared_device_refusal
    from bakeoff.workload.base import parse_workload

    if workload != "collectives":
        try:
            parse_workload(workload)
        except SpecError as exc:
            hint = "e.g. `bakeoff dist collectives --on cpu` or `bakeoff dist arch:llama --on cpu`"
            raise SpecError(f"bakeoff dist checks collectives or trains a workload: {exc.message}", hint=hint) from None
    values = read_options(DIST_OPTIONS, settings, "dist setting")
    targets = _targets(on)
    if len(targets) != 1:
        raise SpecError(f"bakeoff dist takes one target, got {len(targets)}", hint="run it once per target")
    (target,) = targets
    if target.amp is not None:
        raise SpecError(f"bakeoff dist runs without autocast: {target.spec} asks for it", hint="drop ?amp=...")
    if target.dtype is not None and workload == "collectives":
        raise SpecError(f"the collectives check takes its dtypes from --dtypes: {target.spec} names one",
                        hint=f"use --on {target.device} --dtypes {target.dtype}")  # fmt: skip
    if target.is_compiled:
        raise SpecError(f"bakeoff dist runs collectives eagerly: {target.spec} names a compile backend",
                        hint=f"use --on {target.device}")  # fmt: skip
    unavailable = unavailable_reason(target)
    if unavailable is not None:
        raise SpecError(f"{target.spec} cannot run here: {unavailable}", hint="run `bakeoff targets` to see what can")
    backend = backend_for(target.device)
    if backend is None:
        raise SpecError(f"PyTorch names no process-group backend for {target.device}",
                        hint="install the device's plugin, which registers its backend")  # fmt: skip
    shared = shared_device_refusal(target, values["ranks"], backend)
    if shared is not None:
        hint = (f"use --on {target.device}: each rank then gets a device of its own" if target.index is not None
                else "ask for at most one rank per device (--ranks), or run where each rank has a device")  # fmt: skip
        raise SpecError(shared, hint=hint)
    if target.device == "emu":  # the test device's seeded faults, refused here rather than in a rank
        import os

        from bakeoff.emu.collectives import ENV_FAULT, Faults

        Faults.parse(os.environ.get(ENV_FAULT, ""), 0)
    store = _store_for(db)  # one that cannot be written is refused before any rank starts
    if workload == "collectives":
        found = check_collectives(target, values, progress)
    else:
        found = check_training(target, workload, values, progress)
    run = dist_run(found, target, values)
    (store() if callable(store) else store).save_run(run)
    found = dist_of(run.results[0].scenario("dist"))
    assert found is not None
    return found


dist.__doc__ = (dist.__doc__ or "").replace("{settings}", describe_options(DIST_OPTIONS, " " * 8))
