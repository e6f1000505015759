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
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from bakeoff.analysis.localize import CallJudgement, TensorFigures, find_origins, judge_tensor
from bakeoff.checks.base import Check, CheckContext, Metric
from bakeoff.checks.localize_runs import RecordedCall, flat_tensors, record_calls, replay
from bakeoff.codec import Value
from bakeoff.errors import SpecError
from bakeoff.specsyntax import Option
from bakeoff.target.execute import move_tensors

__all__ = ["Localization", "LocalizationCheck", "Origin", "kept_with"]

#: Calls kept in the stored summary (the chart of error by depth uses them all first).
KEPT_CALLS = 500
#: Above this many parameters, tensors are recorded as samples unless ``sample=0``.
SAMPLE_ABOVE = 20_000_000
#: Elements kept per tensor when sampling.
SAMPLE_SIZE = 4096


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


@dataclass(frozen=True)
class Origin:
    """A module call where the divergence starts: its qualified name, class, call index and
    depth; its output's error (``target_err`` and ``reference_err``, RMS relative to the
    golden's RMS) and ``ratio`` to the allowed error (``tolerance`` = m); how many failing calls
    came after it (``downstream``); ``replay`` its confirmation: ``confirmed`` (alone on the
    reference's inputs it is still wrong), ``accumulated`` (alone it is right), ``walked_up``
    (its parent, replayed, is wrong: the parent is named in ``walked_to``). Inside a confirmed
    origin of an eager target the module's ops are compared one by one: ``op_suspect`` names the
    first op whose output breaks the three-way rule, when the target ran the same op sequence as
    the reference; ``ops`` says what was found (or the two op lists where they differ)."""

    module: str
    cls: str
    call: int
    depth: int
    target_err: float
    reference_err: float
    ratio: float
    tolerance: float
    downstream: int = 0
    replay: str = ""
    walked_to: str = ""
    op_suspect: str = ""
    ops: str = ""


@dataclass(frozen=True)
class CallSummary:
    """One compared module call: name, call index, depth, worst output error ratio, failed."""

    module: str
    call: int
    depth: int
    ratio: float
    failed: bool


@dataclass(frozen=True)
class Localization(Value):
    """Where the target's divergence starts (see the module docstring).

    ``verdict``: ``localized`` (origins found), ``not_found`` (no module call diverged: the
    reason says what that leaves), ``not_comparable`` (the runs could not be compared).
    ``rung`` names the ladder's rung that failed first for a compiled target: ``device kernels``,
    ``decomposition`` or ``backend compiler``.

    Each localisation is a record of its own, dated ``at`` (UTC, ISO 8601; empty when stored
    by a bakeoff that did not date them): a later one never replaces an earlier, which stays in
    ``earlier`` (latest first, each without earlier records of its own). A rerun that times out
    or no longer finds the fault is the latest record, and the origin found before is still
    there (see :func:`kept_with`).
    """

    verdict: str
    method: str = ""
    reason: str = ""
    rung: str = ""
    origins: tuple[Origin, ...] = ()
    calls_compared: int = 0
    calls_failed: int = 0
    calls: tuple[CallSummary, ...] = ()
    seconds: float = 0.0
    at: str = ""
    earlier: tuple[Localization, ...] = ()

    @property
    def first(self) -> Origin | None:
        return self.origins[0] if self.origins else None


def kept_with(latest: Localization, stored: Localization | None, stored_at: str = "") -> Localization:
    """``latest`` with the ``stored`` value and its earlier records behind it (latest first);
    ``stored_at`` dates a stored record that has no date of its own."""
    if stored is None:
        return latest
    from dataclasses import replace

    before = replace(stored, earlier=(), at=stored.at or stored_at)
    return replace(latest, earlier=(before, *stored.earlier, *latest.earlier))


def _summary(value: Localization) -> str:
    first = value.first
    if value.verdict == "localized" and first is not None:
        return f"localized, diverges first in {first.module} ({first.cls}, call {first.call})"
    return f"{value.verdict}: {value.reason or 'no module call diverged'}"


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


def _judge_values(
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


def _judge_calls(
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
        inputs_pass = _judge_values(*inputs, "in", dtype)[0]
        output_pass, ratio, figures = _judge_values(tgt.output, ref.output, call.output, "out", dtype, rule)
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


def _relative(figures: Any) -> tuple[float, float]:
    if figures is None or figures.discrete:
        return (figures.differing if figures else 0.0), 0.0
    scale = figures.scale or 1.0
    return figures.target_err / scale, figures.reference_err / scale


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
        run = _Run(_Plan(sample, full, Tolerances(options.get("tolerances", ""))))

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
            f"the reference's {first.reference_err:.3g} ({first.ratio:.3g}x the allowed {first.tolerance:g}x); "
            f"{said}" + (f"; {first.downstream} later calls diverged with it" if value.calls else "")
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


class _Run:
    """One localisation's recording plan and the steps that use it: a check instance is shared
    by every target and run, so nothing of one run is kept on it."""

    def __init__(self, plan: _Plan) -> None:
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
            judged, worst = _judge_calls(golden, reference, recorded, context.dtype, self.plan.tolerances)
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
            return not _judge_values(out, ref_call.output, gold_call.output, "out", context.dtype, rule)[0]

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
            passed, ratio, figures = _judge_values(out, ref_call.output, gold_call.output, "out", dtype, rule)
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

    # -- what it says --------------------------------------------------------------------------


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
        passed, ratio, figures = _judge_values(tgt, ref, gold, "out", context.dtype)
        if not passed:
            target_err, reference_err = _relative(figures)
            return (
                f"aten.{op} (op {index + 1} of {len(golden)})",
                f"first wrong op: aten.{op}, op {index + 1} of {len(golden)}: error {target_err:.3g} vs the "
                f"reference's {reference_err:.3g} ({ratio:.3g}x the allowed); the ops before it agree",
            )
    return "", f"all {len(golden)} ops agree one by one: the error comes from how they combine"


@dataclass
class _Plan:
    """How one localisation records: ``sample`` elements per tensor (0: whole), the modules
    kept whole anyway (``full`` globs), and the user's per-module tolerances."""

    sample: int
    full: tuple[str, ...]
    tolerances: Tolerances

    def keeper(self, whole: Any = frozenset()) -> Any:
        from fnmatch import fnmatchcase

        return lambda name, cls: name in whole or any(fnmatchcase(name, g) or fnmatchcase(cls, g) for g in self.full)


def _globs(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _multiple(dtype: str) -> float:
    from bakeoff.analysis.trajectory import multiple_for

    return multiple_for(dtype)


def _summaries(judged: list[CallJudgement], golden: list[RecordedCall]) -> tuple[CallSummary, ...]:
    depth = {c.key: c.depth for c in golden}
    return tuple(
        CallSummary(j.key[0], j.key[1], depth.get(j.key, 0), j.ratio, not j.output_pass) for j in judged[:KEPT_CALLS]
    )
