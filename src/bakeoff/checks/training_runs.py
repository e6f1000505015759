"""The three training runs of the training parity check, taken in lockstep.

A float64 *golden* and the *reference* (eager CPU in the target's dtype) are deep copies of one
freshly built workload; the *target* is built again for the target and prepared as its timing
was (moved, cast, compiled). All three start from the same weights (the workload is seeded;
its fingerprint is checked), see the same batches (drawn per step on the CPU) and step one
after another, so that after each step their parameters can be compared without keeping
copies of every step.

Each step is also judged *locally* (:class:`~bakeoff.analysis.trajectory.LocalFigures`): two
more copies, in float64 and in the reference dtype, are loaded with the target's weights before
the step and take the same step on the same batch, and a float64 and a reference-dtype
optimiser, loaded with the target's optimiser state, step on the *target's* gradients. That
judges each step's forward pass, backward pass and optimiser step on their own inputs: a fault
shows at the step it happens, and the rounding that training amplifies from step to step (a
tiny gradient whose sign two correct backward passes disagree on becomes a full AdamW step)
never looks like one.

A mixed-precision target (``amp``) trains under ``torch.autocast`` on its device; the reference
then runs under CPU autocast in the same dtype, and the golden with autocast explicitly off (a
``cpu?amp=bf16`` session has CPU autocast on around the whole check). Each run's forward pass
and loss are under its autocast, its backward pass and optimiser step outside it (PyTorch's
recipe: autocast state applies to the backward ops run on the thread, so it must be the same
for the reference and the target).
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from bakeoff.analysis.trajectory import LocalFigures, StepFigures
from bakeoff.target.execute import move_tensors

__all__ = ["GradientError", "Lockstep", "TrainingFailed", "stochastic_reason"]


class TrainingFailed(Exception):
    """A run raised during training; ``run`` names which (golden, reference or target)."""

    def __init__(self, run: str, step: int, exc: BaseException) -> None:
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        super().__init__(f"{type(exc).__name__}: {first}")
        self.run, self.step = run, step


@dataclass(frozen=True)
class GradientError:
    """One parameter's gradient at step 1 against the golden's: RMS errors relative to the
    golden gradient's RMS; ``passed`` by the three-way rule
    (:func:`~bakeoff.analysis.trajectory.within_three_way`)."""

    name: str
    target_err: float
    reference_err: float
    passed: bool


@dataclass
class _Run:
    """One of the three runs. ``autocast``, if given, makes the run's autocast context: called
    with True around the forward pass and loss, with False around the backward pass and the
    optimiser step. None: the runs leave autocast as it is (no mixed precision)."""

    name: str
    call: Callable[..., Any]
    params: list[tuple[str, Any]]
    dtype: Any  # floating inputs are cast to it (None: as they come)
    device: Any  # inputs are moved to it (None: where they are)
    optimizer: Any = None
    before: list[Any] = field(default_factory=list)
    autocast: Callable[[bool], Any] | None = None

    def _autocast(self, on: bool) -> Any:
        return self.autocast(on) if self.autocast is not None else contextlib.nullcontext()

    def step(
        self, recipe: Any, batch: tuple[tuple, dict], number: int, seed: int, step: bool = True
    ) -> tuple[float, list[Any], float]:
        """One optimiser step: ``(loss, gradients on the host, update norm)``; with ``step``
        False, the forward and backward pass only (update norm 0)."""
        import torch

        try:
            args, kwargs = move_tensors(batch, self.device, self.dtype)
            self.optimizer.zero_grad(set_to_none=True)
            torch.manual_seed(seed + number)
            with torch.enable_grad():
                with self._autocast(True):
                    output = self.call(*args, **kwargs)
                    loss = recipe.loss(output, args, kwargs)
                with self._autocast(False):
                    loss.backward()
            zero = torch.zeros((), dtype=torch.float64)
            grads = [zero if p.grad is None else p.grad.detach().to("cpu", torch.float64) for _, p in self.params]
            if not step:
                return float(loss.detach().to("cpu", torch.float64)), grads, 0.0
            before = list(self.weights(copy=True))
            with self._autocast(False):
                self.optimizer.step()
            update = _norm([after - b for after, b in zip(self.weights(), before, strict=True)])
            return float(loss.detach().to("cpu", torch.float64)), grads, update
        except Exception as exc:
            raise TrainingFailed(self.name, number, exc) from exc

    def weights(self, copy: bool = False) -> Iterator[Any]:
        """The parameters on the host in float64 (``copy``: never the parameter itself, which
        the optimiser changes in place)."""
        import torch

        for _, p in self.params:
            yield p.detach().to("cpu", torch.float64, copy=copy)


def _errors(golden: list[Any], reference: list[Any], target: list[Any]) -> tuple[float, float, float]:
    """``(reference error, target error, scale)``: RMS over all elements of the tensor lists."""
    count = sum(g.numel() for g in golden) or 1

    def rms(pairs: Any) -> float:
        return math.sqrt(sum(float((a - b).pow(2).sum()) for a, b in pairs) / count)

    scale = math.sqrt(sum(float(g.pow(2).sum()) for g in golden) / count)
    return rms(zip(reference, golden, strict=True)), rms(zip(target, golden, strict=True)), scale


def _state(optimizer: Any, params: list[Any]) -> dict[str, list[Any]]:
    """The optimiser's floating state after a step, by kind (``exp_avg``, ``step``...), on the host."""
    import torch

    kinds: dict[str, list[Any]] = {}
    for p in params:
        for key, value in optimizer.state.get(p, {}).items():
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                kinds.setdefault(key, []).append(value.detach().to("cpu", torch.float64).reshape(-1))
    return kinds


