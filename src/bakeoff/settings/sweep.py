"""``bakeoff sweep``'s settings, each written once: a sweep runs every cell as a trial, so its
settings are a few of the trial's, with their own defaults (a sweep grades coverage, not speed).

:data:`SWEEP_OPTIONS` is the table ``bakeoff sweep`` builds its options from and
:func:`bakeoff.api.sweep` checks its keywords against; :func:`sweep_keywords` turns them into
the trial keywords a sweep stores with itself, so that a resumed sweep runs the same trial
(:meth:`~bakeoff.settings.trial.TrialSettings.from_options` reads them back).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bakeoff.errors import SpecError
from bakeoff.settings.bounds import TIMEOUT
from bakeoff.settings.option import Option, read_options
from bakeoff.settings.trial import TRIAL_OPTIONS

__all__ = ["STORED_KEYWORDS", "SWEEP_OPTIONS", "SWEEP_TIMING", "sweep_keywords"]

#: ``timing=`` of a sweep: the trial's timing minimums. A sweep grades coverage, not speed:
#: ``none`` still times one call (every session does), ``full`` is a trial's default.
SWEEP_TIMING = {
    "none": {"min_samples": 1, "min_seconds": 0.0},
    "quick": {"min_samples": 10, "min_seconds": 0.1},
    "full": {},
}


def _check_timing(value: str, given: Mapping[str, Any]) -> str:
    if value not in SWEEP_TIMING:
        raise SpecError(f"unknown timing {value!r}", hint="use " + ", ".join(SWEEP_TIMING))
    return value


def _trial(keyword: str) -> Any:
    """The trial's own check of ``keyword`` (a sweep's cells are trials)."""
    check = TRIAL_OPTIONS[keyword].check
    assert check is not None
    return lambda value, given: check(value, {**given, "isolate": True})


#: Every setting of ``bakeoff sweep`` that is stored with the sweep, in the order it is checked.
SWEEP_OPTIONS: dict[str, Option] = {
    option.keyword: option
    for option in (
        Option(
            "timing",
            "--timing",
            "quick",
            "Per target: none (one call), quick (10 calls, 0.1 s; the default), full (a trial's).",
            _check_timing,
            choices=tuple(SWEEP_TIMING),
            example="full",
        ),
        Option(
            "timeout_s",
            "--timeout",
            600.0,
            "Seconds a target's step may take; longer is that cell's timeout.",
            _trial("timeout_s"),
            bounds=TIMEOUT,
            example=120.0,
        ),
        Option(
            "checks",
            "--check",
            (),
            "Check options, or an on-request check to run on every cell (repeatable).",
            _trial("checks"),
            metavar="NAME[?options]",
            multiple=True,
            example=["training?steps=3"],
        ),
        Option(
            "env",
            "--env",
            (),
            "A switch set while each target runs.",
            _trial("env"),
            metavar="KEY=VALUE",
            multiple=True,
            example=["TORCHINDUCTOR_FREEZING=1"],
        ),
    )
}


#: The trial keywords a sweep stores (what :func:`sweep_keywords` gives): the timing's minimums
#: and the table's other settings.
STORED_KEYWORDS = (
    *dict.fromkeys(keyword for minimums in SWEEP_TIMING.values() for keyword in minimums),
    *(keyword for keyword in SWEEP_OPTIONS if keyword != "timing"),
)


def sweep_keywords(**given: Any) -> dict[str, Any]:
    """The trial keywords a sweep with these settings stores (a keyword not given, or None,
    takes its default), each value checked (:func:`bakeoff.sweep.run.create_sweep` adds the
    check every cell needs).

    Raises:
        SpecError: a bad value (an unknown timing, a malformed check or switch).
        TypeError: a keyword that is not a sweep setting.
    """
    values = read_options(SWEEP_OPTIONS, {k: v for k, v in given.items() if v is not None}, "sweep setting")
    return {
        **SWEEP_TIMING[values["timing"]],
        "timeout_s": values["timeout_s"],
        "checks": [spec.spec for spec in values["checks"]],
        "env": [f"{k}={v}" for k, v in values["env"]],
    }
