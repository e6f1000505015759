"""What a check is: one kind of evidence about a target, owned by one module.

A check owns its whole slice: whether it applies to a target (and why not), any set-up before
the target is prepared, how it runs in the target's session once timing is done, its frozen
result value (read and written by :mod:`bakeoff.codec`), the metrics it offers to regressions,
and the one-line facts the reports show. The trial runs ``for check in registered_checks()``
(:mod:`bakeoff.checks.registry`) and never names one.

A check runs inside the target's session (in its worker process when isolated) and sees it
through a :class:`CheckContext`; everything it returns must be a plain frozen value.

A check may declare typed options (:attr:`Check.options`); a user sets them with
``--check NAME?key=value`` (``checks=["NAME?key=value"]`` in the API), the run stores them with
its settings, and the check reads them from :attr:`CheckContext.options`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from bakeoff.codec import decode, encode
from bakeoff.specsyntax import Option
from bakeoff.stats import Estimate

__all__ = ["Check", "CheckContext", "CheckSpec", "Metric", "Option", "ScriptContext"]


@dataclass(frozen=True)
class CheckSpec:
    """A check and the options a user set, e.g. ``determinism?repeats=5``: every option the
    check declares, given or defaulted."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def spec(self) -> str:
        """The text that gives these options again (defaults left out)."""
        from bakeoff.checks.registry import check_named

        check = check_named(self.name)
        known = check.options if check is not None else {}
        given = {k: v for k, v in self.options.items() if k not in known or v != known[k].default}
        return self.name + ("?" + "&".join(f"{k}={v}" for k, v in given.items()) if given else "")


@dataclass(frozen=True)
class Metric:
    """A figure a check offers to regressions between runs.

    ``kind`` says how two values compare: ``verdict`` (better by ``rank``, higher is better; a
    value outside the rank is not comparable), ``count`` (lower is better; a change counts
    beyond the thresholds' count tolerance), ``share`` (a fraction, higher is better; beyond
    the share tolerance), ``score`` (a measured difference, higher is better, with its
    ``estimate``: a change counts when the two intervals do not overlap) or ``time`` (one
    process's reading in milliseconds, for requirements only: not compared between runs). ``breakdown`` names
    what a count is made of (ops, modules), so a change can say what moved. ``estimate``: the
    value's interval where it has one (a requirement on it is then judged on the interval, not
    as a single observation).
    """

    name: str
    value: Any
    kind: str
    rank: Mapping[str, int] = field(default_factory=dict)
    breakdown: Mapping[str, int] | None = None
    estimate: Estimate | None = None


@dataclass
class CheckContext:
    """What a check sees of a target's session once timing is done.

    ``outputs`` maps each input's tag (``""`` for the workload's own input, ``@BxS`` for a
    profile shape) to the flattened outputs the timed calls produced, in the target's own
    form (padding removed); ``call(tag)`` runs the prepared model on that input again and
    returns its flattened outputs the same way. ``dtype`` is the dtype the outputs are judged
    in and ``native`` the workload's own. ``results`` holds the values of the checks that ran
    before this one, by name; ``scenarios`` the scenario results so far. ``options`` are the
    running check's own (every option it declares, as the user set it or defaulted).
    ``processes`` starts fresh Python interpreters for a check that needs them
    (:class:`bakeoff.launch.command.FreshPython`: ``run(code, args, env, timeout_s, who)`` and
    ``tempdir(kind)``; None where the caller gives none).
    """

    job: Any
    target: Any
    prepared: Any
    outputs: dict[str, dict[str, Any]]
    call: Callable[[str], dict[str, Any]]
    dtype: str
    native: str
    fingerprint: str
    settled: bool | None = None
    compile_snapshot: dict[str, Any] | None = None
    profile_shapes: tuple[dict[str, Any], ...] | None = None
    unsteady: tuple[str, ...] = ()
    results: dict[str, Any] = field(default_factory=dict)
    scenarios: tuple[Any, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    processes: Any = None


@dataclass
class ScriptContext:
    """What a check sees of one target's run of a whole script (``bakeoff exec``), once the run
    and the reference's are over.

    ``run``, ``reference`` and ``honest`` (the reference again under rounding noise, None when it
    did not finish) are the script runs (:class:`bakeoff.runner.script.ScriptRun`): ``status``,
    ``error``, ``captures`` (name -> the values of each call: tensors, numbers, strings),
    ``outputs`` (the files it wrote, read), ``audit`` (what the run's own process measured, by
    check name: ``placement``, ``compilation``) and ``result`` (the launcher's record). A run that
    failed is given too: what it captured before it stopped may already be wrong.
    ``reference_name`` says what the reference is ("the script on cpu"). ``results`` holds the
    values of the checks that ran before this one; ``notes`` takes what a check adds to the
    target's notes; ``options`` are the check's own, defaulted.
    """

    target: Any
    run: Any
    reference: Any
    honest: Any
    reference_name: str
    results: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)


