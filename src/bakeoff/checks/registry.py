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

from functools import cache
from typing import Any

from bakeoff.checks.base import Check, CheckSpec
from bakeoff.checks.checkpoint import CheckpointCheck
from bakeoff.checks.coldstart import ColdStartCheck
from bakeoff.checks.compilation import CompilationCheck
from bakeoff.checks.correctness import CorrectnessCheck
from bakeoff.checks.determinism import DeterminismCheck
from bakeoff.checks.greedy import GreedyCheck
from bakeoff.checks.localization import LocalizationCheck
from bakeoff.checks.placement import PlacementCheck
from bakeoff.checks.quality import QualityCheck
from bakeoff.checks.training import TrainingCheck
from bakeoff.entrypoints import PLUGIN_FAILURES, load_plugins, said_by
from bakeoff.errors import SpecError
from bakeoff.specsyntax import split_options, typed_options

__all__ = [
    "ENTRY_POINTS",
    "RUN_LEVEL_KEYS",
    "check_named",
    "guarded",
    "is_builtin",
    "parse_check",
    "registered_checks",
]

ENTRY_POINTS = "bakeoff.checks"

#: The keys of a target's result in the run document that are not checks: a check may not take
#: one of these names, or its value would overwrite them (``tests/unit/test_result_format.py``
#: holds this list to :class:`~bakeoff.results.values.TargetResult`'s fields).
RUN_LEVEL_KEYS = frozenset(
    {
        "target", "target_detail", "status", "reason", "is_reference", "latency", "first_call_ms", "warmup_calls",
        "settled", "speedup", "speedup_ci", "break_even_requests", "peak_host_rss_bytes", "device_peak_bytes",
        "threads", "load_average", "duration_s", "notes", "adjustments", "variant", "profile", "error",
        "prepare_ms", "scenarios", "requirements", "conditions", "noise", "skipped_checks", "log", "checks",
        "unknown",
    }
)  # fmt: skip

#: bakeoff's own checks, in the order they run and are shown.
BUILTIN: tuple[Check, ...] = (
    CorrectnessCheck(),
    PlacementCheck(),
    CompilationCheck(),
    DeterminismCheck(),
    GreedyCheck(),  # before training, which changes the weights
    TrainingCheck(),
    CheckpointCheck(),
    QualityCheck(),
    ColdStartCheck(),
    LocalizationCheck(),
)


@cache
def registered_checks() -> tuple[Check, ...]:
    """bakeoff's checks, then every plugin check that loads (each once per process)."""
    taken = [*RUN_LEVEL_KEYS, *(c.name for c in BUILTIN)]
    offered = [name for check in BUILTIN for name in check.offers]
    plugins = load_plugins(ENTRY_POINTS, Check, "check", taken, claims=lambda c: c.offers, claimed=offered)
    return (*BUILTIN, *plugins)


def is_builtin(check: Check) -> bool:
    return any(check is own for own in BUILTIN)


def guarded(check: Check, method: str, *args: Any, fallback: Any = None) -> Any:
    """``check.method(*args)``; for a plugin check, an exception or a ``sys.exit`` becomes
    ``fallback`` (and, for its facts and notes, one line saying it failed) so that one broken
    plugin cannot break a report, a comparison or another check's result, nor end the command
    with an exit code of its own. Ctrl-C still interrupts. bakeoff's own checks are called
    directly: an exception there is a fault to see, not to hide."""
    if is_builtin(check):
        return getattr(check, method)(*args)
    try:
        return getattr(check, method)(*args)
    except PLUGIN_FAILURES as exc:
        said = f"the {check.name} check's {method} {said_by(exc)}"
        return [said] if method in ("facts", "details", "notes") else fallback


def check_named(name: str) -> Check | None:
    return next((c for c in registered_checks() if c.name == name), None)


def parse_check(text: str) -> CheckSpec:
    """Parse ``determinism?repeats=5``: a registered check and the options a user set.

    Raises:
        SpecError: an unknown check or option, or a value of the wrong type or range.
    """
    head, given = split_options(text, "check")
    check = check_named(head)
    if check is None:
        names = ", ".join(c.name for c in registered_checks())
        raise SpecError(f"unknown check {head!r}", hint=f"use one of {names}")
    options = typed_options(head, given, check.options, "check", text)
    try:
        check.validate(options, text)
    except SpecError:
        raise
    except PLUGIN_FAILURES as exc:
        if is_builtin(check):
            raise
        why = f"it {said_by(exc)}" if isinstance(exc, SystemExit) else f"{type(exc).__name__}: {str(exc)[:200]}"
        raise SpecError(
            f"the {head} check could not read {text!r}: {why}",
            hint="see the plugin's documentation for its options",
        ) from None
    return CheckSpec(head, options)
