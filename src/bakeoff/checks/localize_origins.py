"""How a localisation finds and confirms the origins: the hooks method and the ladder.

:class:`Run` holds one localisation's recording :class:`Plan` and its steps: ``hooks`` (an
eager target's module calls recorded and judged against the reference's and the golden's),
``ladder`` (a compiled target: eager on its device, then each rung of compilation, descended
module by module), the replay that confirms each origin, and inside a confirmed origin the
op-by-op comparison. :class:`Calls` gives a run's recorded calls by key, re-running a sampled
run for a module's whole tensors. What the check does with them is
:mod:`bakeoff.checks.localization`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from bakeoff.analysis.localize import CallJudgement, find_origins
from bakeoff.checks.base import CheckContext
from bakeoff.checks.localize_judge import Tolerances, judge_calls, judge_values
from bakeoff.checks.localize_runs import RecordedCall, record_calls, replay
from bakeoff.checks.localize_values import CallSummary, Localization, Origin

__all__ = ["Calls", "Plan", "Run"]

#: Calls kept in the stored summary (the chart of error by depth uses them all first).
KEPT_CALLS = 500


class Calls:
    """One run's recorded calls by key. When the run was sampled, asking for a call re-runs the
    model once with that module's tensors kept whole (replay and op comparison need them)."""

    def __init__(self, calls: list[RecordedCall], rerun: Any = None) -> None:
        self.recorded = {c.key: c for c in calls}
        self.rerun, self.whole = rerun, {}

    def __contains__(self, key: tuple[str, int]) -> bool:
        return key in self.recorded

    def __getitem__(self, key: tuple[str, int]) -> RecordedCall:
        if self.rerun is None:
            return self.recorded[key]
        if key not in self.whole:
            self.whole.update({c.key: c for c in self.rerun({key[0]}) if c.name == key[0]})
        return self.whole[key]


def _relative(figures: Any) -> tuple[float, float]:
    if figures is None or figures.discrete:
        return (figures.differing if figures else 0.0), 0.0
    scale = figures.scale or 1.0
    return figures.target_err / scale, figures.reference_err / scale


