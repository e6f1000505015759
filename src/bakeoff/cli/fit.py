"""``bakeoff fit``: will the workload fit in the target's memory, and up to which batch size?

A thin command over :func:`bakeoff.api.fit`; it registers itself on the command group of
:mod:`bakeoff.cli.app`.
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
from bakeoff.settings.fit import FIT_OPTIONS

__all__ = ["fit_command"]

_setting = functools.partial(setting_option, FIT_OPTIONS)


@cli.command(
    "fit",
    epilog="\b\nExamples:\n"
    "  bakeoff fit arch:llama --on cuda --grid 'batch=1,2,4,...,64&seq=128,...,4096'\n"
    "  BAKEOFF_EMU=1 bakeoff fit 'arch:llama?layers=1' --on emu --grid 'batch=1,...,64&seq=64,...,512' \\\n"
    "      --training --memory 2GiB",
)
@click.argument("workload")
@click.option("--on", "on", default="cpu", show_default=True, metavar="TARGET", help="The one target, e.g. cuda.")
@_setting("grid")
@_setting("training")
@_setting("optimizer")
@_setting("memory", type=str)
@_setting("requirements")
@_setting("probes")
@_setting("timeout_s")
@click.option("--strict", is_flag=True, help="Exit 1 if a --require point does not fit.")
@db_option
@format_option
def fit_command(workload: str, on: str, strict: bool, db: str | None, fmt: str, **settings: Any) -> None:
    """Predict the peak memory of WORKLOAD at every point of --grid on the target, and the largest
    batch that fits per sequence length.

    Each point's peak is predicted on the host, without the device: the workload runs one step
    (inference, or two AdamW steps with --training) under PyTorch's fake tensors on the target's
    device type, and PyTorch's memory tracker sorts what is live at the peak into parameters,
    gradients, activations, temporaries and optimiser state. Up to two real steps on the target
    (each in a fresh process) calibrate the prediction to its allocator, and one more verifies
    the tightest edge. The capacity is --memory, else what the device reports (the host's memory
    for cpu and the test device). For the edge of the longest sequence it predicts what would
    move it: a lower dtype and, for training, activation checkpointing and an optimiser without
    state. The map is stored as a run: `bakeoff show RUN_ID` and the reports read it. Exit code:
    0 when the map was made, 1 with --strict when a --require point does not fit, 2 on bad input.
    """
    from bakeoff import api

    result = api.fit(workload, on, db=db, progress=progress(), **settings)
    if fmt == "json":
        emit_json(result.to_dict())
    else:
        from bakeoff.report.terminal import fit_view

        show_stored(fit_view(result), result.run_id, db)
    if strict and any(req.verdict != "met" for req in result.requirements):
        raise SystemExit(EXIT_FAILED)
