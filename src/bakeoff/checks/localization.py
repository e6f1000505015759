"""Where exactly does it go wrong? Divergence localisation (on request: ``--localize``).

It runs for a target whose outputs failed the correctness check (or whose training failed at
step 1 in its forward pass): nothing to localise otherwise, and no value is stored. The rule
that judges each tensor and finds the origins is :mod:`bakeoff.analysis.localize`. A trial runs
it after the target's session, in a worker of its own (:mod:`bakeoff.runner.localize`): a
localisation that hangs or crashes is its own ``not_comparable`` value, never the target's error.

Methods, said with the result:
    hooks         an eager target: every module call's inputs and outputs are recorded in the
                  float64 golden, the reference and the target run on the workload's input
    ladder        a compiled target (hooks would break its graphs and change its fusion): first
                  the same recording *eager on the target's device* (the device's kernels);
                  when that agrees, the model is replayed on the reference's inputs compiled
                  with ``aot_eager`` (decomposition) and then by the target's engine as a trial
                  prepares it (the backend compiler: a ``torch.compile`` backend or an export
                  engine such as ``onnxrt``), and the first rung that fails is descended module
                  by module, each module compiled alone on the reference's inputs
Each origin is **confirmed by replay**: the module alone on the target with the reference's
inputs. Still wrong: a local fault (``confirmed``). Right: the error accumulated; the parent
call is replayed in turn and, if it fails, named instead (``walked_up``).

What it cannot see: faults in the backward pass or the optimiser (it replays forward calls),
faults that need another input than the workload's own, and work between modules (it belongs
to the module that does it).

This module holds the check: when it runs, the recording of the golden and the reference, and
what it says. Its value is :mod:`bakeoff.checks.localize_values`, the judging of recorded calls
:mod:`bakeoff.checks.localize_judge`, the methods that find and confirm the origins
:mod:`bakeoff.checks.localize_origins`, and the recording itself :mod:`bakeoff.checks.localize_runs`.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Mapping
from typing import Any, ClassVar

from bakeoff.checks.base import Check, CheckContext, Metric
from bakeoff.checks.localize_judge import Tolerances
from bakeoff.checks.localize_origins import Calls, Plan, Run
from bakeoff.checks.localize_runs import RecordedCall, record_calls
from bakeoff.checks.localize_values import Localization, Origin, kept_with
from bakeoff.specsyntax import Option
from bakeoff.target.execute import move_tensors

__all__ = ["Localization", "LocalizationCheck", "Origin", "kept_with"]

#: Above this many parameters, tensors are recorded as samples unless ``sample=0``.
SAMPLE_ABOVE = 20_000_000
#: Elements kept per tensor when sampling.
SAMPLE_SIZE = 4096


def _summary(value: Localization) -> str:
    first = value.first
    if value.verdict == "localized" and first is not None:
        return f"localized, diverges first in {first.module} ({first.cls}, call {first.call})"
    return f"{value.verdict}: {value.reason or 'no module call diverged'}"


class LocalizationCheck(Check):
    """Where the divergence starts (see the module docstring)."""

    name = "localization"
    title = "where it goes wrong"
    value_type = Localization
    phase = "localization"
    on_request = True
    last = True  # it compiles modules alone after resetting dynamo: after every other check
    options: ClassVar[Mapping[str, Option]] = {
        "tolerances": Option(str, "", help="per-module rules: PATTERN:M or PATTERN:exact, comma-separated"),
        "sample": Option(
            int, -1, minimum=-1, help=f"elements kept per tensor (0: all; -1: all up to {SAMPLE_ABOVE:,} parameters)"
        ),
        "full": Option(str, "", help="modules (globs) whose tensors are kept whole when sampling"),
    }

    def validate(self, options: dict[str, Any], text: str) -> None:
        Tolerances(options["tolerances"])

    def not_applicable(self, target: Any, is_reference: bool) -> str | None:
        return "the reference is what is localised against" if is_reference else None

    def run(self, context: CheckContext) -> Localization | None:
        correctness = context.results.get("correctness")
        training = context.results.get("training")
        wrong = getattr(correctness, "verdict", None) == "fail" or (
            getattr(training, "verdict", None) == "fail" and getattr(training, "fault", "") == "forward"
        )
        if not wrong:
            return None
        started = time.perf_counter()
        try:
            value = self._localize(context)
        except Exception as exc:
            value = Localization("not_comparable", reason=f"{type(exc).__name__}: {str(exc)[:300]}")
        return Localization(**{**value.__dict__, "seconds": time.perf_counter() - started})

    # -- the runs ------------------------------------------------------------------------------
    def _localize(self, context: CheckContext) -> Localization:
        import torch

        from bakeoff.workload.registry import build_workload

        target, dtype, options = context.target, context.dtype, context.options
        if getattr(target, "amp", None):
            return Localization(
                "not_comparable",
                reason=f"localising a mixed-precision target (amp={target.amp}) is not done: its module calls "
                "would be judged against an fp32 reference",
            )
        built = build_workload(context.job.workload_spec)
        if built.fingerprint != context.job.fingerprint:
            return Localization("not_comparable", reason="the workload built again differs from the baseline's")
        golden_model = copy.deepcopy(built.model).double().eval()
        reference_model = copy.deepcopy(built.model).to(getattr(torch, dtype)).eval()
        size = sum(p.numel() for p in built.model.parameters())
        sample = options.get("sample", -1)
        sample = (SAMPLE_SIZE if size > SAMPLE_ABOVE else 0) if sample < 0 else sample
        full = _globs(options.get("full", ""))
        run = Run(Plan(sample, full, Tolerances(options.get("tolerances", ""))))

        def run_on(model: Any, cast: Any, whole: set[str] = frozenset()) -> list[RecordedCall]:
            args, kwargs = move_tensors((built.args, built.kwargs), None, cast)
            with torch.no_grad():
                return record_calls(model, lambda: model(*args, **kwargs), sample, run.plan.keeper(whole))

        golden = run_on(golden_model, torch.float64)
        reference = run_on(reference_model, getattr(torch, dtype))
        rerun = sample > 0
        gold_by = Calls(golden, (lambda names: run_on(golden_model, torch.float64, names)) if rerun else None)
        ref_by = Calls(
            reference, (lambda names: run_on(reference_model, getattr(torch, dtype), names)) if rerun else None
        )
        if target.backend is None:
            return run.hooks(context, golden, reference, gold_by, ref_by, "hooks", "")
        return run.ladder(context, golden, gold_by, ref_by)

    # -- what it says --------------------------------------------------------------------------
    def metrics(self, value: Localization | None) -> list[Metric]:
        return []

    def facts(self, value: Localization, result: Any) -> list[str]:
        lines = self._latest_facts(value)
        if value.earlier:
            lines.append(
                "earlier localisations (latest first): "
                + "; ".join(f"{v.at or 'undated'}: {_summary(v)}" for v in value.earlier)
            )
        return lines

    def _latest_facts(self, value: Localization) -> list[str]:
        if value.verdict != "localized" or value.first is None:
            return [f"localisation {value.verdict}: {value.reason or 'no module call diverged'} ({value.method})"]
        first = value.first
        said = {
            "confirmed": "confirmed by replay (wrong alone on the reference's inputs)",
            "accumulated": "not confirmed: alone on the reference's inputs it is right (accumulated error)",
            "walked_up": f"right alone; its caller {first.walked_to} is wrong alone",
        }.get(first.replay, first.replay)
        lines = [
            f"diverges first in {first.module} ({first.cls}, call {first.call}): error {first.target_err:.3g} vs "
            f"the reference's {first.reference_err:.3g}, {_against_allowed(first)}; {said}"
            + (f"; {first.downstream} later calls diverged with it" if value.calls else "")
        ]
        if first.ops:
            lines.append(f"inside {first.module}: {first.ops}")
        if value.rung:
            lines.append(f"the first rung that fails: {value.rung} ({value.method})")
        if len(value.origins) > 1:
            lines.append("other origins: " + ", ".join(f"{o.module} (call {o.call})" for o in value.origins[1:]))
        return lines

    def figures(self, results: Any) -> list[tuple[str, dict[str, Any]]]:
        import html

        data = []
        for r in results:
            value = r.checks.get("localization")
            if value is None or not value.calls:
                continue
            depths: dict[int, float] = {}
            for call in value.calls:
                depths[call.depth] = max(depths.get(call.depth, 0.0), call.ratio)
            order = sorted(depths)
            data.append(
                {"type": "bar", "name": html.escape(r.target.spec, quote=False), "x": order,
                 "y": [depths[d] for d in order]}
            )  # fmt: skip
        if not data:
            return []
        layout = {
            "height": 320, "showlegend": True, "barmode": "group", "title": {"text": "error by module depth"},
            "xaxis": {"title": "depth (0: the model)"}, "yaxis": {"title": "worst error / allowed", "type": "log"},
            "margin": {"l": 60, "r": 20, "t": 40, "b": 60},
        }  # fmt: skip
        return [
            (
                "Worst output error of the module calls at each depth, over the error the three-way rule allows "
                "(above 1 diverged)",
                {"data": data, "layout": layout},
            )
        ]


def _against_allowed(first: Origin) -> str:
    """The origin's error against the error it was allowed (``tolerance`` times the reference's
    error, plus the dtype's rounding at the values' scale), in figures that agree with each other."""
    rule = f"{first.tolerance:g}x the reference's error and the dtype's rounding at the values' scale"
    if first.ratio > 0 and math.isfinite(first.ratio):
        return f"{first.ratio:.3g}x the allowed {first.target_err / first.ratio:.3g} ({rule})"
    return f"beyond the allowed ({rule})"


def _globs(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())
