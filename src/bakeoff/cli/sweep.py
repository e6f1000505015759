"""``bakeoff sweep``, ``bakeoff coverage`` and ``bakeoff sweeps``: many workloads on the same
targets, and the coverage they add up to.

Thin commands over :func:`bakeoff.api.sweep` and :func:`bakeoff.api.coverage`; they register
themselves on the command group of :mod:`bakeoff.cli.app`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import click
from rich.markup import escape

from bakeoff.cli.app import cli
from bakeoff.cli.common import (
    EXIT_FAILED,
    Number,
    console,
    db_option,
    emit_json,
    format_option,
    report_options,
    report_paths,
    setting_option,
    workload_output_to_stderr,
)
from bakeoff.settings import COUNT, SWEEP_OPTIONS

__all__ = ["coverage_command", "sweep_command", "sweeps_command"]

_setting = functools.partial(setting_option, SWEEP_OPTIONS, early=True)


def _say_unfinished(population: str, on: Sequence[str], db: str | None, flag: str) -> None:
    """Before a new sweep: a line naming the newest unfinished sweep of the same workloads on the
    same targets in ``db``, and the command that finishes it (the new sweep starts all the same)."""
    from bakeoff.api.common import _targets
    from bakeoff.errors import BakeoffError
    from bakeoff.store.db import Store
    from bakeoff.sweep.population import resolve_population

    try:
        store = Store.open(db, create=False)
        specs = list(resolve_population(population).specs)
        targets = tuple(t.spec for t in _targets(list(on) or "cpu"))
        records = store.list_sweeps()
    except BakeoffError:  # no database yet, or input the sweep itself refuses in its own words
        return
    for record in records:
        if record.specs == specs and tuple(record.targets) == targets and record.done < len(specs):
            console(stderr=True).print(
                f"[dim]· sweep {record.id} of these workloads on these targets stopped at {record.done} of "
                f"{len(specs)} cells: bakeoff sweep --resume {record.id}{escape(flag)} finishes it; this starts "
                "a new one[/dim]"
            )
            return


def _handle_sigint(handler: Any) -> Any:
    """Make ``handler`` SIGINT's (where signals can be handled: the main thread); the one before."""
    import signal

    if handler is None:  # none was set from Python (or this is not the main thread): nothing to restore
        return None
    try:
        return signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread: Python's own stays
        return None


