"""``bakeoff regressions``, ``compare``, ``rerun`` and ``report``: revisiting after an update.

Thin commands over :mod:`bakeoff.api`; they register themselves on the command group of :mod:`bakeoff.cli.app`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click
from rich.markup import escape

from bakeoff.cli.app import cli
from bakeoff.cli.common import (
    EXIT_FAILED,
    Number,
    price_option,
    report_options,
    report_paths,
    setting_option,
    verbose_option,
    workload_output_to_stderr,
)
from bakeoff.cli.common import console as _console
from bakeoff.cli.common import db_option as _db_option
from bakeoff.cli.common import emit_json as _emit_json
from bakeoff.cli.common import format_option as _format_option
from bakeoff.cli.common import progress as _progress
from bakeoff.settings import FRACTION, LOCALIZE_OPTIONS

if TYPE_CHECKING:
    from bakeoff.verdicts.regressions import Thresholds

__all__ = ["compare", "regressions", "report", "rerun"]

_latency_option = click.option(
    "--latency-threshold",
    type=Number(FRACTION),
    default=0.10,
    show_default=True,
    help="A latency (or, where both runs have prices, cost) change counts only beyond this fraction "
    "(and when its 95% interval excludes no change).",
)


def _thresholds(latency: float) -> Thresholds:
    from bakeoff.verdicts.regressions import Thresholds

    return Thresholds(latency=latency, cost=latency)


def _paired(tag: str | None) -> tuple[str, ...]:
    """What each result was compared with, for the table's footer (none: its default)."""
    return (f"the newest earlier run tagged {tag}",) if tag is not None else ()


@cli.command(
    epilog="\b\nExamples:\n  bakeoff regressions --workload arch:llama --strict\n"
    "  bakeoff regressions --against nightly       # against the runs tagged nightly\n"
    "  bakeoff regressions --sweep 9c1e            # against the sweep before it\n"
    "  bakeoff regressions --sweep 9c1e --against 3f2a --strict"
)
@click.option("--workload", default=None, help="Only this workload spec.")
@click.option("--target", default=None, help="Only this target spec.")
@click.option("--sweep", "sweep_id", default=None, metavar="SWEEP_ID",
              help="Compare this sweep with an earlier one: cells that started or stopped working, "
              "and each cell's runs metric by metric.")  # fmt: skip
@click.option("--against", default=None, metavar="TAG|SWEEP_ID",
              help="The baseline: the newest earlier run with this tag (`bakeoff tag RUN NAME`), whatever "
              "its environment; with --sweep, the earlier sweep (default: the one before it of the same "
              "population).")  # fmt: skip
@_latency_option
@click.option("--bisect", is_flag=True,
              help="For each target whose median latency got slower, find which environment change causes "
              "it: repeat the trial here as it is and with each change put back alone (a package at its "
              "earlier version, installed apart; an environment variable) and say which moves it back.")  # fmt: skip
@click.option("--strict", is_flag=True, help="Exit 1 if anything regressed or now fails.")
@_db_option
@_format_option
def regressions(
    workload: str | None, target: str | None, sweep_id: str | None, against: str | None, latency_threshold: float,
    bisect: bool, strict: bool, db: str | None, fmt: str,
) -> None:  # fmt: skip
    """What changed since the previous environment, for each workload and target.

    Compares each workload + target's latest result with the newest earlier one from a
    different environment (or, with --against TAG, the newest earlier run with that tag) and
    classifies every metric: improved, regressed, unchanged, not comparable (the workload,
    the settings that decide what is measured or the adjustments differ) or failed. A timing
    change on a side flagged noisy is not conclusive, and never counts for --strict. With
    --sweep, compares two sweeps of one population instead: each cell's grade (a workload that
    no longer builds has no run to compare, only its grade), then each cell's two runs.
    """
    from bakeoff import api

    if sweep_id is not None:
        if bisect:
            raise click.UsageError("--bisect repeats single trials: leave out --sweep, or give --workload")
        _sweep_regressions(sweep_id, against, workload, target, latency_threshold, strict, db, fmt)
        return
    chosen = {"db": db, "workload": workload, "target": target, "against": against}
    bisections: list[Any] = []
    if bisect:
        found, bisections = api.bisect(**chosen, thresholds=_thresholds(latency_threshold), progress=_progress())
    else:
        found = api.regressions(**chosen, thresholds=_thresholds(latency_threshold))
    if fmt == "json":
        comparisons = [c.to_dict() for c in found]
        bisected = {"comparisons": comparisons, "bisections": [b.to_dict() for b in bisections]}
        _emit_json(bisected if bisect else comparisons)
    elif not found:
        _console().print(
            f"nothing to compare: no workload and target has a run tagged {escape(against)} before its latest"
            if against is not None
            else "nothing to compare: no workload and target has runs in two environments yet"
        )
    else:
        from bakeoff.report.changes import regressions_table

        _console().print(regressions_table(found, *_paired(against)))
    if bisect and fmt != "json":
        from bakeoff.report.bisect import bisection_view

        _console().print(
            bisection_view(bisections)
            if bisections
            else "nothing to bisect: no trial's median latency got slower beyond the threshold"
        )
    if strict and any(c.outcome in ("regressed", "failed") for c in found):
        raise SystemExit(EXIT_FAILED)


