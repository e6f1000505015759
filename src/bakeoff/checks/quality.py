"""Does the application still score the same on the target? The quality check (on request:
``--check quality``; a requirement on ``quality`` asks for it too).

Tensor tolerances say whether outputs are close, not whether the application's answers got
worse. This check scores the workload on the target and on the reference (a fresh eager copy on
the CPU in the workload's own dtype, built in the target's session) over the same examples, one
score per example (:mod:`bakeoff.checks.quality_tasks`: the team's ``eval=module:function``, or
``task=perplexity`` / ``task=exact_match`` for language models), and gives the **paired**
difference of the mean scores, target minus reference, with a 95% bootstrap interval over the
examples (:func:`bakeoff.stats.paired_difference`). Differences are in points: scores that are
fractions (accuracy, exact match) count x100, so -3 is three percentage points lost; for
perplexity, minus the change of the mean log-likelihood per token x100, about the percent by
which perplexity grew (negative: worse). ``unit=score`` reports a team's scores as returned.

Verdicts (what the interval says, not whether it is acceptable):
    same    the interval holds 0: no difference these examples can show
    lower   the whole interval is below 0: the target scores lower
    higher  the whole interval is above 0
    error   scoring on the target raised, or returned other than one finite number per
            example, or a count the reference's does not pair with; the target is ruled out
    not_comparable
            nothing this target did: the task cannot run on the workload, scoring the reference
            failed, the scores are out of their unit or overflow, or the recompile limit was
            hit while scoring (some shapes ran eagerly); a doubt in the decision

The reference is scored outside any autocast (a mixed-precision target's session keeps its own
on), and every random generator is seeded alike before each side. Where no example moved one
way, the interval's end on that side is widened to the rate an exact bound still allows (with
two examples and no change, -84 to +84 points, not 0 to 0); fewer than 30 examples are "too few
samples" for a requirement.

How much lower is acceptable is the team's: ``--require 'quality>=-0.5'`` is met only when the
whole interval is at or above -0.5, not met when it is all below, and not conclusive when it
straddles the limit (never a pass).

What it cannot see: examples other than those scored (a small set gives a wide interval, which
is shown), sampling (decoding is greedy), and a reference other than eager CPU in the
workload's dtype.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from bakeoff.checks.base import Check, CheckContext, Metric
from bakeoff.codec import Value
from bakeoff.errors import SpecError
from bakeoff.specsyntax import Option
from bakeoff.stats import Estimate
from bakeoff.units import clip

__all__ = ["Quality", "QualityCheck"]

#: Examples whose scores moved most, kept in a value.
KEPT = 5
#: The confidence of the interval.
CONFIDENCE = 0.95
#: Fewer examples than this back a difference too weakly for a requirement ("too few samples").
MIN_EXAMPLES = 30
UNITS = ("points", "score")


@dataclass(frozen=True)
class Quality(Value):
    """The paired comparison: ``difference`` (target minus reference, in ``unit``) with its
    ``low``-``high`` interval at ``confidence`` over ``examples``; ``reference_score`` and
    ``target_score`` the means in the same unit (for perplexity, ``reference_perplexity`` and
    ``target_perplexity`` too); ``changed`` how many examples scored differently, ``moved`` the
    indices of the first :data:`KEPT` that dropped most."""

    verdict: str
    reason: str = ""
    task: str = ""
    unit: str = "points"
    examples: int = 0
    reference_score: float | None = None
    target_score: float | None = None
    difference: float | None = None
    low: float | None = None
    high: float | None = None
    confidence: float = 0.95
    changed: int = 0
    moved: tuple[int, ...] = ()
    reference_perplexity: float | None = None
    target_perplexity: float | None = None

    @property
    def estimate(self) -> Estimate | None:
        if self.difference is None or self.low is None or self.high is None:
            return None
        enough = self.examples >= MIN_EXAMPLES
        return Estimate(self.difference, self.low, self.high, self.examples, self.confidence, enough)


def _interval(value: Quality) -> str:
    return f"{value.difference:+.3g} {value.unit} ({value.low:+.3g} to {value.high:+.3g}, {value.confidence:.0%} CI)"


class QualityCheck(Check):
    """The task's score on the target against the reference's (see the module docstring)."""

    name = "quality"
    title = "task quality"
    value_type = Quality
    phase = "quality check"
    on_request = True
    offers: ClassVar[Mapping[str, tuple[str, str]]] = {
        "quality": ("score", "the task's score on the target minus the reference's, in points (95% interval)")
    }
    options: ClassVar[Mapping[str, Option]] = {
        "eval": Option(
            str, "", help="the team's evaluation, module:function or file.py:function: one score per example"
        ),
        "task": Option(str, "perplexity", help="a built-in task without eval: perplexity or exact_match"),
        "text": Option(str, "", help="the text file perplexity reads (a bundled sample by default)"),
        "prompts": Option(str, "", help="the prompts exact_match decodes, JSON lines with prompt and answer"),
        "examples": Option(int, 200, minimum=2, help="at most this many examples are scored"),
        "tokens": Option(int, 8, minimum=1, help="tokens exact_match generates for a prompt without an answer"),
        "unit": Option(str, "points", help="points: scores are fractions, differences x100; score: as returned"),
    }

    def validate(self, options: dict[str, Any], text: str) -> None:
        from bakeoff.checks.quality_tasks import TASKS, load_eval

        if options["unit"] not in UNITS:
            raise SpecError(
                f"quality unit {options['unit']!r} in {text!r} is unknown", hint="use unit=points or unit=score"
            )
        if options["eval"]:
            load_eval(options["eval"])  # one clear line now, not an error per target later
            given = [
                k for k in ("task", "text", "prompts", "examples", "tokens") if options[k] != self.options[k].default
            ]
            if given:
                raise SpecError(
                    f"{given[0]}= in {text!r} is for the built-in tasks; eval= scores the examples it chooses",
                    hint="drop it, or drop eval=",
                )
        elif options["task"] not in TASKS:
            raise SpecError(
                f"unknown quality task {options['task']!r} in {text!r}", hint="use task=" + " or task=".join(TASKS)
            )
        for key in ("text", "prompts"):
            if options[key]:
                path = Path(options[key]).expanduser()
                if not path.is_file():
                    given = f"{options[key]!r} for the quality check's {key}"
                    said = f"{given} is a directory, not a file" if path.is_dir() else f"no such file {given}"
                    raise SpecError(said, hint=f"give {key}=FILE")

    def not_applicable(self, target: Any, is_reference: bool) -> str | None:
        if is_reference:
            return "the reference's scores are what the quality check compares with"
        return None

    def run(self, context: CheckContext) -> Quality:
        import torch

        from bakeoff.checks.quality_tasks import task_for
        from bakeoff.target.engines import engine_for
        from bakeoff.target.execute import move_tensors
        from bakeoff.workload.registry import build_workload

        options, target = context.options, context.target
        reference = build_workload(context.job.workload_spec)
        if reference.fingerprint != context.job.fingerprint:
            why = f"the workload built again differs (fingerprint {reference.fingerprint} != {context.job.fingerprint})"
            return Quality("not_comparable", why)
        fixed = target.backend is not None and engine_for(target.backend).fixed_signature
        if fixed and not options["eval"] and options["task"] == "exact_match":
            return Quality("not_applicable", f"the {target.backend} engine runs one input shape; decoding grows it")
        try:
            task = task_for(options, reference)
        except SpecError as exc:  # the task cannot run on this workload: no target's fault
            return Quality("not_comparable", exc.one_line())
        device = None if reference.self_placed else torch.device(target.torch_device)
        dtype = getattr(torch, target.dtype) if target.dtype else None
        with _own_precision(target):  # the reference in its own dtype, not under the target's autocast
            ref = _scores(task, reference.model, lambda value: value, "reference")
        if isinstance(ref, str):
            return Quality("not_comparable", ref, task.what, task.unit)
        summary = context.prepared.compile_summary if context.prepared is not None else None
        limits = (summary() or {}).get("recompile_limit_hits", 0) if summary else 0
        got = _scores(task, context.prepared.model, lambda value: move_tensors(value, device, dtype), "target")
        if isinstance(got, str):
            return Quality("error", got, task.what, task.unit)
        hits = ((summary() or {}).get("recompile_limit_hits", 0) if summary else 0) - limits
        if hits > 0:
            why = (
                f"the recompile limit was hit {hits}x while scoring: those shapes ran eagerly, so these scores are "
                "partly not the compiled target's (score one input shape, or compile with dynamic shapes)"
            )
            return Quality("not_comparable", why, task.what, task.unit)
        return _compared(task, ref, got)

    def on_error(self, why: str) -> Quality:
        return Quality("error", why)

    def metrics(self, value: Quality | None) -> list[Metric]:
        if value is None or value.difference is None:
            return []
        return [Metric("quality", value.difference, "score", estimate=value.estimate)]

    def misses(self, value: Quality) -> tuple[list[str], list[str]]:
        if value.verdict == "error":
            return [f"quality error: {clip(value.reason, 160)}"], []
        if value.verdict == "not_comparable":
            return [], [f"quality not comparable: {clip(value.reason, 160)}"]
        return [], []

    def facts(self, value: Quality, result: Any) -> list[str]:
        if value.verdict == "not_applicable":
            return []
        line = f"quality {value.verdict.replace('_', ' ')}: {clip(value.reason, 400)}"
        if value.moved:
            line += "; first examples that dropped: " + ", ".join(map(str, value.moved))
        asked = [r for r in getattr(result, "requirements", ()) if r.get("metric") == "quality"]
        if value.verdict == "lower" and not asked:
            line += "; no allowed drop stated (e.g. --require 'quality>=-1')"
        return [line]


@contextmanager
def _own_precision(target: Any) -> Iterator[None]:
    """No autocast while the reference scores: a mixed-precision target's session keeps its
    autocast on, and the reference must run in the workload's own dtype."""
    import torch

    with ExitStack() as stack:
        if getattr(target, "amp", None):
            stack.enter_context(torch.autocast(target.device, enabled=False))
        yield