class _Bar:
    """A live bar on stderr: cells done, failures so far, the workload running, an ETA. It is
    redrawn between cells only (no refresh thread), so nothing draws while a workload's output
    is being captured."""

    def __init__(self, db_flag: str = "") -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(
            TextColumn("[bold]sweep"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("[red]{task.fields[failures]} failing"),
            TimeRemainingColumn(),
            TextColumn("[dim]{task.fields[current]}"),
            console=console(stderr=True),
            auto_refresh=False,
            transient=False,
        )
        self.task: Any = None
        self.current = ""
        self.sweep_id: str | None = None
        self.db_flag = db_flag  # the --db the resume hint needs
        self.stopped = False
        self.ctrl_c = False

    def on_ctrl_c(self, _signum: int, _frame: Any) -> None:
        """SIGINT's handler while the sweep runs: Python's own, remembered. An interrupt raised
        inside an object's ``__del__`` (a library's, while Ray starts) is dropped with a warning;
        the next callback raises it again, so that Ctrl-C always stops the sweep."""
        self.ctrl_c = True
        raise KeyboardInterrupt

    def _again(self) -> None:
        if self.ctrl_c:
            raise KeyboardInterrupt

    def status(self, message: str) -> None:
        """The workload the sweep runs now (or what the Ray cluster is doing)."""
        self._again()
        self.current = message
        if self.task is not None:
            self.progress.update(self.task, current=message)
            self.progress.refresh()

    def cell(self, done: Any) -> None:
        """Before the first cell: the sweep's id, and the bar; after each: the counts. The
        workload shown stays the one ``status`` named last: the runner may be on the next
        cell before this one is stored."""
        self._again()
        if self.task is None:
            sweep_id = self.sweep_id = done.sweep_id
            console(stderr=True).print(
                f"[dim]· sweep {sweep_id} (resume it with bakeoff sweep --resume {sweep_id}"
                f"{escape(self.db_flag)})[/dim]"
            )
            self.progress.start()
            self.task = self.progress.add_task("sweep", total=done.total, completed=done.done, failures=0, current="")
        self.progress.update(self.task, completed=done.done, failures=done.failures, current=self.current)
        self.progress.refresh()

    def stop(self) -> None:
        """End the live display (once: each stop would print another line)."""
        if self.task is not None and not self.stopped:
            self.stopped = True
            self.progress.stop()


@cli.command(
    "sweep",
    epilog="\b\nExamples:\n"
    "  bakeoff sweep arch:all --on cpu+aot_eager,cpu+inductor\n"
    "  bakeoff sweep arch:causal_lm --on emu --timing none\n"
    "  bakeoff sweep models.txt --on cpu+openvino --expect expected.toml\n"
    "  bakeoff sweep --resume SWEEP_ID\n"
    "  bakeoff sweep arch:causal_lm --on cpu,cuda --executor ray --ray-address auto",
)
@click.argument("population", required=False)
@click.option("--on", "on", multiple=True, metavar="TARGETS",
              help="Targets, comma-separated or repeated (as for bakeoff trial).  [default: cpu]")  # fmt: skip
@click.option("--resume", default=None, metavar="SWEEP_ID",
              help="Finish an interrupted sweep with its own targets and settings.")  # fmt: skip
@_setting("timing", default=None)  # None: not given, which a resume refuses to change
@_setting("timeout_s", default=None)
@_setting("checks")
@_setting("env")
@click.option("--limit", type=Number(COUNT), default=None, metavar="N",
              help="Run at most N pending workloads now (resume later for the rest).")  # fmt: skip
@click.option("--expect", "expect", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Classify each cell against these expected grades; exit 1 on a regression.")  # fmt: skip
@click.option("--write-expect", "write_expect", is_flag=True,
              help="Write this sweep's grades to the --expect file (creating or replacing it).")  # fmt: skip
@click.option("--no-matrix", "no_matrix", is_flag=True, help="Print the figures and reasons, not the matrix.")
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="Where cells run: worker processes here, or one Ray task per cell.")  # fmt: skip
@click.option("--ray-address", "ray_address", default=None, metavar="ADDRESS",
              help="With --executor ray: the cluster (auto, ray://HOST:PORT); default: a local one.")  # fmt: skip
@db_option
@format_option
def sweep_command(
    population: str | None,
    on: Sequence[str],
    resume: str | None,
    timing: str | None,
    timeout_s: float | None,
    checks: Sequence[str],
    env: Sequence[str],
    limit: int | None,
    expect: str | None,
    write_expect: bool,
    no_matrix: bool,
    executor: str,
    ray_address: str | None,
    db: str | None,
    fmt: str,
) -> None:
    """Run every workload of POPULATION on the targets and print the coverage.

    POPULATION is arch:all, arch:causal_lm, arch:base (every architecture arch: builds) or a
    file with one workload spec per line. Each workload is stored as it finishes; an
    interrupted sweep continues with --resume (on either executor). Exit code: 0 when the
    sweep ran, 1 with --expect when a cell regressed, 2 on bad input.
    """
    from bakeoff import api
    from bakeoff.errors import SpecError

    if write_expect and expect is None:
        raise SpecError("--write-expect needs --expect FILE", hint="e.g. --expect expected.toml --write-expect")
    if write_expect and expect is not None:
        from bakeoff.outfiles import check_writable
        from bakeoff.store.connection import resolve_db_url

        check_writable(expect, db=resolve_db_url(db))  # refused now, not after the sweep
    expected = None
    if expect is not None and not write_expect:
        from bakeoff.sweep.expect import read_expectations

        expected = read_expectations(expect)  # a bad file is refused before the sweep runs
    from bakeoff.store.connection import db_flag

    bar = _Bar(db_flag(db))
    if resume is None and population is not None:
        _say_unfinished(population, on, db, bar.db_flag)
    previous = _handle_sigint(bar.on_ctrl_c)
    try:
        with workload_output_to_stderr():
            found = api.sweep(
                population, on or None, db=db, resume=resume, timing=timing, timeout_s=timeout_s, checks=checks,
                env=env, limit=limit, progress=bar.cell, status=bar.status, executor=executor,
                ray_address=ray_address,
            )  # fmt: skip
        bar._again()  # an interrupt dropped after the last callback: the sweep ended, but it was asked to stop
    except KeyboardInterrupt as exc:  # one line, instead of the generic "interrupted"
        bar.stop()
        if type(exc) is not KeyboardInterrupt:
            raise  # SIGTERM, which unwinds like Ctrl-C: its own line and exit code
        where = f"bakeoff sweep --resume {bar.sweep_id}{bar.db_flag} finishes it" if bar.sweep_id else "nothing ran yet"
        click.echo(f"bakeoff: interrupted: every finished cell is stored; {where}", err=True)
        raise SystemExit(130) from None
    finally:
        _handle_sigint(previous)
        bar.stop()
    _print_coverage(found, fmt, no_matrix, expect, expected, write_expect)


def _print_coverage(
    found: Any, fmt: str, no_matrix: bool, expect: str | None, expected: Any, write_expect: bool
) -> None:
    from bakeoff.sweep.expect import classify, write_expectations

    checked = classify(found, expected) if expected is not None else None
    if fmt == "json":
        data = found.to_dict()
        if checked is not None:
            data["expectations"] = [e.to_dict() for e in checked]
        emit_json(data)
    else:
        from bakeoff.report.coverage import coverage_view, expectations_view

        out = console()
        out.print(coverage_view(found, matrix=not no_matrix))
        if checked is not None:
            out.print(expectations_view(checked, expect or ""))
    if write_expect and expect is not None:
        count = write_expectations(expect, found)
        console(stderr=True).print(f"wrote the expected grades of {count} cells to {expect}", markup=False)
    if checked is not None and any(e.status == "regressed" for e in checked):
        raise SystemExit(EXIT_FAILED)


@cli.command("coverage", epilog="Example: bakeoff coverage 3f2a --html coverage.html")
@click.argument("sweep_id")
@report_options(coverage=True)
@click.option("--expect", "expect", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Classify each cell against these expected grades; exit 1 on a regression.")  # fmt: skip
@click.option("--against", "against", default=None, metavar="SWEEP_ID",
              help="An earlier sweep: which cells started or stopped working (exit 1 if any stopped).")  # fmt: skip
@click.option("--no-matrix", "no_matrix", is_flag=True, help="Print the figures and reasons, not the matrix.")
@db_option
@format_option
def coverage_command(
    sweep_id: str, expect: str | None, against: str | None, no_matrix: bool, db: str | None, fmt: str,
    **paths: str | None,
) -> None:  # fmt: skip
    """Print a stored sweep's matrix, its coverage at every grade and why cells stopped."""
    from bakeoff import api
    from bakeoff.errors import SpecError
    from bakeoff.outfiles import check_writable, write_text
    from bakeoff.report.formats import REPORT_FORMATS
    from bakeoff.store.connection import resolve_db_url

    if expect is not None and against is not None:
        raise SpecError("--expect with --against", hint="compare with one of them at a time")
    database = resolve_db_url(db)
    outputs = report_paths(paths)
    for path in outputs.values():
        if path is not None:
            check_writable(path, db=database)
    expected = None
    if expect is not None:
        from bakeoff.sweep.expect import read_expectations

        expected = read_expectations(expect)
    found = api.coverage(sweep_id, db=db)
    if against is not None:
        from bakeoff.sweep.changes import since
        from bakeoff.sweep.expect import grades_of

        earlier = api.coverage(against, db=db)
        expected, expect = grades_of(earlier), since(earlier, found)
    for name, path in outputs.items():
        if path is not None:
            write_text(path, REPORT_FORMATS[name].render_coverage(found), db=database)
            console(stderr=True).print(f"wrote {path}", markup=False)
    _print_coverage(found, fmt, no_matrix, expect, expected, False)


@cli.command("sweeps", epilog="Example: bakeoff sweeps --limit 5")
@click.option("--limit", type=Number(COUNT), default=20, show_default=True)
@db_option
@format_option
def sweeps_command(limit: int, db: str | None, fmt: str) -> None:
    """List the newest sweeps: population, targets, how many workloads are stored."""
    from bakeoff import api

    found = api.sweeps(db=db, limit=limit)
    rows = [
        {
            "id": s.id,
            "created_at": s.created_at,
            "population": s.population.get("name"),
            "size": len(s.specs),
            "stored": s.done,
            "targets": list(s.targets),
            "transformers": s.population.get("transformers"),
        }
        for s in found
    ]
    if fmt == "json":
        emit_json(rows)
        return
    from rich.table import Table

    table = Table(title=f"{len(rows)} sweep(s)", title_justify="left")
    for column in ("id", "started", "population", "stored", "targets", "transformers"):
        table.add_column(column)
    for r in rows:
        table.add_row(
            r["id"], r["created_at"][:19].replace("T", " "), str(r["population"]), f"{r['stored']}/{r['size']}",
            ", ".join(r["targets"]), str(r["transformers"] or "-"),
        )  # fmt: skip
    console().print(table)
