"""``bakeoff dist``: does it run the same across devices? A thin command over
:func:`bakeoff.api.dist`; it registers itself on the command group of :mod:`bakeoff.cli.app`.
"""

from __future__ import annotations

import functools
from typing import Any

import click

from bakeoff.cli.app import cli
from bakeoff.cli.common import (
    EXIT_FAILED,
    db_option,
    emit_json,
    format_option,
    progress,
    setting_option,
    show_stored,
)
from bakeoff.settings.dist import DIST_OPTIONS

__all__ = ["dist_command"]

_setting = functools.partial(setting_option, DIST_OPTIONS)


@cli.command(
    "dist",
    epilog="\b\nExamples:\n"
    "  bakeoff dist collectives --on cuda --ranks 2,4,8\n"
    "  bakeoff dist arch:llama --on cuda --ranks 2,4 --mode ddp,fsdp --steps 5\n"
    "  BAKEOFF_EMU=1 bakeoff dist collectives --on emu --ranks 2,4 --sizes 4KiB,1MiB --dtypes float32,bfloat16",
)
@click.argument("workload", default="collectives", metavar="[collectives|WORKLOAD]")
@click.option("--on", "on", default="cpu", show_default=True, metavar="TARGET", help="The one target, e.g. cuda.")
@_setting("ranks")
@_setting("sizes")
@_setting("dtypes")
@_setting("iterations")
@_setting("modes")
@_setting("steps")
@_setting("lr")
@_setting("hang_s")
@_setting("timeout_s")
@click.option("--strict", is_flag=True, help="Exit 1 unless every world size passed.")
@db_option
@format_option
def dist_command(workload: str, on: str, strict: bool, db: str | None, fmt: str, **settings: Any) -> None:
    """Start --ranks processes on the target's process-group backend (the one PyTorch names for
    its device) and check every collective (all_reduce sum, avg and max, all_gather,
    reduce_scatter, broadcast, all_to_all, barrier) at each size and dtype against its analytic
    value: exact where it only moves data, within the dtype's rounding where it sums. Given a
    workload instead of `collectives`, train it --steps steps under DDP and/or FSDP2 (--mode) on
    the target against one float64 process on the global batch and the same job on the CPU with
    gloo: DDP's replicas must stay equal, and the trajectory within the training check's band;
    the first diverging step, rank and parameter are named.

    Each world size is a job of its own, run in turn (a ladder: 'works at 2, hangs at 8'). Each
    call is timed (by the rank that entered it last); the table gives the p50 and p99, their
    ratio (the tail) and the bus bandwidth by nccl-tests' factors. A collective that does not complete
    within --hang-timeout is a hang naming it, its sequence number and the ranks that did not
    arrive; every rank is stopped. The answer is stored as a run: `bakeoff show RUN_ID` reads
    it. Exit code: 0 when the check ran, 1 with --strict when a world size did not pass, 2 on
    bad input.
    """
    from click.core import ParameterSource

    from bakeoff import api
    from bakeoff.settings.dist import check_applies

    ctx = click.get_current_context()
    check_applies(workload, {k for k in settings if ctx.get_parameter_source(k) is ParameterSource.COMMANDLINE})
    result = api.dist(workload, on, db=db, progress=progress(), **settings)
    if fmt == "json":
        emit_json(result.to_dict())
    else:
        from bakeoff.report.terminal import dist_view

        show_stored(dist_view(result), result.run_id, db)
    if strict and result.verdict != "pass":
        raise SystemExit(EXIT_FAILED)