class Check:
    """The base of every check; subclasses set the class attributes and override what they use.

    Attributes:
        name: the key of its value in a target's result and in the run document.
        title: a few words for reports.
        value_type: the frozen dataclass its :meth:`run` returns.
        phase: what a failure during :meth:`run` is reported as having happened in.
        answers: the question of the reports' evidence ("correct", "placement") whose answer
            already renders this check's value; empty: the reports list its facts themselves.
        last: running it changes how the target runs afterwards (a compiled model called under
            a dispatch mode runs eagerly from then on), so it runs after every other check and
            after the scenarios that run last (training).
        offers: the numeric metrics of :meth:`metrics` that requirements may name, as
            ``name -> (kind, what it means)`` with kind ``count`` or ``share``
            (``--require 'recompiles<=0'``, ``--require 'device_op_share>=95%'``).
        options: the options a user may set (``--check NAME?key=value``), by name; the check
            reads them in :meth:`run` from ``context.options``.
        on_request: it runs only when a user names it (``--check NAME``): it costs more than a
            trial should pay by default (the training check trains three models).
    """

    name: ClassVar[str]
    title: ClassVar[str]
    value_type: ClassVar[type]
    phase: ClassVar[str] = ""
    answers: ClassVar[str] = ""
    last: ClassVar[bool] = False
    offers: ClassVar[Mapping[str, tuple[str, str]]] = {}
    options: ClassVar[Mapping[str, Option]] = {}
    on_request: ClassVar[bool] = False

    def validate(self, options: dict[str, Any], text: str) -> None:
        """Refuse option values that are well-typed but wrong (SpecError); types and minimums
        are checked before, from :attr:`options`."""

    def not_applicable(self, target: Any, is_reference: bool) -> str | None:
        """Why this check does not apply to ``target`` (None: it applies). Decided before the
        target runs, from its spec alone."""
        return None

    def setup(self, target: Any) -> None:
        """Set-up in the target's session before the target is prepared."""

    def run(self, context: CheckContext) -> Any:
        """The check's value for the target; raising makes the target's result an error."""
        raise NotImplementedError

    def run_script(self, context: ScriptContext) -> Any | None:
        """The check's value for a target's run of a whole script (``bakeoff exec``), from what
        the run recorded; None: the check has nothing to say of a script (the default). Raising
        makes the target's result an error, as :meth:`run` does."""
        return None

    def on_error(self, why: str) -> Any | None:
        """The value to record when the target failed before this check could run (None: none);
        ``why`` says what happened, e.g. "the target failed during timing"."""
        return None

    def metrics(self, value: Any | None) -> list[Metric]:
        """The figures regressions compare between runs (``value`` None: not measured)."""
        return []

    def misses(self, value: Any) -> tuple[list[str], list[str]]:
        """What the value means for the decision: ``(misses, doubts)``; a miss rules the target
        out, a doubt leaves it undecided (see :mod:`bakeoff.verdicts.decision`). The correctness
        and placement verdicts are the decision's own; other checks say theirs here."""
        return [], []

    def figures(self, results: Any) -> list[tuple[str, dict[str, Any]]]:
        """``(caption, plotly figure)`` pairs for the HTML report over a run's target results
        (``results``), drawn from this check's values; nothing to draw: []."""
        return []

    def notes(self, value: Any) -> list[str]:
        """Warnings to store in the target's ``notes`` (shown wherever its notes are)."""
        return []

    def facts(self, value: Any, result: Any) -> list[str]:
        """One-line facts for the terminal's notes and the Markdown report (nothing to say: [])."""
        return []

    def headline(self, value: Any, result: Any) -> list[str]:
        """The facts the terminal's summary keeps: a problem a reader must see even where the
        decision already names the target (by default all of :meth:`facts`; a check that says
        more than problems narrows it, and the rest stays in ``--verbose``)."""
        return self.facts(value, result)

    def details(self, value: Any, result: Any) -> list[str]:
        """The lines of the HTML report's detail (by default the facts)."""
        return self.facts(value, result)

    def encode(self, value: Any) -> Any:
        return encode(value)

    def decode(self, data: Any) -> Any:
        return decode(self.value_type, data)