class Run:
    """One localisation's recording plan and the steps that use it: a check instance is shared
    by every target and run, so nothing of one run is kept on it."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def _eager_target(self, context: CheckContext, eager: Any) -> tuple[Any, list[RecordedCall], Any]:
        """The workload prepared eagerly on the target's device, and its recorded calls."""
        import torch

        from bakeoff.target.execute import prepare
        from bakeoff.workload.registry import build_workload

        built = build_workload(context.job.workload_spec, device=eager.torch_device)
        prepared = prepare(built, eager)
        with torch.no_grad():
            calls = record_calls(prepared.model, prepared, self.plan.sample, self.plan.keeper())
        return prepared, calls, prepared.model

    def hooks(
        self,
        context: CheckContext,
        golden: list[RecordedCall],
        reference: list[RecordedCall],
        gold_by: Calls,
        ref_by: Calls,
        method: str,
        rung: str,
    ) -> Localization:
        from dataclasses import replace

        target = context.target
        eager = replace(target, backend=None, dynamic=None, mode=None, fullgraph=False, precision=None)
        prepared, recorded, model = self._eager_target(context, eager)
        try:
            judged, worst = judge_calls(golden, reference, recorded, context.dtype, self.plan.tolerances)
            origins = find_origins(judged)
            if not origins:
                return Localization(
                    "not_found", method, "", rung, (), len(judged), 0, _summaries(judged, golden)
                )  # the caller reads this as "the device's eager kernels agree"
            found = []
            for origin, downstream in origins:
                found.append(self._confirm(context, model, origin, downstream, worst, ref_by, gold_by, None))
            failed = sum(not c.output_pass for c in judged)
            reason = f"{len(found)} origin(s) among {len(judged)} module calls; {failed} calls diverged"
            return Localization(
                "localized", method, reason, rung, tuple(found), len(judged), failed,
                _summaries(judged, golden),
            )  # fmt: skip
        finally:
            prepared.close()

    def _confirm(
        self,
        context: CheckContext,
        model: Any,
        origin: CallJudgement,
        downstream: int,
        worst: dict,
        ref_by: dict,
        gold_by: dict,
        compiled_as: Any,
    ) -> Origin:
        """The origin replayed alone on the reference's inputs; if it is right alone, its parent."""
        import torch

        name, index = origin.key
        call = gold_by[origin.key]
        target_err, reference_err = _relative(worst.get(origin.key))
        common = {
            "module": name or type(model).__name__,
            "cls": call.cls,
            "call": index,
            "depth": call.depth,
            "target_err": target_err,
            "reference_err": reference_err,
            "ratio": origin.ratio,
            "tolerance": _multiple(context.dtype),
            "downstream": downstream,
        }
        device = torch.device(context.target.torch_device)
        cast = getattr(torch, context.dtype)

        def wrong_alone(key: tuple[str, int]) -> bool:
            ref_call, gold_call = ref_by[key], gold_by[key]
            out = replay(model.get_submodule(key[0]), ref_call, cast, device, compiled_as)
            rule = self.plan.tolerances.rule(gold_call.name, gold_call.cls)
            return not judge_values(out, ref_call.output, gold_call.output, "out", context.dtype, rule)[0]

        if wrong_alone(origin.key):
            if compiled_as is not None:
                return Origin(**common, replay="confirmed", ops="not compared inside a compiled module")
            suspect, said = _op_suspect(model.get_submodule(name), ref_by[origin.key], gold_by[origin.key], context)
            return Origin(**common, replay="confirmed", op_suspect=suspect, ops=said)
        parent = origin.parent
        if parent is not None and parent in ref_by and wrong_alone(parent):
            return Origin(**common, replay="walked_up", walked_to=parent[0] or "the root")
        return Origin(**common, replay="accumulated")

    def ladder(self, context: CheckContext, golden: list[RecordedCall], gold_by: Calls, ref_by: Calls) -> Localization:
        """A compiled target: eager on its device, then aot_eager, then its engine (see the docstring)."""
        from dataclasses import replace

        import torch

        from bakeoff.workload.registry import build_workload

        target = context.target
        if target.device != "cpu":  # eager on the CPU is the reference itself
            reference = list(ref_by.recorded.values())
            method = "ladder: hooks, eager on the device"
            eager = self.hooks(context, golden, reference, gold_by, ref_by, method, "device kernels")
            if eager.verdict == "localized":
                return eager
        built = build_workload(context.job.workload_spec, device=target.torch_device)
        model = built.model.to(torch.device(target.torch_device)) if not built.self_placed else built.model
        model = model.to(getattr(torch, context.dtype)).eval()
        root = golden[-1].key  # the root call completes last
        device, cast = torch.device(target.torch_device), getattr(torch, context.dtype)
        # each rung compiles as a trial prepares a target (the engine adapter, the target's options):
        # a backend name handed to torch.compile alone misses an engine that is no torch.compile
        # backend (onnxrt, openvino_export) and what an adapter adds (openvino's precision hint)
        decomposition = replace(target, backend="aot_eager", mode=None, precision=None)
        rungs = [("decomposition", decomposition)] if target.backend not in ("aot_eager", "eager") else []
        rungs.append(("backend compiler", target))
        for rung, compiled_as in rungs:
            compare = self._compiled_comparer(model, ref_by, gold_by, cast, device, compiled_as, context.dtype)
            failed, _ratio, _figures = compare(root)
            if failed:
                return self._descend(context, model, golden, root, compare, rung, compiled_as.backend, ref_by, gold_by)
        return Localization(
            "not_found",
            "ladder: each module compiled alone on the reference's inputs",
            "the model compiled alone on the reference's inputs agrees with float64: the divergence needs the "
            "target's own inputs or state, not one module",
        )

    def _compiled_comparer(
        self, model: Any, ref_by: dict, gold_by: dict, cast: Any, device: Any, compiled_as: Any, dtype: str
    ) -> Any:
        def compare(key: tuple[str, int]) -> tuple[bool, float, Any]:
            ref_call, gold_call = ref_by[key], gold_by[key]
            out = replay(model.get_submodule(key[0]), ref_call, cast, device, compiled_as)
            rule = self.plan.tolerances.rule(gold_call.name, gold_call.cls)
            passed, ratio, figures = judge_values(out, ref_call.output, gold_call.output, "out", dtype, rule)
            return not passed, ratio, figures

        return compare

    def _descend(
        self,
        context: CheckContext,
        model: Any,
        golden: list[RecordedCall],
        root: tuple[str, int],
        compare: Any,
        rung: str,
        backend: str,
        ref_by: dict,
        gold_by: dict,
    ) -> Localization:
        """From a failing call, into the first child that fails alone, until none does."""
        children: dict[tuple[str, int], list[tuple[str, int]]] = {}
        for call in golden:
            if call.parent is not None:
                children.setdefault(call.parent, []).append(call.key)
        current, replays, ratio, figures = root, 1, 0.0, None
        _failed, ratio, figures = compare(root)
        while True:
            failing = None
            for child in children.get(current, []):
                replays += 1
                failed, child_ratio, child_figures = compare(child)
                if failed:
                    failing, ratio, figures = child, child_ratio, child_figures
                    break
            if failing is None:
                break
            current = failing
        call = gold_by[current]
        target_err, reference_err = _relative(figures)
        origin = Origin(
            current[0] or type(model).__name__, call.cls, current[1], call.depth, target_err, reference_err, ratio,
            _multiple(context.dtype), replay="confirmed",
        )  # fmt: skip
        method = f"ladder: each module compiled alone with {backend} on the reference's inputs ({replays} replays)"
        reason = f"{origin.module} ({origin.cls}) is wrong compiled alone with {backend}; none of its submodules is"
        return Localization("localized", method, reason, rung, (origin,), replays, 0)


