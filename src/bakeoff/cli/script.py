"""``bakeoff exec``: a team's own script, unchanged, on other devices.

A thin command over :func:`bakeoff.api.exec_script`; it registers itself on the command group of
:mod:`bakeoff.cli.app`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import click

from bakeoff.cli.app import cli
from bakeoff.cli.common import (
    db_option,
    format_option,
    progress,
    setting_option,
    verbose_option,
    workload_output_to_stderr,
)
from bakeoff.settings import EXEC_OPTIONS

__all__ = ["exec_command"]

_setting = functools.partial(setting_option, EXEC_OPTIONS, early=True)


@cli.command(
    "exec",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
    epilog="\b\nExamples:\n  bakeoff exec --on emu train.py --epochs 1\n"
    "  bakeoff exec --on emu --capture infer:postprocess --strict infer.py\n"
    "  bakeoff exec --on emu --capture-modules '*.mlp' infer.py\n"
    "  bakeoff exec --on cpu+inductor,emu+aot_eager infer.py\n"
    "  bakeoff exec --on emu --repeats 5 train.py   # timed over 5 clean runs a side\n"
    "  bakeoff exec --on emu --nproc 2 train_ddp.py   # two ranks, as torchrun --nproc-per-node 2\n"
    "  bakeoff exec --on emu --nproc 8 --nodes 1/2@10.0.0.1:29500 train_ddp.py   # machine 1 of 2\n"
    "  bakeoff exec --on emu --seed 1 train.py --seed 3 --on cpu   # the script's own --seed and --on",
)
@click.argument("script", type=click.Path(dir_okay=False))
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("--on", "on", multiple=True, default=("cpu",), show_default=True, metavar="DEVICES",
              help="Targets, comma-separated or repeated: devices (emu, xpu, cpu...), or a device with a "
              "torch.compile backend (cpu+inductor, emu+aot_eager): the script's root module calls "
              "are compiled.")  # fmt: skip
@_setting("reference")
@_setting("map_devices")
@_setting("strict")
@_setting("capture")
@_setting("capture_modules")
@_setting("timeout_s")
@_setting("seed")
@_setting("audit")
@_setting("files")
@_setting("repeats")
@_setting("nproc")
@_setting("nodes")
@verbose_option
@db_option
@format_option
def exec_command(
    script: str, args: Sequence[str], on: Sequence[str], verbose: bool, db: str | None, fmt: str, **settings: Any
) -> None:
    """Run SCRIPT unchanged: as the reference, then on each target with its devices remapped.

    bakeoff's options go before SCRIPT; everything after SCRIPT is the script's, in order, as
    `python SCRIPT ARGS` would give it (an option of bakeoff's name after SCRIPT is the script's
    too). Each run is a process of its own in a copy of the working directory. The losses the script calls
    backward() on, the --capture'd return values, bakeoff.capture(name, value) calls and the
    files it writes (safetensors, npy, npz, JSON; pickles are never loaded) are compared with
    the reference's; every rewrite is listed with its count and call site.
    The first run of each is audited and is not a fair clock: --repeats N times each side over
    N more runs without the audit, and compares the time between captures span by span.
    Exit code: 0 when the runs were made, 1 with --strict when a target failed, 2 on bad input.
    """
    from pathlib import Path

    from bakeoff import api
    from bakeoff.cli.main import _finish_run

    if script.startswith("-") and not Path(script).exists():  # an option bakeoff exec does not have
        raise click.NoSuchOption(script)

    _check_order(click.get_current_context(), script, args)
    with workload_output_to_stderr():
        run = api.exec_script(script, args, on=on, db=db, **settings, progress=progress())
    _finish_run(run, fmt, db, settings["strict"], verbose=verbose)


def _check_order(ctx: click.Context, script: str, args: Sequence[str]) -> None:
    """Everything after SCRIPT is the script's (click stops reading options at SCRIPT). An
    argument there spelled like one of bakeoff's options is refused when no ``--on`` came before
    SCRIPT (the command would run the reference alone, and the user most likely meant it for
    bakeoff), and otherwise said once on stderr and left to the script. Arguments after a ``--``
    are the script's without a word.

    Raises:
        click.UsageError: no ``--on`` before SCRIPT and one of bakeoff's options after it.
    """
    ours = {opt for param in ctx.command.params for opt in (*param.opts, *param.secondary_opts) if opt.startswith("-")}
    given = list(args[: args.index("--")] if "--" in args else args)
    looks = list(dict.fromkeys(a.partition("=")[0] for a in given if a.partition("=")[0] in ours))
    if not looks:
        return
    if ctx.get_parameter_source("on") is click.core.ParameterSource.DEFAULT:
        first = "--on" if "--on" in looks else looks[0]
        raise click.UsageError(
            f"{first} must come before the script: options after {script} are the script's",
            ctx=ctx,
        )
    click.echo(
        f"bakeoff: {', '.join(looks)} after {script} {'goes' if len(looks) == 1 else 'go'} to the script "
        "(bakeoff's own options go before it)",
        err=True,
    )