def _sweep_regressions(
    sweep_id: str, against: str | None, workload: str | None, target: str | None, latency: float, strict: bool,
    db: str | None, fmt: str,
) -> None:  # fmt: skip
    from dataclasses import replace

    from bakeoff import api

    found = api.sweep_regressions(sweep_id, against=against, db=db, thresholds=_thresholds(latency))

    def kept(c: Any) -> bool:
        return (workload is None or c.workload == workload) and (target is None or c.target == target)

    found = replace(
        found, cells=tuple(c for c in found.cells if kept(c)), metrics=tuple(m for m in found.metrics if kept(m))
    )
    if fmt == "json":
        _emit_json(found.to_dict())
    else:
        from rich.console import Group

        from bakeoff.report.changes import regressions_table
        from bakeoff.report.coverage import expectations_view
        from bakeoff.sweep.changes import since

        moved = [m for m in found.metrics if m.outcome != "unchanged"]
        paired = f"the same cell's run in sweep {found.against.sweep_id}"
        parts = [
            f"sweep {found.sweep.sweep_id} of {found.sweep.population.get('name')}",
            expectations_view(list(found.cells), since(found.against, found.sweep), before="was"),
            regressions_table(moved, paired)
            if moved
            else f"{len(found.metrics)} cell(s) ran in both sweeps: every metric unchanged",
        ]
        _console().print(Group(*parts))
    if strict and found.regressed:
        raise SystemExit(EXIT_FAILED)


@cli.command(epilog="\b\nExamples:\n  bakeoff compare 3f2a 9c1e\n  bakeoff compare 9c1e:cpu+inductor 9c1e:cpu+openvino")
@click.argument("a")
@click.argument("b")
@_latency_option
@_db_option
@_format_option
def compare(a: str, b: str, latency_threshold: float, db: str | None, fmt: str) -> None:
    """Two runs (or two RUN:TARGET results) side by side, every metric classified (B against A)."""
    from bakeoff import api

    found = api.compare(a, b, db=db, thresholds=_thresholds(latency_threshold))
    if fmt == "json":
        _emit_json([c.to_dict() for c in found])
        return
    from bakeoff.report.changes import comparison_view

    _console().print(comparison_view(found))


@cli.command(epilog="\b\nExamples:\n  bakeoff localize 3f2a\n  bakeoff localize 3f2a:emu")
@click.argument("run")
@setting_option(LOCALIZE_OPTIONS, "timeout_s")
@_db_option
@_format_option
def localize(run: str, timeout_s: float, db: str | None, fmt: str) -> None:
    """Find where RUN's failed targets (or RUN:TARGET) go wrong, module by module, and store it
    with the run (what `bakeoff trial --localize` does during the trial)."""
    from bakeoff import api

    with workload_output_to_stderr():
        found = api.localize(run, db=db, timeout_s=timeout_s, progress=_progress())
    if fmt == "json":
        _emit_json({spec: value.to_dict() for spec, value in found})
        return
    from bakeoff.checks.localization import LocalizationCheck

    for spec, value in found:
        for line in LocalizationCheck().facts(value, None):
            _console().print(f"{spec}: {line}", markup=False)


