"""Notes and tags: what people say about a run, kept beside its numbers.

A note is free text (a failed attempt, an operational observation, why a target was dropped);
a tag is a short name that groups runs for selection (``bakeoff history --tag driver-560``).
Both belong to one run and travel with it through export and import.

The functions that read and write their rows take the caller's connection: :class:`Store`
methods hold the transaction (and turn database errors into one line), an import holds one
transaction for a whole file.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import insert, select

from bakeoff.errors import SpecError
from bakeoff.store import schema
from bakeoff.store.connection import insert_unless_exists

__all__ = [
    "MAX_NOTE_CHARS",
    "MAX_TAG_LENGTH",
    "Note",
    "check_note_text",
    "check_tag",
    "delete_tag",
    "insert_missing_notes",
    "insert_missing_tags",
    "insert_note",
    "insert_tag",
    "select_notes",
    "select_runs_with_tag",
    "select_tags",
]

MAX_TAG_LENGTH = 64
_TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/+=@-]*")


@dataclass(frozen=True)
class Note:
    """A free-form note on a run. ``created_at`` is an ISO-8601 UTC string, like a run's."""

    id: int
    run_id: str
    created_at: str
    text: str
    author: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "run_id": self.run_id,
            "created_at": self.created_at,
            "text": self.text,
            "author": self.author,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Note:
        return cls(
            id=int(data["id"]),
            run_id=data["run_id"],
            created_at=data["created_at"],
            text=data["text"],
            author=data.get("author"),
        )


def check_tag(name: str) -> str:
    """``name`` if it can be a tag: a word that needs no quoting in a shell or a URL query.

    Raises:
        SpecError: empty, too long, or containing spaces or punctuation other than ``._:/+=@-``.
    """
    if len(name) > MAX_TAG_LENGTH or not _TAG.fullmatch(name):
        raise SpecError(
            f"invalid tag {name!r}",
            hint=f"use up to {MAX_TAG_LENGTH} letters, digits and ._:/+=@- starting with a letter or digit, "
            "e.g. driver-560 or torch-2.13",
        )
    return name


#: The longest note: notes are printed with their run in every view and report.
MAX_NOTE_CHARS = 10_000


def check_note_text(text: str) -> str:
    """``text`` without surrounding blank space; refuses a note with nothing in it, or longer
    than :data:`MAX_NOTE_CHARS` (an import refuses the same)."""
    stripped = text.strip()
    if not stripped:
        raise SpecError("a note needs some text", hint='e.g. bakeoff note 3f2a "OOM at batch 8 on driver 560"')
    if len(stripped) > MAX_NOTE_CHARS:
        raise SpecError(
            f"a note of {len(stripped)} characters, more than {MAX_NOTE_CHARS}",
            hint="keep the text elsewhere and note where",
        )
    return stripped


# -- rows, in the caller's transaction ------------------------------------------------------


def insert_note(conn: Any, run_id: str, text: str, author: str | None, created_at: str | None) -> Note:
    """Add a note to run ``run_id`` (an exact id); ``author`` defaults to ``$USER``, ``created_at`` to now."""
    values = {
        "run_id": run_id,
        "created_at": created_at or schema.utc_now(),
        "text": check_note_text(text),
        "author": author if author is not None else os.environ.get("USER") or None,
    }
    note_id = conn.execute(insert(schema.run_notes).values(**values)).inserted_primary_key[0]
    return Note(id=int(note_id), **values)


def select_notes(conn: Any, run_id: str) -> list[Note]:
    """The notes on a run (exact id), oldest first."""
    table = schema.run_notes
    query = select(table).where(table.c.run_id == run_id).order_by(table.c.created_at, table.c.id)
    return [Note(**row) for row in conn.execute(query).mappings()]


def insert_missing_notes(conn: Any, run_id: str, notes: list[dict[str, Any]]) -> int:
    """Add the notes (``{created_at, text, author}``) that run ``run_id`` lacks; how many went in.

    A note is the same note when its time, text and author are: importing twice adds nothing.
    """
    table = schema.run_notes
    have = {
        (row.created_at, row.text, row.author)
        for row in conn.execute(
            select(table.c.created_at, table.c.text, table.c.author).where(table.c.run_id == run_id)
        )
    }
    new = []
    for note in notes:
        key = (note["created_at"], note["text"], note["author"])
        if key not in have:
            have.add(key)
            new.append(note)
    if new:
        conn.execute(insert(table), [{"run_id": run_id, **n} for n in new])
    return len(new)


def insert_tag(conn: Any, run_id: str, tag: str) -> int:
    """Tag run ``run_id`` (an exact id) unless it has the tag: safe beside other writers. 1 if it went in."""
    statement = insert_unless_exists(conn, schema.run_tags, ["run_id", "tag"])
    return int(conn.execute(statement.values(run_id=run_id, tag=check_tag(tag), created_at=schema.utc_now())).rowcount)


def insert_missing_tags(conn: Any, run_id: str, tags: list[str]) -> int:
    """Add the tags run ``run_id`` lacks; how many went in."""
    return sum(insert_tag(conn, run_id, tag) for tag in tags)


def delete_tag(conn: Any, run_id: str, tag: str) -> bool:
    """Take a tag off run ``run_id`` (an exact id); whether it had the tag."""
    table = schema.run_tags
    return bool(conn.execute(table.delete().where(table.c.run_id == run_id, table.c.tag == tag)).rowcount)


def select_tags(conn: Any, run_id: str) -> list[str]:
    """A run's tags (exact id), sorted."""
    table = schema.run_tags
    query = select(table.c.tag).where(table.c.run_id == run_id).order_by(table.c.tag)
    return list(conn.execute(query).scalars())


def select_runs_with_tag(conn: Any, tag: str) -> list[str]:
    """Ids of the runs carrying ``tag``, oldest run first."""
    runs, tags = schema.runs, schema.run_tags
    query = (
        select(runs.c.id)
        .join(tags, tags.c.run_id == runs.c.id)
        .where(tags.c.tag == tag)
        .order_by(runs.c.created_at, runs.c.id)
    )
    return list(conn.execute(query).scalars())
