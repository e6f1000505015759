"""What every command module shares: the ``--db`` and ``--format`` options, the type of every
numeric option, and the output helpers."""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import click

from bakeoff.settings import Bounds, Option

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_FAILED",
    "Number",
    "console",
    "db_option",
    "emit_json",
    "format_option",
    "price_option",
    "progress",
    "read_prices",
    "report_options",
    "report_paths",
    "setting_option",
    "verbose_option",
    "workload_output_to_stderr",
]

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2


class Number(click.ParamType):
    """The type of every numeric option: a whole or decimal number (as ``bounds.kind``) within
    ``bounds``, read and checked while click parses the command line, before the command opens
    anything. nan, an infinity or a value out of bounds is a
    :class:`~bakeoff.errors.SpecError` naming the option, which the error boundary prints as one
    line (exit code 2). ``check`` replaces the bounds' own check where a setting of
    :data:`~bakeoff.settings.TRIAL_OPTIONS` words its refusals itself."""

    def __init__(self, bounds: Bounds, check: Callable[[Any], Any] | None = None) -> None:
        self.bounds = bounds
        self.check = check
        self.name = "integer" if bounds.kind is int else "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, self.bounds.kind) and not isinstance(value, bool):
            number = value
        else:
            try:
                number = self.bounds.kind(str(value).strip())
            except ValueError:
                kind = "a whole number" if self.bounds.kind is int else "a number"
                self.fail(f"{value!r} is not {kind}", param, ctx)
        if self.check is not None:
            return self.check(number)
        flag = param.opts[0] if param is not None and param.opts else "the value"
        return self.bounds.check(number, flag)