def _scores(task: Any, model: Any, place: Any, side: str) -> list[float] | str:
    """The task's scores on one side, every random generator seeded alike (an evaluation that
    draws at random pairs its draws), or one line saying why there are none."""
    import random

    import numpy as np
    import torch

    from bakeoff.checks.quality_tasks import finite_scores

    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    try:
        returned = task.score(model, place)
    except Exception as exc:
        return f"scoring on the {side} raised {type(exc).__name__}: {clip(str(exc), 200)}"
    try:
        return finite_scores(returned, f"the evaluation on the {side}")
    except ValueError as exc:
        return str(exc)


def _compared(task: Any, ref: list[float], got: list[float]) -> Quality:
    """The paired comparison of two sides' scores (see the module docstring)."""
    import math

    from bakeoff.stats import paired_difference

    if len(ref) != len(got) or len(ref) < 2:
        why = f"{len(ref)} scores on the reference and {len(got)} on the target: they cannot be paired"
        return Quality("error", why + " (score the same examples, at least 2, in the same order)", task.what, task.unit)
    if task.bounded and any(not 0 <= s <= 1 for s in (*ref, *got)):
        why = "scores outside [0, 1] cannot be counted in points: add unit=score to report them as returned"
        return Quality("not_comparable", why, task.what, task.unit)
    estimate = paired_difference(ref, got, task.scale)
    if not all(math.isfinite(x) for x in (estimate.value, estimate.low, estimate.high)):
        why = "the scores' differences are not finite numbers (they overflow): scale the scores down"
        return Quality("not_comparable", why, task.what, task.unit)
    low, high = estimate.low, estimate.high
    if task.bounded:  # no example moved one way: the rate it could still have, by the exact bound
        unseen = (1 - ((1 - CONFIDENCE) / 2) ** (1 / len(ref))) * task.scale
        if not any(b < a for a, b in zip(ref, got, strict=True)):
            low = min(low, estimate.value - unseen)
        if not any(b > a for a, b in zip(ref, got, strict=True)):
            high = max(high, estimate.value + unseen)
    drops = sorted(range(len(ref)), key=lambda i: got[i] - ref[i])
    mean_ref, mean_got = sum(ref) / len(ref), sum(got) / len(got)
    facts: dict[str, Any] = {
        "task": task.what,
        "unit": task.unit,
        "examples": len(ref),
        "reference_score": mean_ref * task.scale,
        "target_score": mean_got * task.scale,
        "difference": estimate.value,
        "low": low,
        "high": high,
        "confidence": estimate.confidence,
        "changed": sum(1 for a, b in zip(ref, got, strict=True) if a != b),
        "moved": tuple(i for i in drops[:KEPT] if got[i] < ref[i]),
    }
    if task.perplexity:  # scores are minus the mean NLL per token
        facts["reference_perplexity"], facts["target_perplexity"] = math.exp(-mean_ref), math.exp(-mean_got)
    verdict = "higher" if low > 0 else "lower" if high < 0 else "same"
    return Quality(verdict, _reason(Quality(verdict, "", **facts)), **facts)


def _reason(value: Quality) -> str:
    """The comparison in one line, its figures as stored."""
    if value.reference_perplexity is not None and value.target_perplexity is not None:
        scores = (
            f"perplexity {value.reference_perplexity:.4g} on the reference, {value.target_perplexity:.4g} on the target"
        )
    else:
        scores = f"{value.reference_score:.4g} on the reference, {value.target_score:.4g} on the target"
    moved = ""
    if value.reference_perplexity is None:  # a perplexity moves on every row by rounding alone
        moved = f", {value.changed} of {value.examples} examples scored differently"
    return f"{_interval(value)} over {value.examples} paired examples ({scores}{moved}); {value.task}"
