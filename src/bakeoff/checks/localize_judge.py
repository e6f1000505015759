"""How a localisation judges recorded tensors: the three-way rule applied to module calls.

Each tensor a module call took or gave is compared in the target, the reference and the float64
golden (:func:`bakeoff.analysis.localize.judge_tensor` is the rule); :func:`judge_values` judges
every tensor of one value and :func:`judge_calls` every call the three runs share. A user's
per-module rules (:class:`Tolerances`: a multiple, or ``exact`` for a discrete output) change
what a call is allowed.
"""

from __future__ import annotations

from typing import Any

from bakeoff.analysis.localize import CallJudgement, TensorFigures, judge_tensor
from bakeoff.checks.localize_runs import RecordedCall, flat_tensors
from bakeoff.errors import SpecError

__all__ = ["Tolerances", "judge_calls", "judge_values"]


def _figures(target: Any, reference: Any, golden: Any, exact: bool = False) -> TensorFigures:
    import math

    import torch

    if target is None or tuple(target.shape) != tuple(golden.shape):
        return TensorFigures(math.inf, 0.0, 1.0)
    if exact and golden.is_floating_point():  # a discrete output the user named: equal to the reference's
        differing = float((target.cpu().double() != reference.double()).double().mean()) if golden.numel() else 0.0
        return TensorFigures(0.0, 0.0, 0.0, discrete=True, differing=differing)
    if not golden.is_floating_point():
        differing = float((target.cpu() != golden).double().mean()) if golden.numel() else 0.0
        return TensorFigures(0.0, 0.0, 0.0, discrete=True, differing=differing)
    t, r, g = (x.detach().cpu().double() for x in (target, reference, golden))

    def rms(x: Any) -> float:
        return float(x.pow(2).mean().sqrt()) if x.numel() else 0.0

    finite = torch.isfinite(g)
    if not bool(torch.isfinite(t)[finite].all()):
        return TensorFigures(math.inf, rms((r - g)[finite]), rms(g[finite]))
    return TensorFigures(rms((t - g)[finite]), rms((r - g)[finite]), rms(g[finite]))


def judge_values(
    target: Any, reference: Any, golden: Any, prefix: str, dtype: str, rule: float | str | None = None
) -> tuple[bool, float, Any]:
    """All tensors of three values: ``(passed, worst ratio, figures of the worst)``; ``rule`` is a
    user's tolerance for the module: a multiple m, or ``exact`` (see :class:`Tolerances`)."""
    golden_flat = flat_tensors(golden, prefix)
    target_flat, reference_flat = flat_tensors(target, prefix), flat_tensors(reference, prefix)
    passed, worst, worst_figures = True, 0.0, None
    for name, gold in golden_flat.items():
        if name not in reference_flat:
            continue
        figures = _figures(target_flat.get(name), reference_flat[name], gold, exact=rule == "exact")
        ok, ratio = judge_tensor(figures, dtype, rule if isinstance(rule, float) else None)
        passed = passed and ok
        if worst_figures is None or ratio > worst:
            worst, worst_figures = ratio, figures
    return passed, worst, worst_figures


def judge_calls(
    golden: list[RecordedCall],
    reference: list[RecordedCall],
    target: list[RecordedCall],
    dtype: str,
    tolerances: Tolerances | None = None,
) -> tuple[list[CallJudgement], dict[tuple[str, int], Any]]:
    ref_by, target_by = {c.key: c for c in reference}, {c.key: c for c in target}
    judged, worst = [], {}
    for call in golden:
        ref, tgt = ref_by.get(call.key), target_by.get(call.key)
        if ref is None or tgt is None:
            continue
        rule = tolerances.rule(call.name, call.cls) if tolerances else None
        inputs = (tgt.args, tgt.kwargs), (ref.args, ref.kwargs), (call.args, call.kwargs)
        inputs_pass = judge_values(*inputs, "in", dtype)[0]
        output_pass, ratio, figures = judge_values(tgt.output, ref.output, call.output, "out", dtype, rule)
        judged.append(CallJudgement(call.key, call.parent, inputs_pass, output_pass, ratio))
        worst[call.key] = figures
    return judged, worst


class Tolerances:
    """Per-module tolerances a user sets: ``PATTERN:M`` (the three-way rule with multiple M) or
    ``PATTERN:exact`` (a discrete output, a router's choice say: any element that differs from
    the reference's fails), comma-separated; PATTERN is a glob over the module's qualified name
    or its class name. The first pattern that matches applies."""

    def __init__(self, text: str) -> None:
        self.rules: list[tuple[str, float | str]] = []
        for item in (part.strip() for part in text.split(",") if part.strip()):
            pattern, sep, value = item.rpartition(":")
            if not sep or not pattern:
                raise SpecError(
                    f"tolerance {item!r} is not PATTERN:M or PATTERN:exact", hint="e.g. *Router:exact,lm_head:4"
                )
            if value == "exact":
                self.rules.append((pattern, "exact"))
                continue
            try:
                multiple = float(value)
            except ValueError:
                raise SpecError(
                    f"tolerance {item!r}: {value!r} is not a number or exact", hint="e.g. lm_head:4"
                ) from None
            if not multiple >= 1.0:
                raise SpecError(
                    f"tolerance {item!r}: a multiple below 1 would fail the reference itself", hint="e.g. :4"
                )
            self.rules.append((pattern, multiple))

    def rule(self, name: str, cls: str) -> float | str | None:
        from fnmatch import fnmatchcase

        return next((v for p, v in self.rules if fnmatchcase(name, p) or fnmatchcase(cls, p)), None)