def setting_option(
    options: Mapping[str, Option], keyword: str, *, early: bool = False, **kwargs: Any
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The command-line option of a setting of ``options`` (a command's table, see
    :mod:`bakeoff.settings`), named as its API keyword, with its flag, default, help, metavar,
    choices and repetition. An on/off setting's flag turns it away from its default
    (``--in-process``: ``isolate`` false). A numeric setting is read as a :class:`Number` within
    its bounds and checked by its own check as it is parsed (with the other settings at their
    defaults; combinations are checked when the command starts); with ``early``, any other
    setting is checked as it is parsed too (its value stays as typed). A ``default`` given here
    stands for "not given" (the setting's own default still applies, and --help shows it)."""
    option = options[keyword]
    defaults = {name: each.default for name, each in options.items()}
    check = option.check
    if isinstance(option.default, bool):
        return click.option(
            option.flag, keyword, flag_value=not option.default, default=option.default,
            help=option.flag_help or option.help,
        )  # fmt: skip
    if option.bounds is not None:
        kwargs["type"] = Number(option.bounds, None if check is None else lambda value: check(value, defaults))
    elif option.choices is not None:
        kwargs["type"] = click.Choice(option.choices)
    elif early and check is not None:

        def read(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
            if value is not None and value != ():
                check(value, {**defaults, keyword: value})
            return value

        kwargs["callback"] = read
    shown = ""
    if "default" in kwargs and kwargs["default"] != option.default:
        shown = f"  [default: {option.default:g}]" if isinstance(option.default, float) else ""
    kwargs.setdefault("default", option.default)
    kwargs.setdefault("show_default", not shown and option.default not in (None, ()))
    if option.multiple:
        kwargs["multiple"] = True
    return click.option(option.flag, keyword, metavar=option.metavar, help=option.help + shown, **kwargs)


def report_options(coverage: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """One ``--NAME FILE`` option per format of :data:`~bakeoff.report.formats.REPORT_FORMATS`
    (with ``coverage``, those that render a sweep's coverage), passed as ``NAME_path``; read
    them back with :func:`report_paths`."""
    from bakeoff.report.formats import REPORT_FORMATS

    formats = [f for f in REPORT_FORMATS.values() if not coverage or f.coverage is not None]

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        for f in reversed(formats):
            command = click.option(
                f.flag, f"{f.name}_path", type=click.Path(dir_okay=False), default=None, metavar="FILE",
                help=f.coverage_help if coverage else f.help,
            )(command)  # fmt: skip
        return command

    return decorate


def report_paths(params: Mapping[str, Any]) -> dict[str, str | None]:
    """The paths :func:`report_options` read, by format name (the API's keywords).

    Raises:
        SpecError: two formats given one file (the later would overwrite the earlier).
    """
    import os

    paths = {name.removesuffix("_path"): value for name, value in params.items() if name.endswith("_path")}
    seen: dict[str, str] = {}
    for name, value in paths.items():
        if value:
            other = seen.setdefault(os.path.realpath(value), name)
            if other != name:
                from bakeoff.errors import SpecError

                raise SpecError(
                    f"--{other} and --{name} name one file, {value}", hint="give each report a file of its own"
                )
    return paths


db_option = click.option(
    "--db",
    envvar="BAKEOFF_DB",
    default=None,
    metavar="PATH|URL",
    help="Knowledge base: a SQLite file (default ./bakeoff.db) or a postgresql:// URL. Env: BAKEOFF_DB.",
)


def read_prices(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """The prices as written, once they read as prices (refused as they are parsed, before the
    command opens anything)."""
    from bakeoff.analysis.cost import parse_prices

    parse_prices(value)
    return value


price_option = click.option(
    "--price",
    "prices",
    multiple=True,
    callback=read_prices,
    metavar="TARGET=PRICE/h[@Ncores]",
    help=(
        "Decide with these prices instead of the ones the run was given: 'cpu=0.34/h@4cores', "
        "'neuron=$1.34/h@1device' (repeatable; without @, one stream per price)."
    ),
)
verbose_option = click.option(
    "--verbose",
    "-v",
    is_flag=True,
    help="Every detail: each target's notes, scenarios, requirements and what each would take in full "
    "(default: a summary).",
)
format_option = click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="table for people, json for machines (run documents carry a versioned schema).",
)


def console(stderr: bool = False) -> Any:
    """The console every command prints through: stored text on it shows its control characters
    (:func:`~bakeoff.report.printable.visible`) instead of driving the terminal."""
    shown = _shown_console()
    found = shown(stderr=stderr, highlight=False)
    if not found.is_terminal:  # piped or captured: do not squeeze tables into 80 columns
        found = shown(stderr=stderr, highlight=False, width=160)
    return found


@functools.cache
def _shown_console() -> Any:
    """rich's ``Console`` whose every string and every segment of text it renders shows its control
    characters: strings before they are laid out (so tables keep their widths), and the text of
    any other renderable (a ``Text`` built from stored strings) as it is written. Segments that
    are rich's own control codes (cursor moves of a live display) are left alone."""
    from rich.console import Console
    from rich.segment import Segment

    from bakeoff.report.printable import visible

    class ShownConsole(Console):
        def render_str(self, text: str, **kwargs: Any) -> Any:
            return super().render_str(visible(text), **kwargs)

        def render(self, renderable: Any, options: Any = None) -> Any:
            for segment in super().render(renderable, options):
                if segment.control or segment.text.isprintable() or segment.text in ("\n", ""):
                    yield segment
                else:
                    yield Segment(visible(segment.text), segment.style)

    return ShownConsole


def show_stored(view: Any, run_id: str, db: str | None) -> None:
    """Print a command's ``view`` of its answer, then the line saying where the run was stored
    and how to read it again."""
    from bakeoff.report.terminal import stored_line
    from bakeoff.store.connection import db_flag, display_db_url, resolve_db_url

    shown = console()
    shown.print(view)
    shown.print(stored_line(display_db_url(resolve_db_url(db)), run_id, db_flag(db)))


def progress() -> Any:
    err = console(stderr=True)
    return lambda message: err.print(f"· {message}", style="dim", markup=False, highlight=False)


def emit_json(data: Any) -> None:
    from bakeoff.results.strictjson import for_display

    click.echo(json.dumps(for_display(data), indent=2, default=str, allow_nan=False))


@contextmanager
def workload_output_to_stderr() -> Iterator[None]:
    """While workloads run, whatever they print (Python or C, in this process or in workers
    spawned meanwhile, which inherit file descriptor 1) goes to stderr, so that stdout holds
    only bakeoff's own output: ``--format json`` stays parseable however chatty the model is."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    previous, sys.stdout = sys.stdout, sys.stderr
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 1)
        os.close(saved)
        sys.stdout = previous
