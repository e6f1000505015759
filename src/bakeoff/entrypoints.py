"""Plugins from other packages: the objects an entry point group names.

Checks (``bakeoff.checks``), scenarios (``bakeoff.scenarios``) and engines (``bakeoff.engines``)
are loaded the same way: each entry point names a class (instantiated with no arguments) or an
instance of the kind the registry holds. One that fails to load, is of another kind, has no
name or takes a name already used is left out with one line on stderr: a broken plugin must not
stop bakeoff, and must never replace one of bakeoff's own. The line is said by the process the
user started; its worker processes load the same plugins and keep quiet about them.
"""

from __future__ import annotations

import multiprocessing
import sys
from collections.abc import Callable, Iterable
from importlib.metadata import entry_points
from typing import Any, TypeVar

__all__ = ["load_plugins"]

T = TypeVar("T")


def _instance(value: Any, kind: type[T], taken: set[str]) -> T:
    found = value() if isinstance(value, type) else value
    if not isinstance(found, kind):
        raise TypeError(f"{type(found).__name__} is not a {kind.__module__}.{kind.__name__}")
    name = getattr(found, "name", "")
    if not name or name in taken:
        raise ValueError(f"its name {name!r} is empty or already taken")
    return found


def load_plugins(
    group: str,
    kind: type[T],
    what: str,
    taken: Iterable[str],
    claims: Callable[[T], Iterable[str]] | None = None,
    claimed: Iterable[str] = (),
) -> list[T]:
    """The ``kind`` objects that the entry points of ``group`` name, sorted by entry point name,
    none with a name in ``taken`` or used twice; ``what`` names the kind in the stderr lines.

    With ``claims``, a plugin also may not claim a metric name already ``claimed`` (by bakeoff
    or an earlier plugin): it would change what a requirement or a regression on that name
    measures.
    """
    names, metrics, found = set(taken), set(claimed), []

    def say(line: str) -> None:
        if multiprocessing.parent_process() is None:  # a worker's parent has said it already
            print(line, file=sys.stderr)

    for entry in sorted(entry_points(group=group), key=lambda e: e.name):
        try:
            plugin = _instance(entry.load(), kind, names)
        except Exception as exc:
            say(f"bakeoff: {what} plugin {entry.name!r} ({entry.value}) left out: {type(exc).__name__}: {exc}")
            continue
        wanted = set(claims(plugin)) if claims is not None else set()
        if wanted & metrics:
            clash = sorted(wanted & metrics)
            name = plugin.name  # type: ignore[attr-defined]
            say(f"bakeoff: {what} plugin {name!r} left out: its metric names {clash} are taken")
            continue
        metrics |= wanted
        names.add(plugin.name)  # type: ignore[attr-defined]
        found.append(plugin)
    return found
