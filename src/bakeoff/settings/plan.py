"""``bakeoff plan`` and ``bakeoff localize``: their own settings, each written once.

A plan runs trials, so besides its budget it takes a few of the trial's settings
(:data:`PLAN_TRIAL_KEYWORDS`, declared in :data:`~bakeoff.settings.trial.TRIAL_OPTIONS`);
each stage's run stores them as a trial's. Localisation stores its result with the run it
looked into; its one setting is how long a target may take.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from bakeoff.errors import SpecError
from bakeoff.settings.bounds import TIMEOUT, WEEK_S
from bakeoff.settings.option import Option

__all__ = ["LOCALIZE_OPTIONS", "PLAN_OPTIONS", "PLAN_TRIAL_KEYWORDS", "parse_budget"]

_BUDGET = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|min|m|h)?\s*$")
_SECONDS = {"ms": 0.001, "s": 1, "sec": 1, None: 1, "min": 60, "m": 60, "h": 3600}

#: The trial settings a plan takes (each stage is a trial with them).
PLAN_TRIAL_KEYWORDS = ("profile", "requirements", "prices", "min_samples", "min_seconds", "isolate")


def parse_budget(text: str) -> float:
    """``10min``, ``90s``, ``1.5h`` or a number of seconds -> seconds.

    Raises:
        SpecError: anything else, or a budget under a minute or over a week.
    """
    found = _BUDGET.match(text)
    if found is None:
        raise SpecError(f"budget {text!r} is not a duration", hint="e.g. --budget 10min, 90s or 1h")
    seconds = float(found.group(1)) * _SECONDS[found.group(2)]
    if seconds < 60:
        raise SpecError(f"budget {text!r} is under a minute", hint="give a plan at least --budget 1min")
    if seconds > WEEK_S:
        raise SpecError(f"budget {text!r} is over a week", hint="give a plan at most --budget 168h")
    return seconds


def _check_budget(value: str | float, given: Mapping[str, Any]) -> float:
    """A text as :func:`parse_budget` reads it; a number of seconds (the API's) as it is, if
    positive and finite."""
    return parse_budget(value) if isinstance(value, str) else TIMEOUT.check(float(value), "budget")


#: The plan's own settings.
PLAN_OPTIONS: dict[str, Option] = {
    "budget": Option(
        "budget",
        "--budget",
        "10min",
        "Time for the whole plan: 10min, 90s, 1h.",
        _check_budget,
        example="90s",
    )
}

#: Localisation's settings.
LOCALIZE_OPTIONS: dict[str, Option] = {
    "timeout_s": Option(
        "timeout_s",
        "--timeout",
        900.0,
        "Seconds per target.",
        bounds=TIMEOUT,  # the command line's bounds; the API's value is checked where it runs
        example=60.0,
    )
}
