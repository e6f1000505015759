"""Stored text made safe for a terminal: control characters shown, never obeyed.

A run's strings come from users, scripts and other people's exports (workload specs, target
specs, notes, tags, a script's own output kept in the log). Printed raw, an escape sequence in
one of them would drive the terminal (recolour it, move the cursor, set the window title, hide
what follows), a carriage return would overwrite the line with other text, and a bell would ring;
passed to rich as markup, ``[bold]`` or ``[link=...]`` would be obeyed too. :func:`visible`
writes each control character as its Python escape (``\\x1b``, ``\\r``, ``\\x07``) and
:func:`escape` also escapes rich's markup. Line feeds and tabs are kept: they are layout.
Unicode's bidirectional overrides count as control characters here, since they reorder what
the reader sees. :class:`Shown` is rich's ``Text`` that shows the control characters of
whatever it is given, for renderers that build their lines from stored strings.
"""

from __future__ import annotations

import re
from typing import Any

from rich.markup import escape as _markup_escape
from rich.text import Text

__all__ = ["Shown", "escape", "visible"]

#: C0 controls except tab and line feed, DEL, the C1 controls, and Unicode's bidirectional
#: embeddings, overrides and isolates.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code == 0x0D:
        return "\\r"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with every control character written as its escape (``\\x1b``, ``\\r``)."""
    return _CONTROL.sub(_shown, text)


def escape(text: str) -> str:
    """``text`` for a string rich reads as markup: control characters shown and markup escaped."""
    return _markup_escape(visible(str(text)))


class Shown(Text):
    """rich's ``Text`` (never markup) with the control characters of its text shown: in
    ``Shown(text)``, ``Shown.assemble(...)`` and every ``append``."""

    def __init__(self, text: str = "", *args: Any, **kwargs: Any) -> None:
        super().__init__(visible(text), *args, **kwargs)

    def append(self, text: str | Text, style: Any = None) -> Shown:
        return super().append(text if isinstance(text, Text) else visible(text), style)  # type: ignore[return-value]
