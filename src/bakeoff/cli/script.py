"""``bakeoff exec``: a team's own script, unchanged, on other devices.

A thin command over :func:`bakeoff.api.exec_script`; it registers itself on the command group of
:mod:`bakeoff.cli.app`.
"""

from __future__ import annotations

from collections.abc import Sequence

import click

from bakeoff.cli.app import cli
from bakeoff.cli.common import db_option, format_option, progress, verbose_option, workload_output_to_stderr

__all__ = ["exec_command"]


@cli.command(
    "exec",
    context_settings={"ignore_unknown_options": True},
    epilog="\b\nExamples:\n  bakeoff exec train.py --epochs 1 --on emu\n"
    "  bakeoff exec infer.py --on emu --capture infer:postprocess --strict\n"
    "  bakeoff exec infer.py --on emu --capture-modules '*.mlp'\n"
    "  bakeoff exec infer.py --on cpu+inductor,emu+aot_eager\n"
    "  bakeoff exec train.py --on emu --repeats 5   # timed over 5 clean runs a side\n"
    "  bakeoff exec train.py --on emu -- --on cpu   # the script's own --on",
)
@click.argument("script", type=click.Path(dir_okay=False))
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("--on", "on", multiple=True, default=("cpu",), show_default=True, metavar="DEVICES",
              help="Targets, comma-separated or repeated: devices (emu, xpu, cpu...), or a device with a "
              "torch.compile backend (cpu+inductor, emu+aot_eager): the script's root module calls "
              "are compiled.")  # fmt: skip
@click.option("--reference", default=None, metavar="DEVICE",
              help="Where the reference runs [default: the script's device where it exists, else cpu].")  # fmt: skip
@click.option("--map", "map_devices", multiple=True, default=("cuda",), show_default=True, metavar="DEVICE[=TARGET]",
              help="The device types the script names that are remapped to each target's (cuda=emu: to emu, "
                   "the targets' device).")  # fmt: skip
@click.option("--strict", is_flag=True, help="Fail a run on any rewrite that may change numerics.")
@click.option("--capture", "captures", multiple=True, metavar="MODULE:FUNCTION",
              help="Compare this function's return values, call by call (repeatable).")  # fmt: skip
@click.option("--capture-modules", "capture_modules", multiple=True, metavar="PATTERN",
              help="Compare the outputs of the module calls whose name or class matches this glob "
              "(e.g. '*.mlp', Linear; repeatable; at most 8 calls per module).")  # fmt: skip
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), default=600.0,
              show_default=True, help="Seconds a run may take before it is stopped (a timeout).")  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of random, numpy and torch.")
@click.option("--no-audit", "no_audit", is_flag=True,
              help="Do not audit where each target's work ran (it costs time on tiny ops).")  # fmt: skip
@click.option("--no-files", "no_files", is_flag=True,
              help="Do not compare the files the script writes (safetensors, npy, npz, JSON).")  # fmt: skip
@click.option("--repeats", type=click.IntRange(min=0), default=0, show_default=True, metavar="N",
              help="Time each side over N more runs, without the audit or --capture tracing.")  # fmt: skip
@verbose_option
@db_option
@format_option
def exec_command(
    script: str,
    args: Sequence[str],
    on: Sequence[str],
    reference: str | None,
    map_devices: Sequence[str],
    strict: bool,
    captures: Sequence[str],
    capture_modules: Sequence[str],
    timeout_s: float,
    seed: int,
    no_audit: bool,
    no_files: bool,
    repeats: int,
    verbose: bool,
    db: str | None,
    fmt: str,
) -> None:
    """Run SCRIPT unchanged: as the reference, then on each target with its devices remapped.

    Options bakeoff knows are read anywhere on the line; every other argument goes to the
    script, in order (put the script's own arguments after `--` where a name clashes). Each
    run is a fresh process in a copy of the working directory. The losses the script calls
    backward() on, the --capture'd return values, bakeoff.capture(name, value) calls and the
    files it writes (safetensors, npy, npz, JSON; pickles are never loaded) are compared with
    the reference's; every rewrite is listed with its count and call site.
    The first run of each is audited and is not a fair clock: --repeats N times each side over
    N more runs without the audit, and compares the time between captures span by span.
    Exit code: 0 when the runs were made, 1 with --strict when a target failed, 2 on bad input.
    """
    from bakeoff import api
    from bakeoff.cli.main import _finish_run

    with workload_output_to_stderr():
        run = api.exec_script(
            script,
            args,
            on=on,
            db=db,
            reference=reference,
            map_devices=map_devices,
            strict=strict,
            capture=captures,
            capture_modules=capture_modules,
            timeout_s=timeout_s,
            seed=seed,
            audit=not no_audit,
            files=not no_files,
            repeats=repeats,
            progress=progress(),
        )
    _finish_run(run, fmt, db, strict, verbose=verbose)
