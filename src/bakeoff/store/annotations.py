"""Notes and tags: what people say about a run, kept beside its numbers.

A note is free text (a failed attempt, an operational observation, why a target was dropped);
a tag is a short name that groups runs for selection (``bakeoff history --tag driver-560``).
Both belong to one run and travel with it through export and import.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from bakeoff.errors import SpecError

__all__ = ["MAX_TAG_LENGTH", "Note", "check_note_text", "check_tag"]

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


def check_note_text(text: str) -> str:
    """``text`` without surrounding blank space; refuses a note with nothing in it."""
    stripped = text.strip()
    if not stripped:
        raise SpecError("a note needs some text", hint='e.g. bakeoff note 3f2a "OOM at batch 8 on driver 560"')
    return stripped
