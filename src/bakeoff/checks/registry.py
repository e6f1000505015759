"""The registered checks, in the order they run: bakeoff's own, then those of installed plugins.

A plugin ships a check through the ``bakeoff.checks`` entry point group: the entry point names
a :class:`~bakeoff.checks.base.Check` subclass (or instance) in its package, e.g. in its
``pyproject.toml``::

    [project.entry-points."bakeoff.checks"]
    vendor-fallbacks = "vendor_bakeoff.checks:FallbackReport"

Plugin checks run after bakeoff's own (a check can read the values of those before it). A
plugin that fails to load, or whose name is taken, is left out with a warning on stderr: one
broken plugin must not stop a trial, and must never replace a built-in verdict.
"""

from __future__ import annotations

import sys
from functools import cache
from importlib.metadata import entry_points

from bakeoff.checks.base import Check
from bakeoff.checks.compilation import CompilationCheck
from bakeoff.checks.correctness import CorrectnessCheck
from bakeoff.checks.determinism import DeterminismCheck
from bakeoff.checks.placement import PlacementCheck

__all__ = ["ENTRY_POINTS", "check_named", "registered_checks"]

ENTRY_POINTS = "bakeoff.checks"

#: bakeoff's own checks, in the order they run and are shown.
BUILTIN: tuple[Check, ...] = (CorrectnessCheck(), PlacementCheck(), CompilationCheck(), DeterminismCheck())


def _plugin(entry: object, taken: set[str]) -> Check | None:
    try:
        loaded = entry.load()  # type: ignore[attr-defined]
        check = loaded() if isinstance(loaded, type) else loaded
        if not isinstance(check, Check):
            raise TypeError(f"{type(check).__name__} is not a bakeoff.checks.base.Check")
        if not getattr(check, "name", "") or check.name in taken:
            raise ValueError(f"its name {getattr(check, 'name', '')!r} is empty or already taken")
    except Exception as exc:
        print(f"bakeoff: check plugin {entry.name!r} left out: {type(exc).__name__}: {exc}", file=sys.stderr)  # type: ignore[attr-defined]
        return None
    return check


@cache
def registered_checks() -> tuple[Check, ...]:
    """bakeoff's checks, then every plugin check that loads (each once per process)."""
    checks = list(BUILTIN)
    for entry in sorted(entry_points(group=ENTRY_POINTS), key=lambda e: e.name):
        check = _plugin(entry, {c.name for c in checks})
        if check is not None:
            checks.append(check)
    return tuple(checks)


def check_named(name: str) -> Check | None:
    return next((c for c in registered_checks() if c.name == name), None)
