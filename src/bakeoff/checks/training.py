"""Does the target train the same? The training parity check (on request: ``--check training``).

``steps`` optimiser steps (``optimizer`` adamw or sgd, learning rate ``lr``) of a float64
golden, the reference (eager CPU, the target's dtype; under CPU autocast in the target's
``amp`` dtype for a mixed-precision target) and the target, from the same weights on
the same batches (:mod:`bakeoff.checks.training_runs`), each step's loss, gradient norm, update
norm and weight distance judged in the band of :mod:`bakeoff.analysis.trajectory`, and each step
judged on its own inputs (the target's weights and optimiser state before it). The loss is
the workload's (:mod:`bakeoff.workload.training`): the causal-LM loss for language models, a
``py:`` workload's own, else a synthetic loss that is named wherever it is shown.

Verdicts: ``pass``, ``drift`` and ``fail`` as in :mod:`bakeoff.analysis.trajectory`;
``not_comparable`` when the training draws random numbers (dropout) or the float64 run itself
diverged; ``error`` when the target raised while training (the rest of its result stands).

What it cannot see: faults below the reference dtype's own noise on this model, faults that
need more steps or other batches than were run, and anything only distributed training does
(collectives, sharded optimiser state).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from bakeoff.analysis.trajectory import (
    FIGURES,
    LocalFigures,
    StepFigures,
    judge_trajectory,
    local_failure,
    multiple_for,
    rounding_floor,
)
from bakeoff.checks.base import Check, CheckContext, Metric
from bakeoff.checks.training_runs import GradientError, Lockstep, TrainingFailed, stochastic_reason
from bakeoff.codec import Value
from bakeoff.errors import SpecError
from bakeoff.specsyntax import Option
from bakeoff.units import clip

__all__ = ["RANK", "TrainingCheck", "TrainingParity"]

#: Training verdicts for regressions, better higher.
RANK = {"pass": 2, "drift": 1, "fail": 0, "error": 0}
OPTIMIZERS = ("adamw", "sgd")
#: Parameters kept in the step-1 gradient table (the worst first).
KEPT_GRADIENTS = 10
_SAID = {"loss": "loss", "grad_norm": "gradient norm", "update_norm": "update norm", "weights": "weights"}


@dataclass(frozen=True)
class TrainingParity(Value):
    """The target's training trajectory against the reference's and the float64 golden's.

    ``curve`` holds every step's figures (golden, reference, target); ``gradients`` the step-1
    gradient errors of the worst :data:`KEPT_GRADIENTS` parameters of ``gradients_total``, of
    which ``gradients_failed`` broke the three-way rule. ``first_step`` and ``figure`` name the
    first step that is wrong locally (fail only), ``fault`` where: ``forward`` (the loss),
    ``backward`` (the gradients), ``optimiser`` (the update or the optimiser state); ``local``
    holds every step judged from the target's own weights and state
    (:class:`~bakeoff.analysis.trajectory.LocalFigures`). ``multiple`` and ``floor`` are the
    band's m and eps, ``grown`` how far the reference's own error grew; ``seconds`` the check's
    wall time by run.
    """

    verdict: str
    reason: str = ""
    steps: int = 0
    optimizer: str = ""
    lr: float = 0.0
    loss_kind: str = ""
    loss: str = ""
    dtype: str = ""
    multiple: float = 0.0
    floor: float = 0.0
    grown: float = 1.0
    worst: float = 0.0
    first_step: int | None = None
    figure: str | None = None
    error: float | None = None
    band: float | None = None
    fault: str = ""
    curve: tuple[StepFigures, ...] = ()
    local: tuple[LocalFigures, ...] = ()
    gradients: tuple[GradientError, ...] = ()
    gradients_failed: int = 0
    gradients_total: int = 0
    seconds: dict[str, float] | None = None

    @property
    def summary(self) -> str:
        """The verdict in one short line (the reason has the figures in full)."""
        if self.verdict != "fail" or self.first_step is None:
            return f"training {self.verdict}" + (f" over {self.steps} steps" if self.verdict in RANK else "")
        said = _LOCAL_SAID.get(self.figure or "", _SAID.get(self.figure or "", self.figure or ""))
        figures = f" ({said} error {self.error:.2g} > band {self.band:.2g})" if self.error is not None else ""
        return f"training fails at step {self.first_step}{figures}: {_FAULT_SHORT.get(self.fault, self.fault)}"


_FAULT_SHORT = {
    "forward": "a fault in the forward pass",
    "backward": "a fault in the backward pass",
    "optimiser": "a fault in the optimiser step",
}
_LOCAL_SAID = {"loss": "loss", "grads": "gradients", "update": "update", "state": "optimiser state"}
_FAULT_OF = {"loss": "forward", "grads": "backward", "update": "optimiser", "state": "optimiser"}


def judge(
    curve: tuple[StepFigures, ...],
    gradients: tuple[GradientError, ...],
    dtype: str,
    local: tuple[LocalFigures, ...] = (),
    **facts: Any,
) -> TrainingParity:
    """The check's value from the figures (pure: tested on synthetic trajectories).

    A step that is wrong *locally* (from the target's own weights and state) fails the target:
    the first such step is the first diverging step, and its first wrong figure says where
    (loss: forward, gradients: backward, update or state: optimiser). Without one, the
    free-running trajectories decide between pass and drift (:func:`judge_trajectory`); beyond
    the grown band is still drift then, since every step was right given its inputs.
    """
    judged = judge_trajectory(curve, dtype)
    failed = [g for g in gradients if not g.passed]
    worst = sorted(gradients, key=lambda g: (g.passed, -(g.target_err / max(g.reference_err, 1e-300))))
    m, eps = multiple_for(dtype), rounding_floor(dtype)
    common = {
        "dtype": dtype,
        "multiple": m,
        "floor": eps,
        "grown": judged.grown,
        "worst": judged.worst,
        "curve": curve,
        "local": local,
        "gradients": tuple(worst[:KEPT_GRADIENTS]),
        "gradients_failed": len(failed),
        "gradients_total": len(gradients),
        **facts,
    }
    band = f"{m:g}x the {dtype} reference's own error against float64"
    if judged.verdict == "not_comparable":
        return TrainingParity("not_comparable", _golden_diverged(curve), **common)
    wrong = next(((n, found) for n, step in enumerate(local, 1) if (found := local_failure(step, dtype))), None)
    if wrong is not None:
        number, (figure, error, allowed) = wrong
        fault = _FAULT_OF[figure]
        when = "at step 1" if number == 1 else f"at step {number}, after {number - 1} right step(s)"
        reason = (
            f"diverges at step {number}: its {_LOCAL_SAID[figure]}, computed from the target's own weights and "
            f"optimiser state, are off by {error:.3g} > {allowed:.3g} ({band}, + {eps:.2g}); "
            f"{_FAULT_SHORT[fault]} {when}"
        )
        if failed:
            shown = ", ".join(
                f"{g.name} {g.target_err:.2g} vs {g.reference_err:.2g}" for g in worst[:3] if not g.passed
            )
            reason += f"; step-1 gradients off in {len(failed)} of {len(gradients)} parameters ({shown})"
        return TrainingParity(
            "fail", reason, first_step=number, figure=figure, error=error, band=allowed, fault=fault, **common
        )
    right = f"every step right given its inputs ({band})" if local else ""
    if judged.verdict == "pass":
        reason = f"stayed as close to the reference as step 1's noise for all {len(curve)} steps" + (
            f"; {right}" if right else ""
        )
        return TrainingParity("pass", reason, **common)
    if judged.verdict == "drift":
        reason = (
            f"drifted from the reference beyond step 1's noise, within {band} as that grew "
            f"({judged.grown:.3g}x by the last step)" + (f"; {right}" if right else "")
        )
        return TrainingParity("drift", reason, **common)
    said = _SAID[judged.figure or "loss"]
    if not local:  # no step judged on its own inputs: the band is all there is
        reason = (
            f"diverges at step {judged.first_step}: {said} error {judged.error:.3g} > band {judged.band:.3g} ({band})"
        )
        return TrainingParity(
            "fail", reason, first_step=judged.first_step, figure=judged.figure, error=judged.error,
            band=judged.band, fault="", **common,
        )  # fmt: skip
    reason = (
        f"drifted beyond the reference's own band from step {judged.first_step} ({said} error {judged.error:.3g} > "
        f"{judged.band:.3g}), yet {right}: rounding amplified by training (a tiny gradient whose sign two correct "
        "backward passes disagree on becomes a whole optimiser step), not a fault"
    )
    return TrainingParity("drift", reason, **common)


def _golden_diverged(curve: tuple[StepFigures, ...]) -> str:
    """Why the float64 run leaves nothing to judge against: its first figure that is not finite."""
    found = next(
        ((number, figure, value) for number, step in enumerate(curve, 1) for figure in FIGURES[:3]
         if not math.isfinite(value := getattr(step, figure)[0])),
        None,
    )  # fmt: skip
    if found is None:
        return "the float64 run itself diverged (a figure not finite)"
    number, figure, value = found
    return (
        f"the float64 run itself diverged: its {_SAID[figure]} is non-finite ({value}) at step {number}, "
        "so there is no float64 trajectory to judge the reference and the target against"
    )


def _optimizer(name: str, lr: float) -> Any:
    import torch

    kind = torch.optim.AdamW if name == "adamw" else torch.optim.SGD
    # foreach=False: one kernel per parameter on every device, the same arithmetic in all three runs
    return lambda params: kind(params, lr=lr, foreach=False)


class TrainingCheck(Check):
    """The target's training against the reference's (see the module docstring)."""

    name = "training"
    title = "training parity"
    value_type = TrainingParity
    phase = "training check"
    on_request = True
    options: ClassVar[Mapping[str, Option]] = {
        "steps": Option(int, 10, minimum=1, help="optimiser steps in each run"),
        "optimizer": Option(str, "adamw", help="adamw or sgd"),
        "lr": Option(float, 1e-3, help="learning rate"),
    }

    def validate(self, options: dict[str, Any], text: str) -> None:
        if options["optimizer"] not in OPTIMIZERS:
            raise SpecError(f"unknown optimizer {options['optimizer']!r} in {text!r}", hint="use adamw or sgd")
        if not options["lr"] > 0:
            raise SpecError(f"lr must be positive in {text!r}", hint="e.g. training?lr=1e-3")

    def not_applicable(self, target: Any, is_reference: bool) -> str | None:
        from bakeoff.target.engines import engine_for

        if is_reference:
            return "the reference is what the target's training is compared with"
        if target.backend is not None and engine_for(target.backend).inference_only:
            return f"the {target.backend} engine is inference only"
        return None

    def run(self, context: CheckContext) -> TrainingParity:
        started = time.perf_counter()
        options = context.options
        facts = {"steps": options["steps"], "optimizer": options["optimizer"], "lr": options["lr"]}
        from bakeoff.workload.registry import build_workload

        reference = build_workload(context.job.workload_spec)
        recipe = reference.training_recipe()
        facts |= {"loss_kind": recipe.kind, "loss": recipe.described}
        if reference.fingerprint != context.job.fingerprint:
            why = f"the workload built again differs (fingerprint {reference.fingerprint} != {context.job.fingerprint})"
            return TrainingParity("not_comparable", why, **facts)
        if not any(p.is_floating_point() for p in reference.model.parameters()):
            return TrainingParity("not_comparable", "the model has no floating-point parameters to train", **facts)
        try:
            stochastic = stochastic_reason(reference.model, recipe, reference.seed)
        except Exception as exc:
            why = f"the reference cannot train eagerly on the CPU: {type(exc).__name__}: {str(exc)[:200]}"
            return TrainingParity("not_comparable", why, **facts)
        if stochastic is not None:
            return TrainingParity("not_comparable", stochastic, **facts)
        return self._train(context, reference, recipe, facts, started)

    def _train(
        self, context: CheckContext, reference: Any, recipe: Any, facts: dict[str, Any], started: float
    ) -> TrainingParity:
        import torch

        from bakeoff.target.execute import prepare
        from bakeoff.workload.registry import build_workload

        target, dtype = context.target, context.dtype
        band = getattr(target, "amp", None) or dtype  # a mixed-precision target is judged in its autocast dtype
        built = build_workload(context.job.workload_spec, device=target.torch_device)
        built.model.train()
        prepared = prepare(built, target)
        try:
            params = [(n, p) for n, p in built.model.named_parameters() if p.is_floating_point()]
            device = params[0][1].device if built.self_placed else torch.device(target.torch_device)
            lockstep = Lockstep.build(
                reference.model,
                dtype,
                prepared.model,
                params,
                target.dtype,
                device,
                _optimizer(facts["optimizer"], facts["lr"]),
                amp=getattr(target, "amp", None),
            )
            curve = []
            try:
                for number in range(1, facts["steps"] + 1):
                    curve.append(lockstep.step(recipe, number, reference.seed, band))
            except TrainingFailed as exc:
                seconds = {**lockstep.seconds, "total": time.perf_counter() - started}
                if exc.run != "target":
                    why = f"the {exc.run} run failed at step {exc.step}: {exc}"
                    return TrainingParity("not_comparable", why, seconds=seconds, **facts)
                why = f"training raised on the target at step {exc.step}: {exc}"
                return TrainingParity("error", why, curve=tuple(curve), seconds=seconds, **facts)
            seconds = {**lockstep.seconds, "total": time.perf_counter() - started}
            return judge(tuple(curve), lockstep.step1, band, tuple(lockstep.local), seconds=seconds, **facts)
        finally:
            prepared.close()

    def on_error(self, why: str) -> TrainingParity | None:
        return None

    def metrics(self, value: TrainingParity | None) -> list[Metric]:
        return [] if value is None else [Metric("training", value.verdict, "verdict", RANK)]

    def misses(self, value: TrainingParity) -> tuple[list[str], list[str]]:
        if value.verdict == "fail":
            return [value.summary], []
        if value.verdict == "error":
            return [f"training error: {clip(value.reason, 160)}"], []
        if value.verdict == "not_comparable":
            return [], [f"training not comparable: {clip(value.reason, 160)}"]
        return [], []

    def figures(self, results: Any) -> list[tuple[str, dict[str, Any]]]:
        """The loss curves (float64, reference, each target), and each target's weight error
        against float64 per step beside the reference's own and the band."""
        import html

        # plotly renders tags in names: a target's spec is shown as text
        trained = [
            (html.escape(r.target.spec, quote=False), r.checks["training"])
            for r in results
            if r.checks.get("training") is not None
        ]
        trained = [(label, v) for label, v in trained if v.curve]
        if not trained:
            return []
        steps = list(range(1, max(len(v.curve) for _, v in trained) + 1))
        first = trained[0][1]
        lines = [
            {"type": "scatter", "mode": "lines", "name": "float64", "x": steps, "y": [s.loss[0] for s in first.curve]},
            {"type": "scatter", "mode": "lines", "name": f"reference ({first.dtype})", "x": steps,
             "y": [s.loss[1] for s in first.curve]},
        ]  # fmt: skip
        lines += [
            {"type": "scatter", "mode": "lines+markers", "name": label, "x": steps, "y": [s.loss[2] for s in v.curve]}
            for label, v in trained
        ]
        errors = []
        for label, v in trained:
            m, eps, grown = v.multiple, v.floor, 0.0
            band = []
            for s in v.curve:
                grown = max(grown, s.weights[0])
                band.append(m * grown + eps)
            errors += [
                {"type": "scatter", "mode": "lines+markers", "name": f"{label}", "x": steps,
                 "y": [s.weights[1] for s in v.curve]},
                {"type": "scatter", "mode": "lines", "name": f"reference for {label}", "x": steps,
                 "y": [s.weights[0] for s in v.curve], "line": {"dash": "dot"}},
                {"type": "scatter", "mode": "lines", "name": f"band for {label}", "x": steps, "y": band,
                 "line": {"dash": "dash", "color": "#c62828"}},
            ]  # fmt: skip
        layout = {"height": 320, "showlegend": True, "margin": {"l": 60, "r": 20, "t": 40, "b": 60}}
        return [
            (
                f"Training loss per step ({first.loss}): the float64 run, the reference and each target",
                {"data": lines, "layout": {**layout, "title": {"text": "training loss"}, "xaxis": {"title": "step"}}},
            ),
            (
                "Weights' distance from the float64 run after each step (relative): each target, the reference's own, "
                "and the band it must stay under (m x the reference's own, grown, + 2 ulp)",
                {
                    "data": errors,
                    "layout": {**layout, "title": {"text": "weight error vs float64"}, "yaxis": {"type": "log"},
                               "xaxis": {"title": "step"}},
                },
            ),
        ]  # fmt: skip

    def notes(self, value: TrainingParity) -> list[str]:
        if value.loss_kind == "synthetic" and value.verdict in ("pass", "drift"):
            return [f"training parity used a synthetic loss ({value.loss}); give the workload its own loss"]
        return []

    def facts(self, value: TrainingParity, result: Any) -> list[str]:
        what = f"{value.steps} {value.optimizer} steps, lr {value.lr:g}, {value.loss}"
        lines = [f"training {value.verdict}: {clip(value.reason, 400)} ({what})"]
        if value.seconds:
            lines.append(
                "training check took {:.2f} s (target steps {:.2f} s, reference {:.2f} s, float64 {:.2f} s)".format(
                    value.seconds.get("total", 0.0),
                    value.seconds.get("target", 0.0),
                    value.seconds.get("reference", 0.0),
                    value.seconds.get("golden", 0.0),
                )
            )
        return lines

    def headline(self, value: TrainingParity, result: Any) -> list[str]:
        if value.verdict in ("pass", "drift"):
            return [f"{value.summary} ({value.loss_kind} loss)"]
        if value.verdict == "fail":
            return [
                value.summary
                + (
                    f"; step-1 gradients off in {value.gradients_failed} of {value.gradients_total} parameters"
                    if value.gradients_failed
                    else ""
                )
            ]
        return [f"training {value.verdict}: {clip(value.reason, 300)}"]

    def details(self, value: TrainingParity, result: Any) -> list[str]:
        lines = self.facts(value, result)
        if value.curve:
            last = value.curve[-1]
            for figure in FIGURES:
                reference_err, target_err = last.errors(figure)
                lines.append(
                    f"step {len(value.curve)} {_SAID[figure]}: target error {target_err:.3g}, "
                    f"reference {reference_err:.3g} (relative to float64)"
                )
        if value.gradients:
            lines.append(
                f"step-1 gradient error by parameter, worst {len(value.gradients)} of {value.gradients_total} "
                f"(relative RMS against float64; target vs reference):"
            )
            lines += [
                f"  {g.name}: {g.target_err:.3g} vs {g.reference_err:.3g}{'' if g.passed else '  OFF'}"
                for g in value.gradients
            ]
        return lines
