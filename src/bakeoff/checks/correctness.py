"""Does the target compute the same thing as the baseline? Dtype-aware, output by output.

See :mod:`bakeoff.analysis.tolerance` for the rules: the golden rule whenever the baseline has
a float64 golden output (allclose alone is not enough then), the allclose rule only without
one, exact equality for integer outputs. Verdicts:
    pass            every output tensor passes its rule
    fail            an output is missing, has another shape, or fails its rule
    not_comparable  the reference itself cannot be trusted (nondeterministic eager runs, or a
                    workload whose fingerprint differs from the baseline's)
    error           the target produced no output (set by the runner, not here)

This module holds the check: :func:`judge` loads the baseline's references and
:class:`CorrectnessCheck` plugs it into the registry. The comparison itself (the
:class:`Correctness` value, :func:`compare_outputs`) lives in :mod:`bakeoff.checks.comparison`
and is re-exported here.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from bakeoff.analysis.tolerance import tolerance_for
from bakeoff.checks.base import Check, CheckContext, Metric, ScriptContext
from bakeoff.checks.baseline import honest_reference
from bakeoff.checks.comparison import (
    Correctness,
    TensorComparison,
    compare_outputs,
    compare_tensor,
    golden_figures,
    pooled_spreads,
)
from bakeoff.checks.outputs import identical, max_abs_difference
from bakeoff.units import clip

__all__ = [
    "Correctness",
    "CorrectnessCheck",
    "TensorComparison",
    "compare_outputs",
    "compare_tensor",
    "golden_figures",
    "max_abs_difference",
    "pooled_spreads",
]


#: Correctness verdicts for regressions, better higher.
RANK = {"pass": 1, "fail": 0, "error": 0}


def judge(context: CheckContext) -> Correctness:
    """Compare the outputs of every input (``""`` = the default one, else a shape tag) with the
    baseline's eager reference in the target's dtype and its float64 golden.

    A mixed-precision target (``amp``) is judged in its autocast dtype's rules against the
    eager CPU run under CPU autocast in that dtype (``amp:bfloat16``): the noise floor of the
    golden rule is then what autocast costs on the CPU, not what full precision costs.
    """
    from bakeoff.checks.baseline import load_references

    job = context.job
    amp = getattr(context.target, "amp", None)
    dtype, native = amp or context.dtype, context.native
    if job.baseline_path is None:
        return Correctness("not_comparable", "no baseline for this workload")
    if context.fingerprint != job.fingerprint:
        return Correctness(
            "not_comparable",
            f"workload fingerprint here ({context.fingerprint}) differs from the baseline's "
            f"({job.fingerprint}): the model or its inputs are not reproducible",
        )
    name = f"amp:{amp}" if amp else f"eager:{dtype}"
    tol = tolerance_for(dtype)
    if job.repeat_max_abs_err > tol:
        return Correctness(
            "not_comparable",
            f"the eager reference is nondeterministic: two eager CPU runs differ by "
            f"{job.repeat_max_abs_err:.3g} (> {tol:g})",
            name,
            tol,
        )
    native_name = f"eager:{native}"
    checks = list(context.outputs.items())
    honest_name = honest_reference(name)
    wanted = [n + tag for tag, _ in checks for n in (name, "golden", native_name, honest_name)]
    refs = load_references(Path(job.baseline_path), wanted)
    verdicts, reasons, outputs = [], [], []
    for tag, flat in checks:
        if name + tag not in refs:
            return Correctness("not_comparable", f"the baseline has no {name + tag} reference", name, tol)
        honest = refs.get(honest_name + tag)

        def compared(outputs: dict[str, Any], later: bool = False, tag: str = tag, honest: Any = honest) -> Correctness:
            gold, ref = refs.get("golden" + tag), refs[name + tag]
            return compare_outputs(
                outputs, ref, gold, dtype, name + tag, honest=honest, same_dtypes=not amp, later_call=later
            )

        result = compared(flat)
        if result.verdict == "pass":  # the timed calls ran since: a later call must be right too
            again = context.call(tag)
            if not identical(flat, again):
                later = compared(again, later=True)
                if later.verdict != "pass":
                    result = _on_a_later_call(later)
        verdicts.append(result.verdict)
        label = tag.removeprefix("@")
        if result.reason:
            reasons.append(f"{label}: {result.reason}" if label else result.reason)
        outputs.extend(
            o if not label else type(o)(**{**o.__dict__, "name": f"{label}:{o.name}"}) for o in result.outputs
        )
    verdict = "fail" if "fail" in verdicts else ("not_comparable" if "not_comparable" in verdicts else "pass")
    drift = None
    if native != dtype:  # what the dtype change costs, against the workload's own dtype
        errors = [
            max_abs_difference(t, refs[native_name + tag][n])
            for tag, flat in checks
            for n, t in flat.items()
            if native_name + tag in refs
            and n in refs[native_name + tag]
            and refs[native_name + tag][n].shape == t.shape
            and t.is_floating_point()
        ]
        if errors:
            drift = {"reference": native_name, "max_abs_err": max(errors)}
    return Correctness(verdict, "; ".join(reasons)[:2000], name, tol, tuple(outputs), drift)


def _on_a_later_call(result: Correctness) -> Correctness:
    """``result``, a later call's on the same input, saying so in its reasons."""
    said = "on a later call on the same input, "
    outputs = tuple(o if o.passed else replace(o, problem=said + o.problem) for o in result.outputs)
    return replace(result, reason=said + result.reason, outputs=outputs)


class CorrectnessCheck(Check):
    """The target's outputs against the baseline (see the module docstring for the verdicts)."""

    name = "correctness"
    title = "correct"
    value_type = Correctness
    answers = "correct"
    phase = "correctness"

    def run_script(self, context: ScriptContext) -> Correctness | None:
        """A script's captures and files against the reference run's (:mod:`bakeoff.checks.script_outputs`)."""
        from bakeoff.checks.script_outputs import script_correctness

        return script_correctness(context)

    def run(self, context: CheckContext) -> Correctness:
        return judge(context)

    def on_error(self, why: str) -> Correctness:
        return Correctness("error", f"no output to check: {why}")

    def metrics(self, value: Correctness | None) -> list[Metric]:
        return [Metric("correctness", value.verdict if value is not None else None, "verdict", RANK)]

    def headline(self, value: Correctness, result: Any) -> list[str]:
        if result.status == "error" or value.verdict not in ("fail", "not_comparable") or not value.reason:
            return []
        failed = [f"{o.name}: {o.problem}" for o in value.outputs if not o.passed]
        if value.verdict == "not_comparable" or not failed:
            return [clip(value.reason, 200)]
        more = f" (and {len(failed) - 3} more)" if len(failed) > 3 else ""
        return ["wrong outputs: " + "; ".join(failed[:3]) + more]

    def facts(self, value: Correctness, result: Any) -> list[str]:
        facts = []
        if value.reason and result.status != "error":
            facts.append(clip(value.reason, 200))
        if value.sensitivity is not None and result.status == "ok":
            facts.append(f"correctness flags a relative bias above {value.sensitivity:.2g}")
        if value.drift:
            facts.append(f"{value.drift['max_abs_err']:.2e} max abs from {value.drift['reference']} (the dtype's cost)")
        return facts
