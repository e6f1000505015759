"""Commands for a knowledge base shared by a team: ``db``, ``export``, ``import``, ``note``, ``tag``.

Thin adapters like the rest of the CLI: each parses options, calls one function of
:mod:`bakeoff.api` and prints the value; errors go to the boundary in :mod:`bakeoff.cli.main`.
"""

from __future__ import annotations

from typing import Any

import click

__all__ = ["COMMANDS", "annotations_json", "print_annotations"]

from bakeoff.cli.common import console, emit_json
from bakeoff.cli.common import db_option as _db_option
from bakeoff.cli.common import format_option as _format_option


def _say(line: str) -> None:
    """One line of plain text (never markup, never wrapped: paths and URLs stay whole)."""
    console().print(line, markup=False, soft_wrap=True)


def _json(data: Any) -> None:
    emit_json(data)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def print_annotations(console: Any, notes: list[Any], tags: list[str]) -> None:
    """The tags and notes of a run under its table (user text printed as text, never as markup)."""
    from rich.text import Text

    if tags:
        _say(Text("tags: " + ", ".join(tags)))
    for note in notes:
        who = f" {note.author}" if note.author else ""
        line = Text(f"note {note.created_at[:19].replace('T', ' ')} UTC{who}: ", style="dim")
        line.append(note.text, style="")
        _say(line)


def annotations_json(found: dict[str, Any]) -> dict[str, Any]:
    return {"notes": [n.to_dict() for n in found["notes"]], "tags": list(found["tags"])}


@click.group(epilog="\b\nExample:\n  bakeoff db status --db postgresql://bakeoff@db.internal/bakeoff")
def db() -> None:
    """The knowledge base itself: its schema version and upgrades."""


@db.command(epilog="\b\nExample:\n  bakeoff db status --db postgresql://bakeoff@db.internal/bakeoff")
@_db_option
@_format_option
def status(db: str | None, fmt: str) -> None:
    """Show the database's schema version, this release's, and any migrations pending."""
    from bakeoff import api

    info = api.db_status(db=db)
    if fmt == "json":
        _json(info)
        return
    _say(f"database  {info['database']} ({info['dialect']})")
    _say(f"runs      {info['runs']}")
    line = f"schema    version {info['schema_version']}; this bakeoff uses version {info['supported_version']}"
    if info["newer"]:
        line += ": written by a newer bakeoff; upgrade bakeoff to use it"
    elif info["pending"]:
        line += f": {_plural(len(info['pending']), 'migration')} pending; run `bakeoff db upgrade`"
    else:
        line += ": up to date"
    _say(line)
    for name in info["pending"]:
        _say(f"  pending {name}")


@db.command(epilog="\b\nExample:\n  bakeoff db upgrade --db postgresql://bakeoff@db.internal/bakeoff")
@_db_option
@_format_option
def upgrade(db: str | None, fmt: str) -> None:
    """Apply pending schema migrations.

    A SQLite file is upgraded whenever bakeoff opens it; a PostgreSQL database, shared by
    machines that may run different releases, only by this command. Safe to run while others
    use the database: concurrent upgrades wait for each other and migrate once.
    """
    from bakeoff import api

    done = api.db_upgrade(db=db)
    if fmt == "json":
        _json(done)
        return
    where = done["database"]
    if not done["applied"]:
        _say(f"{where} is up to date (schema version {done['schema_version']})")
        return
    _say(f"upgraded {where} from schema version {done['from_version']} to {done['schema_version']}:")
    for name in done["applied"]:
        _say(f"  applied {name}")