def _norm(tensors: list[Any]) -> float:
    return math.sqrt(sum(float(t.pow(2).sum()) for t in tensors))


def _rms(t: Any) -> float:
    return float(t.pow(2).mean().sqrt()) if t.numel() else 0.0


def _identical(a: Any, b: Any) -> bool:
    """Equal element by element, NaN equal to NaN (``torch.equal`` says a NaN differs from itself)."""
    import torch

    return a.shape == b.shape and bool(torch.all((a == b) | (torch.isnan(a) & torch.isnan(b))))


def stochastic_reason(model: Any, recipe: Any, seed: int) -> str | None:
    """Why the training is not comparable across runs, or None: one step of a copy of ``model``
    under two seeds. Different losses or gradients mean it draws random numbers (dropout, say):
    a float64 golden and another device cannot share those draws. NaN under both seeds at the
    same places is no difference (the training diverges; the float64 run shows it)."""
    import torch

    results = []
    for offset in (0, 1):
        twin = copy.deepcopy(model).train()
        args, kwargs = recipe.batch(0)  # it may seed torch itself: the seed under test comes after
        torch.manual_seed(seed + 104_729 * (offset + 1))
        with torch.enable_grad():
            loss = recipe.loss(twin(*args, **kwargs), args, kwargs)
            loss.backward()
        grads = [p.grad.detach().clone() for p in twin.parameters() if p.grad is not None]
        results.append((float(loss.detach()), grads))
    (loss_a, grads_a), (loss_b, grads_b) = results
    same_loss = loss_a == loss_b or (math.isnan(loss_a) and math.isnan(loss_b))
    if same_loss and all(_identical(a, b) for a, b in zip(grads_a, grads_b, strict=True)):
        return None  # NaN where the other seed has NaN too is the same result: a diverging run, not a random one
    dropouts = sorted(
        {type(m).__name__ for m in model.modules() if "Dropout" in type(m).__name__ and getattr(m, "p", 0)}
    )
    said = f" ({', '.join(dropouts)} with p > 0)" if dropouts else ""
    return (
        f"training draws random numbers{said}: one step under two seeds gave losses {loss_a:.6g} and {loss_b:.6g}, "
        "and neither a float64 run nor another device can share those draws; set the dropout probabilities to 0 "
        "to compare training"
    )


