"""A trial's settings, each written once: its name, default, check and help.

A setting crosses three boundaries, each under the name its users already know, and is one
field inside:

* the keyword API, :func:`bakeoff.api.trial`: ``min_samples``, ``cold_compile_cache``,
  ``interleave``, ``pad_to_buckets``...;
* the command line, ``bakeoff trial``: ``--samples``, ``--cold-compile-cache``,
  ``--sequential``, ``--pad-to-buckets``...;
* the run's stored ``settings`` (the knowledge base keeps them; rerun and the reports read
  them): ``timing``, ``cold_cache``, ``interleaved``, ``pad_to_buckets``...;
* inside, :class:`TrialSettings`: ``timing``, ``cold_cache``, ``interleave``, ``pad_to_buckets``.

:data:`TRIAL_OPTIONS` holds each setting's keyword, flag, default (read from :class:`TrialSettings`
and :class:`~bakeoff.measure.timing.TimingSettings`, never restated), check and help text;
the CLI builds its options from it and :func:`bakeoff.api.trial` its docstring.
:meth:`TrialSettings.from_options` is the one validating constructor. A run stores
:meth:`TrialSettings.to_run_dict`; :meth:`TrialSettings.from_dict` reads it back, from any
version (keys a document lacks take the value that version used), and
:meth:`TrialSettings.options` gives the keywords that repeat the trial.

Words: ``pad_to_buckets`` is what the user asked for (``"auto"`` or sizes); the *bucket plan*
is what a trial resolves it to (stored as ``buckets``: the sizes chosen and their padding
waste). ``cold_cache`` gives each target's compiler an empty cache. ``interleave`` is the wish
to time targets in turns; :attr:`TrialSettings.interleaved` whether they were (only worker
processes can take turns).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from bakeoff.analysis.compare import PROCESS_SPREAD
from bakeoff.analysis.cost import Price
from bakeoff.checks.base import CheckSpec
from bakeoff.measure.timing import TimingSettings
from bakeoff.scenarios.base import ScenarioSpec
from bakeoff.scenarios.registry import always_run
from bakeoff.settings.bounds import TIMEOUT
from bakeoff.settings.option import Option, read_options
from bakeoff.settings.trial_checks import (
    MAX_BUCKETS_BOUNDS,
    MIN_SECONDS_BOUNDS,
    REPLICATES_BOUNDS,
    SAMPLES_BOUNDS,
    SPREAD_BOUNDS,
    check_checks,
    check_cold_cache,
    check_env,
    check_max_buckets,
    check_min_seconds,
    check_pad_to_buckets,
    check_prices,
    check_process_spread,
    check_profile,
    check_replicates,
    check_requirements,
    check_samples,
    check_scenarios,
    check_timeout,
)
from bakeoff.workload.profile import InputProfile

__all__ = ["TRIAL_OPTIONS", "TrialSettings"]


@dataclass(frozen=True)
class TrialSettings:
    """How a trial runs.

    ``isolate`` runs each target in its own worker process; ``interleave`` (with isolation)
    keeps every target's worker alive and times them in turns, round by round. ``scenarios``
    run after single-stream timing; ``requirements`` (texts such as ``p90<=50ms``) replace the
    workload's stored ones, None keeps the stored ones. ``pad_to_buckets`` (``"auto"`` or
    sizes such as ``"64,128"``) also runs each target padded to buckets, up to ``max_buckets``
    of them for ``auto``. ``process_spread`` is the spread between worker processes that speed
    intervals include (None: the measured default,
    :data:`~bakeoff.analysis.compare.PROCESS_SPREAD`). ``checks`` hold the options a user set
    for checks (``determinism?repeats=5``); every applicable check runs either way. ``prices``
    (per hour, by target or device) turn speed into cost in the decision.

    Build one from user input with :meth:`from_options` (which checks every value); the
    plain constructor trusts its arguments.
    """

    timing: TimingSettings = field(default_factory=TimingSettings)
    isolate: bool = True
    timeout_s: float = 900.0
    refresh_baseline: bool = False
    profile: InputProfile | None = None
    pad_to_buckets: str | None = None
    max_buckets: int = 4
    cold_cache: bool = False
    env: tuple[tuple[str, str], ...] = ()
    scenarios: tuple[ScenarioSpec, ...] = ()
    requirements: tuple[str, ...] | None = None
    interleave: bool = True
    replicates: int = 1
    process_spread: float | None = None
    checks: tuple[CheckSpec, ...] = ()
    prices: tuple[Price, ...] = ()

    @property
    def interleaved(self) -> bool:
        """Whether the targets are timed in turns: asked for, and in worker processes."""
        return self.isolate and self.interleave

    @property
    def spread(self) -> float:
        """The between-process spread speed intervals include."""
        return PROCESS_SPREAD if self.process_spread is None else self.process_spread

    @classmethod
    def from_options(cls, **given: Any) -> TrialSettings:
        """The settings for :func:`bakeoff.api.trial`'s keywords (see :data:`TRIAL_OPTIONS`; a
        keyword not given takes its default), each value checked in the order of
        :data:`TRIAL_OPTIONS`.

        Raises:
            SpecError: a value out of range, a combination that cannot work (replicates or a
                cold cache in one process), a malformed profile, switch, scenario or requirement.
            TypeError: a keyword that is not a setting.
        """
        values = read_options(TRIAL_OPTIONS, given, "trial setting")
        return cls(
            timing=TimingSettings(min_samples=values["min_samples"], min_seconds=values["min_seconds"]),
            isolate=values["isolate"],
            timeout_s=values["timeout_s"],
            refresh_baseline=values["refresh_baseline"],
            profile=values["profile"],
            pad_to_buckets=values["pad_to_buckets"],
            max_buckets=values["max_buckets"],
            cold_cache=values["cold_compile_cache"],
            env=values["env"],
            scenarios=values["scenarios"],
            requirements=values["requirements"],
            interleave=values["interleave"],
            replicates=values["replicates"],
            process_spread=values["process_spread"],
            checks=values["checks"],
            prices=values["prices"],
        )

    def options(self) -> dict[str, Any]:
        """The :func:`bakeoff.api.trial` keywords that give these settings again (what a rerun
        passes). ``refresh_baseline`` is left out (a rerun decides it anew), and so are
        scenarios, requirements, replicates, the process spread, check options, prices and
        interleaving when they are the defaults."""
        keywords: dict[str, Any] = {
            "isolate": self.isolate,
            "timeout_s": self.timeout_s,
            "min_samples": self.timing.min_samples,
            "min_seconds": self.timing.min_seconds,
            "profile": self.profile,
            "pad_to_buckets": self.pad_to_buckets,
            "max_buckets": self.max_buckets,
            "cold_compile_cache": self.cold_cache,
            "env": [f"{k}={v}" for k, v in self.env],
        }
        if self.scenarios:
            keywords["scenarios"] = [spec.spec for spec in self.scenarios]
        if self.requirements is not None:
            keywords["requirements"] = list(self.requirements)
        if self.replicates != 1:
            keywords["replicates"] = self.replicates
        if self.process_spread is not None:
            keywords["process_spread"] = self.process_spread
        if self.checks:
            keywords["checks"] = [spec.spec for spec in self.checks]
        if self.prices:
            keywords["prices"] = [price.text for price in self.prices]
        if self.isolate and not self.interleave:
            keywords["interleave"] = False  # the targets were timed one after another, not in turns
        return keywords

    def to_dict(self) -> dict[str, Any]:
        """The settings as asked, under their stored names (``interleaved`` and ``process_spread``
        as they took effect)."""
        return {
            "timing": self.timing.to_dict(),
            "isolate": self.isolate,
            "timeout_s": self.timeout_s,
            "profile": self.profile.to_dict() if self.profile else None,
            "pad_to_buckets": self.pad_to_buckets,
            "max_buckets": self.max_buckets,
            "cold_cache": self.cold_cache,
            "env": [list(pair) for pair in self.env],
            "scenarios": [spec.spec for spec in self.scenarios],
            "interleaved": self.interleaved,
            "replicates": self.replicates,
            "process_spread": self.spread,
            "checks": [spec.spec for spec in self.checks],
            "prices": [price.text for price in self.prices],
        }

    def to_run_dict(
        self,
        *,
        reference: str,
        bucket_plan: dict[str, Any] | None,
        scenarios: Sequence[ScenarioSpec],
        requirements: Sequence[str],
        reference_added: bool = False,
    ) -> dict[str, Any]:
        """What a run stores as its ``settings``: :meth:`to_dict`, with what the trial resolved
        the settings to: the ``reference`` target's spec (``reference_added``: the trial added it,
        the user did not list it), the bucket plan (``buckets``), every
        scenario run (single-stream first, then those asked for and those a requirement
        needed) and the requirements checked."""
        return {
            **self.to_dict(),
            "reference": reference,
            "reference_added": reference_added,
            "buckets": bucket_plan,
            "scenarios": [*always_run(), *(s.spec for s in scenarios if s.name not in always_run())],
            "requirements": list(requirements),
        }

    def describe(self) -> str:
        """How the targets were measured, in a line: processes, turns, the minimums, and what
        a user changed from the defaults."""
        how = ("in worker processes, one each" if self.isolate else "all in one process") + (
            ", timed in turns" if self.interleaved else ", one after another"
        )
        parts = [how, f"at least {self.timing.min_samples} calls and {self.timing.min_seconds:g} s each"]
        if self.replicates > 1:
            parts.append(f"{self.replicates} replicate processes each")
        if self.isolate:
            parts.append(f"speed intervals include a {self.spread:g} spread between processes")
        if self.cold_cache:
            parts.append("cold compile cache")
        if self.env:
            parts.append("switches " + " ".join(f"{k}={v}" for k, v in self.env))
        return "; ".join(parts)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrialSettings:
        """The settings a stored run's ``settings`` ask for, from any version, checked like
        user input (see :meth:`from_options`).

        A key a document lacks takes the value its version used: version 1 stored no
        scenarios, interleaving, replicates, process spread, check options or prices (a
        single process, timed alone, the default spread, the checks' defaults, no prices),
        and no ``round_warmup`` in ``timing`` (see
        :meth:`~bakeoff.measure.timing.TimingSettings.from_dict`). The requirements stored are
        the ones checked; none stored reads as "check the workload's kept ones". An in-process
        run stores ``interleaved`` false because one process cannot take turns; that is not a
        wish to time targets one after another.

        Raises:
            SpecError: a stored value that is no longer valid input.
        """
        timing = TimingSettings.from_dict(data.get("timing") or {})
        isolate = data.get("isolate", True)
        settings = cls.from_options(
            isolate=isolate,
            timeout_s=data.get("timeout_s", cls.timeout_s),
            min_samples=timing.min_samples,
            min_seconds=timing.min_seconds,
            profile=InputProfile.from_dict(data["profile"]) if data.get("profile") else None,
            pad_to_buckets=data.get("pad_to_buckets"),
            max_buckets=data.get("max_buckets", cls.max_buckets),
            cold_compile_cache=data.get("cold_cache", cls.cold_cache),
            env=[f"{k}={v}" for k, v in data.get("env") or ()],
            scenarios=list(data.get("scenarios") or ()),
            requirements=list(data["requirements"]) if data.get("requirements") else None,
            interleave=not (isolate and data.get("interleaved") is False),
            replicates=data.get("replicates", cls.replicates),
            process_spread=data.get("process_spread"),
            checks=list(data.get("checks") or ()),
            prices=list(data.get("prices") or ()),
        )
        return replace(settings, timing=timing)  # whole, as stored (a rerun repeats only its minimums)


# -- the table -----------------------------------------------------------------------------


_TIMING = TimingSettings()

#: Every setting, in the order its value is checked (the first bad one is reported).
TRIAL_OPTIONS: dict[str, Option] = {
    option.keyword: option
    for option in (
        Option(
            "min_samples",
            "--samples",
            _TIMING.min_samples,
            "Minimum timed calls per target.",
            check_samples,
            bounds=SAMPLES_BOUNDS,
            example=7,
        ),
        Option(
            "min_seconds",
            "--min-time",
            _TIMING.min_seconds,
            "Minimum seconds of timed calls per target.",
            check_min_seconds,
            bounds=MIN_SECONDS_BOUNDS,
            example=0.25,
        ),
        Option(
            "isolate",
            "--in-process",
            TrialSettings.isolate,
            "Run each target in its own worker process (crashes and hangs become results).",
            flag_help="Run targets in this process (faster; a crash ends the run).",
            example=False,
        ),
        Option(
            "timeout_s",
            "--timeout",
            TrialSettings.timeout_s,
            "Seconds one step of a target (preparing, a timing round, its scenarios, its checks) may take "
            "before its worker is killed and the target recorded as timed out (worker processes only).",
            check_timeout,
            bounds=TIMEOUT,
            example=120.0,
        ),
        Option(
            "interleave",
            "--sequential",
            TrialSettings.interleave,
            "Time the targets' worker processes in turns (A B A B), so that drift affects all alike.",
            flag_help="Time targets one after another instead of in turns (less memory at once).",
            example=False,
        ),
        Option(
            "replicates",
            "--replicates",
            TrialSettings.replicates,
            "Measure each target (the reference too) in this many worker processes and pool them: speed "
            "intervals then include the spread between processes (a few percent on CPUs).",
            check_replicates,
            bounds=REPLICATES_BOUNDS,
            example=2,
        ),
        Option(
            "process_spread",
            "--process-spread",
            TrialSettings.process_spread,
            "The spread between worker processes (standard deviation of log median latency) that speed "
            f"intervals include; default {PROCESS_SPREAD:g}, measured on a shared 2-core machine "
            "(benchmarks/aa_calibration.py measures yours).",
            check_process_spread,
            bounds=SPREAD_BOUNDS,
            example=0.05,
        ),
        Option(
            "refresh_baseline",
            "--refresh-baseline",
            TrialSettings.refresh_baseline,
            "Recompute the baseline first, even if a fresh one is stored.",
            example=True,
            repeated=False,
        ),
        Option(
            "pad_to_buckets",
            "--pad-to-buckets",
            TrialSettings.pad_to_buckets,
            "Also run each target with requests padded to these buckets ('auto', or sizes such as 64,128,256), "
            "side by side: the static-shape what-if (needs a profile).",
            check_pad_to_buckets,
            keyword_note="A list of sizes works too.",
            metavar="auto|N,N,...",
            example="64,128",
        ),
        Option(
            "max_buckets",
            "--max-buckets",
            TrialSettings.max_buckets,
            "How many buckets 'auto' may choose.",
            check_max_buckets,
            bounds=MAX_BUCKETS_BOUNDS,
            example=2,
        ),
        Option(
            "cold_compile_cache",
            "--cold-compile-cache",
            TrialSettings.cold_cache,
            "Give each target's compiler an empty cache (cold compile times; worker processes only).",
            check_cold_cache,
            example=True,
        ),
        Option(
            "profile",
            "--profile",
            TrialSettings.profile,
            "Run over request sizes: 'seq=16,32,64', 'seq=uniform(8,128)&n=50&batch=1,2', "
            "'seq=lognormal(8,512)&n=50', or a .csv/.jsonl file of lengths.",
            check_profile,
            keyword_note="Or an :class:`~bakeoff.workload.profile.InputProfile`.",
            metavar="PROFILE",
            example="seq=16,32",
        ),
        Option(
            "env",
            "--env",
            TrialSettings.env,
            "Environment switch set while each target runs, e.g. a backend's strict no-fallback mode "
            "(repeatable; recorded as an adjustment).",
            check_env,
            keyword_note="A list of KEY=VALUE texts, or one.",
            metavar="KEY=VALUE",
            example=["TORCHINDUCTOR_FREEZING=1"],
            multiple=True,
        ),
        Option(
            "scenarios",
            "--scenario",
            TrialSettings.scenarios,
            "Also run: offline[?max_batch=64&seq=N], server?rate=20 | server?rate=sweep&bound=p99<=50ms, "
            "generation[?prompt=N&tokens=16], training[?optimizer=adamw] (comma-separated or repeated).",
            check_scenarios,
            keyword_note="A list, or one comma-separated text.",
            metavar="SCENARIO",
            example=["offline"],
            multiple=True,
        ),
        Option(
            "checks",
            "--check",
            TrialSettings.checks,
            "Set a check's options, e.g. 'determinism?repeats=5' (comma-separated or repeated; "
            "`bakeoff checks` lists the checks and their options).",
            check_checks,
            keyword_note="A list, or one comma-separated text.",
            metavar="CHECK",
            example=["determinism?repeats=5"],
            multiple=True,
        ),
        Option(
            "prices",
            "--price",
            TrialSettings.prices,
            "What an hour of a target costs, by target or device, and what it buys: 'cpu=0.34/h@4cores', "
            "'neuron=$1.34/h@1device' (repeatable): the decision then ranks qualifying targets by cost per "
            "million requests, one stream's rate times the streams the instance holds (assumed to scale); "
            "without @, one stream per price.",
            check_prices,
            keyword_note="A list of such texts, or one.",
            metavar="TARGET=PRICE/h[@Ncores]",
            example=["cpu=0.34/h"],
            multiple=True,
        ),
        Option(
            "requirements",
            "--require",
            TrialSettings.requirements,
            "What the service needs, e.g. 'p90<=50ms', 'throughput>=200/s', 'peak_memory<=4GiB', 'ttft<=200ms' "
            "(repeatable; kept with the workload, so later trials check them too).",
            check_requirements,
            keyword_note="None checks the kept ones, [] clears them.",
            metavar="REQ",
            example=["p90<=50ms"],
            multiple=True,
        ),
    )
}