def _op_suspect(module: Any, ref_call: RecordedCall, gold_call: RecordedCall, context: CheckContext) -> tuple[str, str]:
    """The first op inside ``module`` whose output breaks the three-way rule, and what was found:
    the module run alone, op by op, in float64 on the CPU, in the reference dtype on the CPU and
    on the target, all on the reference's inputs (the golden's for float64)."""
    import torch

    from bakeoff.checks.localize_runs import record_ops

    dtype = getattr(torch, context.dtype)
    golden = record_ops(copy.deepcopy(module).to("cpu", torch.float64), gold_call, torch.float64, torch.device("cpu"))
    reference = record_ops(copy.deepcopy(module).to("cpu", dtype), ref_call, dtype, torch.device("cpu"))
    target = record_ops(module, ref_call, dtype, torch.device(context.target.torch_device))
    names = [[op for op, _ in ops] for ops in (golden, reference, target)]
    if not names[1] == names[2] == names[0]:
        width = max(len(names[1]), len(names[2]))
        pairs = [
            f"{names[1][i] if i < len(names[1]) else '-'} | {names[2][i] if i < len(names[2]) else '-'}"
            for i in range(min(width, 40))
        ]
        return "", "the target ran other ops than the reference (reference | target): " + "; ".join(pairs)
    for index, ((op, gold), (_, ref), (_, tgt)) in enumerate(zip(golden, reference, target, strict=True)):
        passed, ratio, figures = judge_values(tgt, ref, gold, "out", context.dtype)
        if not passed:
            target_err, reference_err = _relative(figures)
            return (
                f"aten.{op} (op {index + 1} of {len(golden)})",
                f"first wrong op: aten.{op}, op {index + 1} of {len(golden)}: error {target_err:.3g} vs the "
                f"reference's {reference_err:.3g} ({ratio:.3g}x the allowed); the ops before it agree",
            )
    return "", f"all {len(golden)} ops agree one by one: the error comes from how they combine"


@dataclass
class Plan:
    """How one localisation records: ``sample`` elements per tensor (0: whole), the modules
    kept whole anyway (``full`` globs), and the user's per-module tolerances."""

    sample: int
    full: tuple[str, ...]
    tolerances: Tolerances

    def keeper(self, whole: Any = frozenset()) -> Any:
        from fnmatch import fnmatchcase

        return lambda name, cls: name in whole or any(fnmatchcase(name, g) or fnmatchcase(cls, g) for g in self.full)


def _multiple(dtype: str) -> float:
    from bakeoff.analysis.trajectory import multiple_for

    return multiple_for(dtype)


def _summaries(judged: list[CallJudgement], golden: list[RecordedCall]) -> tuple[CallSummary, ...]:
    depth = {c.key: c.depth for c in golden}
    return tuple(
        CallSummary(j.key[0], j.key[1], depth.get(j.key, 0), j.ratio, not j.output_pass) for j in judged[:KEPT_CALLS]
    )