class Lockstep:
    """The golden, reference and target runs, stepping together (see the module docstring)."""

    def __init__(
        self, golden: _Run, reference: _Run, target: _Run, anchors: tuple[_Run, _Run], optimizer: Any = None
    ) -> None:
        self.runs = (golden, reference, target)
        self.anchors = anchors  # float64 and reference-dtype copies, loaded with the target's weights each step
        self.optimizer = optimizer
        self.seconds = {run.name: 0.0 for run in self.runs} | {"local": 0.0}
        self.step1: tuple[GradientError, ...] = ()
        self.local: list[LocalFigures] = []

    @classmethod
    def build(
        cls,
        reference_model: Any,
        dtype: str,
        target_call: Callable[..., Any],
        target_params: list[tuple[str, Any]],
        target_dtype: str | None,
        target_device: Any,
        optimizer: Callable[[list[Any]], Any],
        amp: str | None = None,
    ) -> Lockstep:
        """``reference_model`` is a fresh CPU copy of the workload (deep-copied twice here); the
        target's call and parameters are the prepared target's. ``dtype`` is the reference's
        dtype; ``amp`` the target's autocast dtype, if it has one (see the module docstring)."""
        import torch

        contexts: dict[str, Callable[[bool], Any] | None] = {"golden": None, "reference": None, "target": None}
        if amp is not None:
            fast, device_type = getattr(torch, amp), torch.device(target_device).type
            contexts = {
                "golden": lambda on: torch.autocast("cpu", enabled=False),
                "reference": lambda on: torch.autocast("cpu", dtype=fast, enabled=on, cache_enabled=False),
                "target": lambda on: torch.autocast(device_type, dtype=fast, enabled=on, cache_enabled=False),
            }
        runs, anchors = [], []
        for name, cast in (("golden", torch.float64), ("reference", getattr(torch, dtype))):
            for into in (runs, anchors):
                model = copy.deepcopy(reference_model).to(cast).train()
                params = [(n, p) for n, p in model.named_parameters() if p.is_floating_point()]
                for _, p in params:
                    p.requires_grad_(True)
                into.append(_Run(name, model, params, cast, None, autocast=contexts[name]))
        for _, p in target_params:
            p.requires_grad_(True)
        cast = getattr(torch, target_dtype) if target_dtype else None
        runs.append(_Run("target", target_call, target_params, cast, target_device, autocast=contexts["target"]))
        for run in runs:
            run.optimizer = optimizer([p for _, p in run.params])
        golden, reference, target = runs
        names = [[n for n, _ in run.params] for run in runs]
        if names[0] != names[2]:
            missing = sorted(set(names[0]) ^ set(names[2]))[:3]
            raise ValueError(f"the target's parameters are not the reference's ({', '.join(missing)})")
        return cls(golden, reference, target, (anchors[0], anchors[1]), optimizer)

    def step(self, recipe: Any, number: int, seed: int, dtype: str) -> StepFigures:
        """One step of every run (step 1 also records each parameter's gradient error)."""
        from bakeoff.analysis.trajectory import within_three_way

        batch = recipe.batch(number - 1)
        target = self.runs[2]
        weights = list(target.weights(copy=True))
        state = copy.deepcopy(target.optimizer.state_dict())
        figures = []
        for run in self.runs:
            start = time.perf_counter()
            figures.append(run.step(recipe, batch, number, seed))
            self.seconds[run.name] += time.perf_counter() - start
        (g_loss, g_grads, g_update), (r_loss, r_grads, r_update), (t_loss, t_grads, t_update) = figures
        start = time.perf_counter()
        self.local.append(self._local(recipe, batch, number, seed, weights, state, t_loss, t_grads))
        self.seconds["local"] += time.perf_counter() - start
        if number == 1:
            names = [n for n, _ in self.runs[0].params]
            errors = []
            for name, g, r, t in zip(names, g_grads, r_grads, t_grads, strict=True):
                scale = _rms(g)
                rel = scale if scale > 0 else 1.0
                target_err, reference_err = _rms(t - g), _rms(r - g)
                passed = math.isfinite(target_err) and within_three_way(target_err, reference_err, scale, dtype)
                errors.append(GradientError(name, target_err / rel, reference_err / rel, passed))
            self.step1 = tuple(errors)
        golden, reference, target = (list(run.weights()) for run in self.runs)
        scale = _norm(golden) or 1.0

        def distance(a: list[Any], b: list[Any]) -> float:
            return _norm([x - y for x, y in zip(a, b, strict=True)]) / scale

        return StepFigures(
            loss=(g_loss, r_loss, t_loss),
            grad_norm=(_norm(g_grads), _norm(r_grads), _norm(t_grads)),
            update_norm=(g_update, r_update, t_update),
            weights=(distance(reference, golden), distance(target, golden), distance(target, reference)),
        )

    def _local(
        self,
        recipe: Any,
        batch: tuple[tuple, dict],
        number: int,
        seed: int,
        weights: list[Any],
        state: dict[str, Any],
        t_loss: float,
        t_grads: list[Any],
    ) -> LocalFigures:
        """This step from the target's own weights and optimiser state (see the module docstring)."""
        import torch

        target = self.runs[2]
        losses, grads, updates, states = [], [], [], []
        for anchor in self.anchors:
            with torch.no_grad():
                for (_, p), w in zip(anchor.params, weights, strict=True):
                    p.copy_(w.to(p.dtype))
            anchor.optimizer = self.optimizer([p for _, p in anchor.params])
            loss, anchor_grads, _ = anchor.step(recipe, batch, number, seed, step=False)
            losses.append(loss)
            grads.append(anchor_grads)
            # the optimiser alone: fed the target's gradients, from the target's state
            for (_, p), g in zip(anchor.params, t_grads, strict=True):
                p.grad = g.to(p.dtype).reshape(p.shape) if g.dim() else None
            anchor.optimizer.load_state_dict(state)
            with anchor._autocast(False):
                anchor.optimizer.step()
            updates.append([after - w for after, w in zip(anchor.weights(), weights, strict=True)])
            states.append(_state(anchor.optimizer, [p for _, p in anchor.params]))
        t_update = [after - w for after, w in zip(target.weights(), weights, strict=True)]
        t_state = _state(target.optimizer, [p for _, p in target.params])
        worst_state, worst_ratio = (0.0, 0.0, 0.0), -1.0
        for kind, golden_state in states[0].items():
            figures = _errors(golden_state, states[1].get(kind, golden_state), t_state.get(kind, []) or golden_state)
            if kind not in t_state:
                figures = (figures[0], math.inf, figures[2])
            ratio = figures[1] / (2 * figures[0] + 2.4e-7 * figures[2] + 1e-300)  # the worst kind, roughly
            if ratio > worst_ratio:
                worst_state, worst_ratio = figures, ratio
        return LocalFigures(
            loss=(losses[0], losses[1], t_loss),
            grads=_errors(grads[0], grads[1], t_grads),
            update=_errors(updates[0], updates[1], t_update),
            state=worst_state,
        )
