"""``bakeoff`` commands. Each parses options, calls one API function and renders the value.

Only :func:`main` catches errors: a :class:`~bakeoff.errors.BakeoffError` becomes one line on
stderr and exit code 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from typing import Any

import click

from bakeoff.cli import dist as _dist  # noqa: F401  (registers dist)
from bakeoff.cli import fit as _fit  # noqa: F401  (registers fit)
from bakeoff.cli import kb as _kb
from bakeoff.cli import listings as _listings  # noqa: F401  (registers targets, workloads, checks, history, show)
from bakeoff.cli import revisit as _revisit  # noqa: F401  (registers regressions, compare, rerun, report)
from bakeoff.cli import script as _script  # noqa: F401  (registers exec)
from bakeoff.cli import serve as _serve  # noqa: F401  (registers serve)
from bakeoff.cli import sweep as _sweep  # noqa: F401  (registers sweep, coverage, sweeps)
from bakeoff.cli.app import cli
from bakeoff.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    setting_option,
    workload_output_to_stderr,
)
from bakeoff.cli.common import console as _console
from bakeoff.cli.common import db_option as _db_option
from bakeoff.cli.common import emit_json as _emit_json
from bakeoff.cli.common import format_option as _format_option
from bakeoff.cli.common import progress as _progress
from bakeoff.cli.common import verbose_option as _verbose_option
from bakeoff.errors import BakeoffError
from bakeoff.settings import PLAN_OPTIONS, PLAN_TRIAL_KEYWORDS, TRIAL_OPTIONS

__all__ = ["cli", "main"]


@cli.command(epilog="Example: bakeoff baseline 'arch:llama?layers=4' --dtype bf16")
@click.argument("workload")
@click.option(
    "--dtype",
    "dtypes",
    multiple=True,
    metavar="DTYPE",
    help="Also preserve an eager CPU reference in this dtype (repeatable).",
)
@click.option("--refresh", is_flag=True, help="Recompute even if a fresh baseline is stored.")
@_db_option
@_format_option
def baseline(workload: str, dtypes: Sequence[str], refresh: bool, db: str | None, fmt: str) -> None:
    """Preserve the reference outputs of WORKLOAD (float64 golden and eager CPU runs)."""
    from bakeoff import api

    with workload_output_to_stderr():
        info, notes = api.baseline(workload, db=db, dtypes=dtypes, refresh=refresh)
    if fmt == "json":
        _emit_json({**info.to_dict(), "notes": notes})
        return
    from bakeoff.report.terminal import baseline_view

    _console().print(baseline_view(info, notes))


_setting = functools.partial(setting_option, TRIAL_OPTIONS)


def _plan_settings(command: Callable[..., Any]) -> Callable[..., Any]:
    """The trial settings a plan takes (:data:`~bakeoff.settings.PLAN_TRIAL_KEYWORDS`)."""
    for keyword in reversed(PLAN_TRIAL_KEYWORDS):
        command = _setting(keyword, early=keyword == "prices")(command)
    return command


_clear_requirements_option = click.option(
    "--clear-requirements", is_flag=True, help="Forget the workload's kept requirements."
)


def _requirements_given(settings: dict[str, Any], clear: bool) -> None:
    """``settings["requirements"]`` as the run takes them: [] with --clear-requirements (the
    kept ones forgotten), None without --require (the kept ones apply), else those given."""
    from bakeoff.errors import SpecError

    if clear and settings["requirements"]:
        raise SpecError("--clear-requirements with --require", hint="give one or the other")
    settings["requirements"] = [] if clear else (list(settings["requirements"]) or None)


def _finish_run(
    run: Any,
    fmt: str,
    db: str | None,
    strict: bool,
    strict_placement: bool = False,
    prices: Sequence[str] | None = None,
    extra: dict[str, Any] | None = None,
    verbose: bool = False,
) -> None:
    """Print the run and its decision (priced by ``prices``, None: the run's own), as a summary
    unless ``verbose``; with --strict exit 1 on a failed target or a requirement not met."""
    from bakeoff import api
    from bakeoff.analysis.cost import parse_prices
    from bakeoff.report.evidence import readable
    from bakeoff.results.codec import run_to_json
    from bakeoff.store.connection import db_flag, display_db_url, resolve_db_url

    run = readable(run)
    parsed = None if not prices else parse_prices(prices)
    if fmt == "json":
        from bakeoff.verdicts.remedies import what_it_takes

        _emit_json(
            {
                **run_to_json(run),
                "decision": api.decide(run, prices=prices or None).to_dict(),
                "what_it_takes": {t: [i.to_dict() for i in items] for t, items in what_it_takes(run).items()},
                **(extra or {}),
            }
        )
    else:
        from bakeoff.report.terminal import run_view

        console = _console()
        where = display_db_url(resolve_db_url(db))
        shown = run_view(run, where=where, width=console.width, prices=parsed, verbose=verbose, db_flag=db_flag(db))
        console.print(shown)
    if (strict or strict_placement) and run.failures(placement=strict_placement, requirements=strict):
        raise SystemExit(EXIT_FAILED)


@cli.command(
    epilog="\b\nExample:\n"
    "  bakeoff trial 'arch:llama?layers=4' --on cpu,cpu+aot_eager,'cpu+inductor?dynamic=false' \\\n"
    "      --profile 'seq=uniform(8,128)&n=50' --pad-to-buckets auto"
)
@click.argument("workload")
@click.option(
    "--on",
    "on",
    multiple=True,
    default=("cpu",),
    show_default=True,
    metavar="TARGETS",
    help="Targets, comma-separated or repeated: DEVICE[:INDEX][+BACKEND][?option=value&...].",
)
@_setting("min_samples")
@_setting("min_seconds")
@_setting("timeout_s", default=None)  # None: not given, which --in-process refuses
@_setting("isolate")
@_setting("refresh_baseline")
@_setting("profile")
@_setting("pad_to_buckets")
@_setting("max_buckets")
@_setting("cold_compile_cache")
@_setting("env")
@_setting("scenarios")
@_setting("checks")
@click.option(
    "--localize",
    is_flag=True,
    help="For every target whose outputs fail, find the module call where the divergence starts "
    "(the localization check; checks=['localization'] in the API).",
)
@_setting("prices", early=True)
@_setting("requirements")
@_clear_requirements_option
@_setting("interleave")
@_setting("replicates")
@_setting("process_spread")
@click.option("--strict", is_flag=True, help="Exit 1 if any target errors, fails correctness or misses a requirement.")
@click.option(
    "--strict-placement",
    is_flag=True,
    help="Exit 1 also if work did not stay on a target's device or engine (placement fallbacks, "
    "left_on_host or engine_did_not_run; on_device and a CPU target's not_applicable pass).",
)
@_verbose_option
@_db_option
@_format_option
def trial(
    workload: str,
    on: Sequence[str],
    localize: bool,
    clear_requirements: bool,
    strict: bool,
    strict_placement: bool,
    verbose: bool,
    db: str | None,
    fmt: str,
    **settings: Any,
) -> None:
    """Run WORKLOAD on each target: correctness, where the work ran, latency, memory.

    WORKLOAD is arch:<model_type>[?options], hf:<directory> or py:<module or file.py>:<function>.
    Targets that cannot run here are skipped with the reason. The eager CPU reference is
    always measured too. Exit code: 0 when the trial ran (whatever the verdicts), 1 with
    --strict when a target failed (or with --strict-placement when work left the device),
    2 on bad input.
    """
    from bakeoff.errors import SpecError

    if not settings["isolate"] and settings["timeout_s"] is not None:
        raise SpecError("--timeout needs worker processes", hint="drop --in-process, or drop --timeout")
    _requirements_given(settings, clear_requirements)
    if settings["timeout_s"] is None:
        settings["timeout_s"] = TRIAL_OPTIONS["timeout_s"].default
    if localize and "localization" not in settings["checks"]:
        settings["checks"] = [*settings["checks"], "localization"]
    with workload_output_to_stderr():
        # the reference's worker starts importing before this process imports the rest
        from bakeoff.runner.workers import start_workers
        from bakeoff.workload.base import parse_workload

        workers = start_workers(parse_workload(workload)) if settings["isolate"] else None
        from bakeoff import api

        run = api.trial(workload, on=on, db=db, **settings, progress=_progress(), workers=workers)
    _finish_run(run, fmt, db, strict, strict_placement, verbose=verbose)


@cli.command(
    epilog="\b\nExample:\n  bakeoff plan arch:llama --on cpu+inductor,cpu+openvino "
    "--profile 'seq=lognormal(8,256)&n=50' --require 'p90<=5ms' --budget 10min"
)
@click.argument("workload")
@click.option("--on", "on", multiple=True, default=["cpu"], show_default=True, metavar="TARGETS",
              help="Target specs to plan for (comma-separated or repeated); options you set are kept.")  # fmt: skip
@setting_option(PLAN_OPTIONS, "budget")
@_plan_settings
@_clear_requirements_option
@_db_option
@_format_option
def plan(
    workload: str, on: Sequence[str], budget: str, clear_requirements: bool, db: str | None, fmt: str, **settings: Any
) -> None:
    """Search the adjustments for WORKLOAD within a time budget and recommend a variant.

    Tries the targets as given (padded to buckets with a profile), then, as the budget allows,
    the options you left unset (dynamic shapes, an engine's float32 precision, one bucket).
    Every stage's run is stored; the decision is taken over all of them, and a variant that
    is wrong is never recommended. Exit code: 0 when the plan ran, 2 on bad input.
    """
    from bakeoff import api

    _requirements_given(settings, clear_requirements)
    with workload_output_to_stderr():
        found = api.plan(workload, on=on, budget=budget, db=db, progress=_progress(), **settings)
    if fmt == "json":
        _emit_json(found.to_dict())
        return
    from bakeoff.report.terminal import plan_view

    _console().print(plan_view(found))


@cli.command(epilog="Example: bakeoff demo --db /tmp/demo.db")
@_verbose_option
@_db_option
@_format_option
def demo(verbose: bool, db: str | None, fmt: str) -> None:
    """Run the bundled tiny workload (arch:llama) on every target available here."""
    from bakeoff import api

    with workload_output_to_stderr():
        run = api.demo(db=db, progress=_progress())
    _finish_run(run, fmt, db, strict=False, verbose=verbose)


for _command in _kb.COMMANDS:  # db, export, import, note, tag
    cli.add_command(_command)


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the main thread is, so that it unwinds like Ctrl-C: workers are
    stopped (they are daemons of this process) and nothing half-done is stored."""


def _terminate(signum: int, frame: Any) -> None:
    raise _Terminated


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``bakeoff`` and ``python -m bakeoff``: the single error boundary.

    Ctrl-C exits 130 and SIGTERM 143, each with one line; workers ignore Ctrl-C themselves and
    are stopped by this process on its way out.

    Called without ``argv`` (as the program), a command that ran to its end (exit code 0, or 1
    for ``--strict``) ends the process at once: see :func:`_exit_now`.
    """
    if argv is not None:
        _main(argv)
        return
    try:
        _main(None)
    except SystemExit as exc:
        if exc.code not in (None, 0, EXIT_FAILED):
            raise
        _exit_now(exc.code or 0)
    _exit_now(0)


def _exit_now(code: int) -> None:
    """End the process with ``code`` after what it registered to do on the way out (workers
    stopped and waited for, temporary files removed, logs flushed), skipping the interpreter's
    teardown of every module: seconds, once torch and transformers are imported, after the
    verdict is printed. Only when torch is loaded and no other thread must be waited for."""
    import threading

    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if "torch" not in sys.modules or others:
        sys.exit(code)
    import atexit
    import os

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _main(argv: Sequence[str] | None) -> None:
    import signal

    signal.signal(signal.SIGTERM, _terminate)
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="bakeoff", standalone_mode=False)
    except click.exceptions.Abort as exc:  # click's wrapping of Ctrl-C (and of our SIGTERM)
        if isinstance(exc.__cause__, _Terminated):
            click.echo("bakeoff: terminated", err=True)
            sys.exit(143)
        click.echo(
            "bakeoff: interrupted" if isinstance(exc.__cause__, KeyboardInterrupt) else "bakeoff: aborted", err=True
        )
        sys.exit(130)
    except click.UsageError as exc:  # one line, like every other bad input, not click's usage block
        command = exc.ctx.command_path if exc.ctx is not None else "bakeoff"
        click.echo(f"bakeoff: error: {exc.format_message()} (see `{command} --help`)", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except BakeoffError as exc:
        click.echo(f"bakeoff: error: {exc.one_line()}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except _Terminated:
        click.echo("bakeoff: terminated", err=True)
        sys.exit(143)
    except KeyboardInterrupt:
        click.echo("bakeoff: interrupted", err=True)
        sys.exit(130)
