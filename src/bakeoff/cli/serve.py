"""``bakeoff serve``: the team's own service on each target, under its expected traffic.

A thin command over :func:`bakeoff.api.serve_service`; it registers itself on the command group
of :mod:`bakeoff.cli.app`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import click

from bakeoff.cli.app import cli
from bakeoff.cli.common import db_option, format_option, progress, setting_option, verbose_option
from bakeoff.settings.serve import SERVE_OPTIONS

__all__ = ["serve_command"]

_setting = functools.partial(setting_option, SERVE_OPTIONS)


@cli.command(
    "serve",
    epilog="\b\nExamples:\n"
    "  bakeoff serve 'python -m bakeoff.examples.tiny_lm_service --port {port} --device {device}' --on emu \\\n"
    "      --traffic example --rate 20/s --duration 20 --slo 'p99<=500ms'\n"
    "  bakeoff serve 'python -m myservice --port {port}' --on xpu --traffic requests.jsonl --path /v1/generate\n"
    "  bakeoff serve 'python -m myservice --port {port}' --on cuda,neuron --traffic requests.jsonl \\\n"
    "      --slo 'p99<=300ms' --peak 400/s --price neuron=1.34/h --price cuda=4.10/h",
)
@click.argument("command")
@click.option("--on", "on", multiple=True, default=("cpu",), show_default=True, metavar="DEVICES",
              help="Target devices, comma-separated or repeated (emu, xpu, cuda...).")  # fmt: skip
@_setting("reference")
@_setting("map_devices")
@_setting("traffic")
@_setting("rate", type=str)
@_setting("arrivals")
@_setting("duration_s")
@_setting("warmup")
@_setting("cold_s")
@_setting("clients")
@_setting("slo")
@_setting("health")
@_setting("path")
@_setting("dtype")
@_setting("compare")
@_setting("audit")
@_setting("search")
@_setting("search_steps")
@_setting("peak", type=str)
@_setting("headroom", type=str)
@_setting("prices")
@_setting("min_duration_s")
@_setting("start_timeout_s")
@_setting("request_timeout_s")
@_setting("seed")
@verbose_option
@db_option
@format_option
def serve_command(command: str, on: Sequence[str], verbose: bool, db: str | None, fmt: str, **settings: Any) -> None:
    """Start COMMAND on each target and measure it under the same traffic.

    COMMAND is the service's command line, one argument (quote it); {port} is filled with a free
    port and {device} with the target's device. It runs in its own process group with cuda (or
    --map's devices) remapped to the target's device, as bakeoff exec remaps a script; bakeoff
    waits for --health, sends --cold seconds of traffic to the fresh replica (timed: a scale-out
    event), --warmup requests one by one (untimed), then rate x duration
    requests on an open-loop schedule, each timed from when it was due, and stops every
    process of the service. Each target's responses are compared with the reference service's,
    request by request; each --slo objective is met, not met or not conclusive by its interval,
    and a run too short, too small or whose client fell behind is not judged. Where each
    non-CPU target's work ran is audited on a start of the service of its own, over the warm-up
    requests (the measured start runs unaudited). --search (or --peak) then finds the highest
    rate within the objectives, as an interval; with --peak, the replicas the peak needs and,
    with --price, their monthly cost; the decision ranks by cost at the searched rate.
    Exit code: 0 when the run was made, 2 on bad input.
    """
    from bakeoff import api
    from bakeoff.cli.main import _finish_run

    run = api.serve_service(command, on=on, db=db, **settings, progress=progress())
    _finish_run(run, fmt, db, False, verbose=verbose)
