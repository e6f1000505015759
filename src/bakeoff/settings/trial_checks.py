"""The checks of the trial's settings: each turns a keyword's value into its field's, or raises
:class:`~bakeoff.errors.SpecError` with the one line a user sees (``given`` holds every value, for
the settings that depend on another). :data:`~bakeoff.settings.trial.TRIAL_OPTIONS` names one per
setting."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from typing import Any

from bakeoff.analysis.cost import Price, parse_prices
from bakeoff.checks.base import CheckSpec
from bakeoff.checks.registry import check_named, parse_check
from bakeoff.errors import SpecError
from bakeoff.metrics import find_metric, parse_requirement
from bakeoff.scenarios.base import ScenarioSpec
from bakeoff.scenarios.registry import parse_scenario
from bakeoff.settings.bounds import TIMEOUT, WEEK_S, Bounds, at_most
from bakeoff.settings.option import spec_list, texts
from bakeoff.workload.profile import InputProfile, parse_profile

__all__ = [
    "MAX_BUCKETS_BOUNDS",
    "MIN_SECONDS_BOUNDS",
    "REPLICATES_BOUNDS",
    "SAMPLES_BOUNDS",
    "SPREAD_BOUNDS",
    "check_checks",
    "check_cold_cache",
    "check_env",
    "check_max_buckets",
    "check_min_seconds",
    "check_pad_to_buckets",
    "check_prices",
    "check_process_spread",
    "check_profile",
    "check_replicates",
    "check_requirements",
    "check_samples",
    "check_scenarios",
    "check_timeout",
]

SAMPLES_BOUNDS = Bounds(int, 1, 10**9, 30)
MIN_SECONDS_BOUNDS = Bounds(float, 0.0, WEEK_S, 0.5, unit="of seconds")
REPLICATES_BOUNDS = Bounds(int, 1, 1000, 3)
MAX_BUCKETS_BOUNDS = Bounds(int, 1, 1024, 4)
SPREAD_BOUNDS = Bounds(float, 0.0, 1.0, 0.02, high_open=True)


def check_samples(value: int, given: Mapping[str, Any]) -> int:
    if value < 1:
        raise SpecError(f"samples must be at least 1, got {value}", hint="e.g. --samples 30")
    at_most(value, SAMPLES_BOUNDS.high, "samples", "--samples 30")
    return value


def check_min_seconds(value: float, given: Mapping[str, Any]) -> float:
    if not math.isfinite(value) or value < 0:
        raise SpecError(f"minimum timing seconds must be a finite number >= 0, got {value}", hint="e.g. --min-time 0.5")
    at_most(value, MIN_SECONDS_BOUNDS.high, "minimum timing seconds", "--min-time 0.5")
    return value


def check_timeout(value: float, given: Mapping[str, Any]) -> float:
    if not math.isfinite(value) or value <= 0:
        raise SpecError(f"timeout must be a positive number of seconds, got {value:g}", hint="e.g. --timeout 900")
    at_most(value, TIMEOUT.high, "timeout in seconds", "--timeout 900")
    return value


def check_replicates(value: int, given: Mapping[str, Any]) -> int:
    if value < 1:
        raise SpecError(f"replicates must be at least 1, got {value}", hint="e.g. --replicates 3")
    at_most(value, REPLICATES_BOUNDS.high, "replicates", "--replicates 3")
    if value > 1 and not given["isolate"]:
        raise SpecError(
            "replicates need worker processes (one process cannot show the spread between processes)",
            hint="drop --in-process, or drop --replicates",
        )
    return value


def check_process_spread(value: float | None, given: Mapping[str, Any]) -> float | None:
    if value is not None and not SPREAD_BOUNDS.contains(value):
        raise SpecError(f"process spread must be in [0, 1), got {value:g}", hint="e.g. --process-spread 0.02")
    return value


def check_pad_to_buckets(value: str | int | Iterable[int] | None, given: Mapping[str, Any]) -> str | None:
    """Sizes given as numbers become the text a user would type (``64,128``); the text itself
    is read when the trial resolves its bucket plan, against the profile's lengths."""
    if value is None or isinstance(value, str):
        return value
    values = value if isinstance(value, Iterable) else [value]
    return ",".join(str(v) for v in values)


def check_max_buckets(value: int, given: Mapping[str, Any]) -> int:
    if value < 1:
        raise SpecError(f"max buckets must be at least 1, got {value}", hint="e.g. --max-buckets 4")
    at_most(value, MAX_BUCKETS_BOUNDS.high, "max buckets", "--max-buckets 4")
    return value


def check_cold_cache(value: bool, given: Mapping[str, Any]) -> bool:
    if value and not given["isolate"]:
        raise SpecError(
            "a cold compile cache needs worker processes (in one process compilers keep warm caches)",
            hint="drop --in-process, or drop --cold-compile-cache",
        )
    return value


def check_profile(value: str | os.PathLike[str] | InputProfile | None, given: Mapping[str, Any]) -> InputProfile | None:
    if value is None or isinstance(value, InputProfile):  # a stored run's own requests (a rerun)
        return value
    return parse_profile(os.fspath(value))


def check_env(value: str | Iterable[str], given: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    switches = []
    for item in texts(value):
        key, eq, text = item.partition("=")
        if not eq or not key or not key.replace("_", "").isalnum() or key[0].isdigit():
            raise SpecError(f"environment switch {item!r} is not KEY=VALUE", hint="e.g. --env TORCHINDUCTOR_FREEZING=1")
        switches.append((key, text))
    return tuple(switches)


def check_scenarios(value: str | Iterable[str], given: Mapping[str, Any]) -> tuple[ScenarioSpec, ...]:
    """``offline,server?rate=5`` -> two scenarios."""
    return spec_list(
        value,
        "scenario",
        parse_scenario,
        "name one: offline, server?rate=20, generation or training (or drop --scenario)",
        "give each scenario once; compare rates with server?rate=sweep",
    )


def check_checks(value: str | Iterable[str], given: Mapping[str, Any]) -> tuple[CheckSpec, ...]:
    """``determinism?repeats=5`` -> the check's options; a check named with no options keeps
    its defaults. A requirement on a metric of a check that runs only on request
    (``quality>=-1``) asks for that check, with its defaults, when it is not named."""
    specs = spec_list(
        value, "check", parse_check, "e.g. --check determinism?repeats=5", "give each check once, with all its options"
    )
    named = {spec.name for spec in specs}
    for text in texts(given.get("requirements")):
        try:
            check = find_metric(parse_requirement(text).metric).check
        except SpecError:  # the requirements' own check says what is wrong with it
            continue
        wanted = check_named(check) if check else None
        if wanted is not None and wanted.on_request and check not in named:
            specs += (parse_check(check),)
            named.add(check)
    return specs


def check_prices(value: str | Iterable[str], given: Mapping[str, Any]) -> tuple[Price, ...]:
    return parse_prices(texts(value))


def check_requirements(value: str | Iterable[str] | None, given: Mapping[str, Any]) -> tuple[str, ...] | None:
    if value is None:
        return None
    return tuple(parse_requirement(text).text for text in texts(value))
