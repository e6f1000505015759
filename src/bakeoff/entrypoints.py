"""Plugins from other packages: the objects an entry point group names.

Checks (``bakeoff.checks``), scenarios (``bakeoff.scenarios``) and engines (``bakeoff.engines``)
are loaded the same way: each entry point names a class (instantiated with no arguments) or an
instance of the kind the registry holds. One that fails to load, is of another kind, has no
name or takes a name already used is left out with one line on stderr: a broken plugin must not
stop bakeoff, and must never replace one of bakeoff's own. A plugin that calls ``sys.exit`` has
failed like one that raises: its exit is never bakeoff's (Ctrl-C still interrupts). The line is
said by the process the user started; its worker processes load the same plugins and keep quiet
about them.
"""

from __future__ import annotations

import multiprocessing
import sys
from collections.abc import Callable, Iterable
from importlib.metadata import entry_points
from typing import Any, TypeVar

__all__ = ["PLUGIN_FAILURES", "load_plugins", "said_by"]

#: What a plugin's code may raise that is its own failure: any exception, and ``SystemExit``
#: (``sys.exit`` in a plugin must not end bakeoff). ``KeyboardInterrupt`` is not among them.
PLUGIN_FAILURES: tuple[type[BaseException], ...] = (Exception, SystemExit)

T = TypeVar("T")


def _instance(value: Any, kind: type[T], taken: set[str]) -> T:
    found = value() if isinstance(value, type) else value
    if not isinstance(found, kind):
        raise TypeError(f"{type(found).__name__} is not a {kind.__module__}.{kind.__name__}")
    name = getattr(found, "name", "")
    if not name or name in taken:
        raise ValueError(f"its name {name!r} is empty or already taken")
    return found


def said_by(exc: BaseException) -> str:
    """How a plugin failed, for a line that starts with what failed: ``called sys.exit(3)`` or
    ``failed: KeyError: 'x'`` (its message cut at 200 characters)."""
    if isinstance(exc, SystemExit):
        code = "" if exc.code is None else repr(exc.code)[:200]
        return f"called sys.exit({code})"
    return f"failed: {type(exc).__name__}: {str(exc)[:200]}"


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
        if multiprocessing.current_process().name == "MainProcess":  # not a worker: its parent said it already
            print(line, file=sys.stderr)

    for entry in sorted(entry_points(group=group), key=lambda e: e.name):
        try:
            plugin = _instance(entry.load(), kind, names)
            wanted = set(claims(plugin)) if claims is not None else set()
        except SystemExit as exc:
            say(f"bakeoff: {what} plugin {entry.name!r} ({entry.value}) left out: it {said_by(exc)}")
            continue
        except Exception as exc:
            say(f"bakeoff: {what} plugin {entry.name!r} ({entry.value}) left out: {type(exc).__name__}: {exc}")
            continue
        if wanted & metrics:
            clash = sorted(wanted & metrics)
            name = plugin.name  # type: ignore[attr-defined]
            say(f"bakeoff: {what} plugin {name!r} left out: its metric names {clash} are taken")
            continue
        metrics |= wanted
        names.add(plugin.name)  # type: ignore[attr-defined]
        found.append(plugin)
    return found