@click.command(
    "export",
    epilog="\b\nExamples:\n  bakeoff export --tag driver-560 -o findings.jsonl\n"
    "  bakeoff export --workload arch:llama --format csv -o llama.csv",
)
@click.option("--workload", default=None, help="Only runs of this workload spec.")
@click.option("--tag", default=None, help="Only runs with this tag.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "csv"]),
    default="jsonl",
    show_default=True,
    help="jsonl: everything, for `bakeoff import`; csv: one row per run and target, for spreadsheets.",
)
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="File to write.")
@_db_option
def export_command(workload: str | None, tag: str | None, fmt: str, output: str, db: str | None) -> None:
    """Write stored runs (with notes, tags, baselines and requirements) to a file."""
    from bakeoff import api

    done = api.export_runs(output, db=db, format=fmt, workload=workload, tag=tag)
    if fmt == "csv":
        what = f"{_plural(done.runs, 'run')} ({_plural(done.rows, 'row')})"
    else:
        what = (
            f"{_plural(done.runs, 'run')}, {_plural(done.baselines, 'baseline')}, "
            f"requirements of {_plural(done.requirements, 'workload')}"
        )
    _say(f"exported {what} to {done.path}")


@click.command(
    "import", epilog="\b\nExample:\n  bakeoff import findings.jsonl --db postgresql://bakeoff@db.internal/bakeoff"
)
@click.argument("file", type=click.Path(dir_okay=False))
@_db_option
@_format_option
def import_command(file: str, db: str | None, fmt: str) -> None:
    """Add the runs of a `bakeoff export` JSON-lines FILE that the database lacks.

    Importing the same file twice adds nothing; runs already present keep their results and
    gain any notes and tags the file has for them. The file is checked whole first, and nothing
    is imported from one that is not a regular file, is past a size cap, is in an export
    format or holds a run document newer than this bakeoff reads, is malformed (a time that is
    not one, a requirement `--require` would refuse), or gives a run id to other content than
    the database has for it.
    An imported run whose workload names code (a script, a py: module, a model directory) is
    listed, and `bakeoff rerun` refuses it: run it yourself once you have read it.
    """
    from bakeoff import api
    from bakeoff.store.connection import display_db_url, resolve_db_url

    done = api.import_runs(file, db=db)
    if fmt == "json":  # not_rerunnable only when some are: a plain import reads as before
        _json({k: v for k, v in done.to_dict().items() if k != "not_rerunnable" or v})
        return
    _say(
        f"imported {_plural(done.runs, 'run')} ({done.runs_present} already present), "
        f"{_plural(done.baselines, 'baseline')} ({done.baselines_present} already present), "
        f"{_plural(done.requirements, 'requirements update')}, {_plural(done.notes, 'note')}, "
        f"{_plural(done.tags, 'tag')} into {display_db_url(resolve_db_url(db))}"
    )
    if done.not_rerunnable:
        _say(
            "not for `bakeoff rerun` (imported runs that name code to run, a script or a module): "
            + ", ".join(done.not_rerunnable)
        )


@click.command(epilog='\b\nExample:\n  bakeoff note 3f2a "OOM at batch 8 with driver 560; fine with 555"')
@click.argument("run_id")
@click.argument("text")
@click.option("--author", default=None, help="Who says so (default: $USER).")
@_db_option
@_format_option
def note(run_id: str, text: str, author: str | None, db: str | None, fmt: str) -> None:
    """Keep a free-form note on a run (RUN_ID may be a unique prefix); `bakeoff show` lists them."""
    from bakeoff import api

    kept = api.note(run_id, text, db=db, author=author)
    if fmt == "json":
        _json(kept.to_dict())
        return
    _say(f"noted on run {kept.run_id} (note {kept.id})")


@click.command(
    epilog="\b\nExamples:\n  bakeoff tag 3f2a driver-560\n  bakeoff tag 3f2a driver-560 --remove\n"
    "  bakeoff history --tag driver-560"
)
@click.argument("run_id")
@click.argument("name")
@click.option("--remove", is_flag=True, help="Take the tag off instead.")
@_db_option
@_format_option
def tag(run_id: str, name: str, remove: bool, db: str | None, fmt: str) -> None:
    """Tag a run (RUN_ID may be a unique prefix) to select it later with --tag."""
    from bakeoff import api

    tags = api.tag(run_id, name, db=db, remove=remove)
    if fmt == "json":
        _json({"tags": tags})
        return
    _say(f"tags: {', '.join(tags) if tags else 'none'}")


COMMANDS = [db, export_command, import_command, note, tag]
