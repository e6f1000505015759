"""The commands that look without running anything: what can run here (``targets``,
``workloads``, ``checks``) and what has run (``history``, ``show``).

Thin adapters like the rest of the CLI: each calls one function of :mod:`bakeoff.api` and renders
the value; they register themselves on the command group of :mod:`bakeoff.cli.app`, and errors go
to the boundary in :mod:`bakeoff.cli.main`.
"""

from __future__ import annotations

from collections.abc import Sequence

import click

from bakeoff.cli.app import cli
from bakeoff.cli.common import Number
from bakeoff.cli.common import console as _console
from bakeoff.cli.common import db_option as _db_option
from bakeoff.cli.common import emit_json as _emit_json
from bakeoff.cli.common import format_option as _format_option
from bakeoff.cli.common import price_option as _price_option
from bakeoff.cli.common import verbose_option as _verbose_option
from bakeoff.settings import COUNT

__all__ = ["checks", "history", "show", "targets", "workloads"]


def _listing(name: str, fmt: str) -> None:
    """Print ``api.<name>()``: as JSON, or through the terminal's ``<name>_view``."""
    from bakeoff import api

    info = getattr(api, name)()
    if fmt == "json":
        _emit_json(info)
        return
    from bakeoff.report import terminal

    _console().print(getattr(terminal, f"{name}_view")(info))


@cli.command(epilog="Example: bakeoff targets --format json")
@_format_option
def targets(fmt: str) -> None:
    """List devices and torch.compile backends available here."""
    _listing("targets", fmt)


@cli.command(epilog="Example: bakeoff workloads")
@_format_option
def workloads(fmt: str) -> None:
    """List workload kinds and the Hugging Face architectures arch: accepts."""
    _listing("workloads", fmt)


@cli.command(epilog="Example: bakeoff checks --format json")
@_format_option
def checks(fmt: str) -> None:
    """List the checks (plugins' too): when they run, their options and requirement metrics."""
    _listing("checks", fmt)


@cli.command(epilog="Example: bakeoff history --workload arch:llama --limit 5")
@click.option("--limit", type=Number(COUNT), default=20, show_default=True, help="Runs to list.")
@click.option("--workload", default=None, help="Only runs of this workload spec.")
@click.option("--tag", default=None, help="Only runs with this tag (see `bakeoff tag`).")
@_db_option
@_format_option
def history(limit: int, workload: str | None, tag: str | None, db: str | None, fmt: str) -> None:
    """What was run, when, and in which environment (newest first)."""
    from bakeoff import api

    rows = api.history(db=db, limit=limit, workload=workload, tag=tag)
    if fmt == "json":
        _emit_json([r.to_dict() for r in rows])
        return
    if not rows:
        said = f"no runs of {workload} yet" if workload else "no runs yet; try `bakeoff demo`"
        said = f"no runs tagged {tag}" + (f" of {workload}" if workload else "") if tag else said
        _console().print(said, markup=False, highlight=False)
        return
    from bakeoff.report.terminal import history_table

    _console().print(history_table(rows))


@cli.command(
    epilog="\b\nExamples:\n  bakeoff show 3f2a --format json\n"
    "  bakeoff show 3f2a --price cpu=0.34/h --price neuron=1.34/h\n  bakeoff show 3f2a --log"
)
@click.argument("run_id")
@click.option(
    "--log", "show_log", is_flag=True, help="Print what the libraries said while each target ran (kept per run)."
)
@_price_option
@_verbose_option
@_db_option
@_format_option
def show(run_id: str, show_log: bool, prices: Sequence[str], verbose: bool, db: str | None, fmt: str) -> None:
    """Show a stored run (RUN_ID may be a unique prefix), with its decision, tags and notes."""
    from bakeoff import api
    from bakeoff.cli.kb import annotations_json, print_annotations
    from bakeoff.cli.main import _finish_run

    run = api.show(run_id, db=db)
    if show_log and fmt != "json":  # the JSON document holds each target's log as stored
        from bakeoff.report.terminal import log_view

        _console().print(log_view(run))
        return
    found = api.notes_and_tags(run.run_id, db=db)
    _finish_run(run, fmt, db, strict=False, prices=prices, extra=annotations_json(found), verbose=verbose)
    if fmt != "json":
        print_annotations(_console(), found["notes"], found["tags"])