@cli.command(
    epilog="\b\nExamples:\n  bakeoff rerun --tag nightly\n  bakeoff rerun 3f2a\n"
    "  bakeoff rerun 3f2a --tag driver-560       # the new run is tagged driver-560"
)
@click.argument("run_id", required=False)
@click.option("--workload", default=None, help="Repeat the latest run of this workload spec.")
@click.option("--tag", default=None, metavar="NAME",
              help="Tag the new runs. Alone: repeat every run with this tag, and show what changed against "
              "the newest earlier run with it.")  # fmt: skip
@click.option("--in-process", is_flag=True, help="Run targets in this process, whatever the stored run did.")
@click.option("--refresh-baseline", is_flag=True, help="Recompute the baseline first.")
@click.option(
    "--allow-code-env",
    is_flag=True,
    help="Apply stored environment switches that load code (LD_PRELOAD, PYTHONPATH, ...); refused otherwise.",
)
@click.option("--strict", is_flag=True, help="Exit 1 if a repeated target regressed or now fails.")
@verbose_option
@_db_option
@_format_option
def rerun(
    run_id: str | None,
    workload: str | None,
    tag: str | None,
    in_process: bool,
    refresh_baseline: bool,
    allow_code_env: bool,
    strict: bool,
    verbose: bool,
    db: str | None,
    fmt: str,
) -> None:
    """Repeat stored trials in this environment (same workload, targets, profile, switches,
    timing), or a stored `bakeoff exec` run (same script, arguments, targets, from the directory
    it ran in), then show what changed since the previous environment (with --tag alone: since
    the newest earlier run with the tag).

    A run that `bakeoff import` brought is repeated only if its workload is one bakeoff builds
    itself (arch:): a script, a py: module or a model directory named by someone else's export
    is refused, before anything runs."""
    from bakeoff import api

    with workload_output_to_stderr():
        runs = api.rerun(
            run_id,
            workload=workload,
            tag=tag,
            db=db,
            isolate=False if in_process else None,
            refresh_baseline=refresh_baseline,
            allow_code_env=allow_code_env,
            progress=_progress(),
        )
    new_ids = {r.run_id for r in runs}
    against = tag if run_id is None and workload is None else None  # the tag chose the runs repeated
    found = [
        c
        for spec in dict.fromkeys(r.workload["spec"] for r in runs)
        for c in api.regressions(db=db, workload=spec, against=against)
        if c.after_run in new_ids
    ]
    if fmt == "json":
        _emit_json({"runs": [r.to_dict() for r in runs], "regressions": [c.to_dict() for c in found]})
    else:
        from bakeoff.report.changes import regressions_table
        from bakeoff.report.terminal import run_view

        console = _console()
        for run in runs:
            console.print(run_view(run, width=console.width, verbose=verbose))
        console.print(
            regressions_table(found, *_paired(against))
            if found
            else "no earlier run "
            + (f"tagged {escape(against)}" if against is not None else "in another environment")
            + " to compare with"
        )
    if strict and any(c.outcome in ("regressed", "failed") for c in found):
        raise SystemExit(EXIT_FAILED)


@cli.command(epilog="\b\nExample:\n  bakeoff report --workload arch:llama --html report.html --markdown report.md")
@click.argument("run_ids", nargs=-1)
@click.option("--workload", default=None, help="Every run of this workload spec.")
@click.option("--tag", default=None, help="Every run with this tag.")
@report_options()
@_latency_option
@price_option
@_db_option
def report(
    run_ids: Sequence[str],
    workload: str | None,
    tag: str | None,
    latency_threshold: float,
    prices: Sequence[str],
    db: str | None,
    **paths: str | None,
) -> None:
    """Write an evidence report for RUN_IDS (or a workload, a tag; default: every run).

    For each target: does it run correctly, where did the work run, does it meet the
    requirements, what adjustments it took and how it failed, with plots, the regressions since
    the previous environment and every run's environment.
    """
    from bakeoff import api

    if sum(bool(x) for x in (run_ids, workload, tag)) > 1:
        from bakeoff.errors import SpecError

        raise SpecError("choose runs one way", hint="give RUN_IDS, --workload or --tag, not several")
    outputs = report_paths(paths)
    evidence = api.report(
        run_ids,
        workload=workload,
        tag=tag,
        db=db,
        **outputs,
        thresholds=_thresholds(latency_threshold),
        prices=prices or None,
    )
    written = ", ".join(p for p in outputs.values() if p)
    click.echo(f"wrote {written}: {len(evidence.runs)} run(s), {len(evidence.regressions)} comparison(s)")
