"""Does the target compute the same thing as the baseline? Dtype-aware, output by output.

See :mod:`bakeoff.analysis.tolerance` for the rules: the golden rule whenever the baseline has
a float64 golden output (allclose alone is not enough then), the allclose rule only without
one, exact equality for integer outputs. Verdicts:
    pass            every output tensor passes its rule
    fail            an output is missing, has another shape, or fails its rule
    not_comparable  the reference itself cannot be trusted (nondeterministic eager runs, or a
                    workload whose fingerprint differs from the baseline's)
    error           the target produced no output (set by the runner, not here)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bakeoff.analysis.tolerance import GoldenFigures, judge_against_golden, tolerance_for
from bakeoff.results.values import Correctness, TensorComparison

__all__ = ["compare_outputs", "compare_tensor", "golden_figures", "max_abs_difference"]


def max_abs_difference(a: Any, b: Any) -> float:
    """Largest ``|a - b|`` over elements; equal non-finite values (same inf, both NaN) count as 0,
    any other disagreement in finiteness as infinity."""
    import torch

    if not a.numel():
        return 0.0
    a, b = a.detach().cpu().double(), b.detach().cpu().double()
    same_nonfinite = (a == b) | (torch.isnan(a) & torch.isnan(b))
    diff = torch.where(same_nonfinite, torch.zeros_like(a), (a - b).abs())
    return float(diff.nan_to_num(nan=float("inf")).max())


def _rms(diff: Any) -> float:
    return float(diff.double().pow(2).mean().sqrt()) if diff.numel() else 0.0


def _bias(value: Any, golden: Any) -> float:
    """Least-squares relative scale error of ``value`` against ``golden`` (0 for a zero golden)."""
    norm = float((golden * golden).sum())
    return float(((value - golden) * golden).sum()) / norm if norm > 0 else 0.0


def golden_figures(result: Any, reference: Any, golden: Any) -> GoldenFigures:
    """The golden rule's inputs for one output, over the elements finite in all three."""
    import torch

    res, ref, gold = (t.detach().cpu().double() for t in (result, reference, golden))
    keep = torch.isfinite(res) & torch.isfinite(ref) & torch.isfinite(gold)
    rows = max(gold.numel() // gold.shape[-1], 1) if gold.dim() >= 2 and gold.shape[-1] else 1
    res, ref, gold = res[keep], ref[keep], gold[keep]
    return GoldenFigures(
        golden_rms=_rms(gold),
        floor=_rms(ref - gold),
        error=_rms(res - gold),
        ref_bias=_bias(ref, gold),
        bias=_bias(res, gold),
        rows=rows,
    )


def compare_tensor(name: str, result: Any, reference: Any, golden: Any | None, dtype: str) -> TensorComparison:
    """Compare one output tensor; ``reference`` is same-dtype eager, ``golden`` float64 eager.

    With a golden of the same shape the golden rule decides; allclose to the reference is the
    fallback only without one.
    """
    import torch

    if tuple(result.shape) != tuple(reference.shape):
        return TensorComparison(
            name,
            tuple(result.shape),
            str(result.dtype).removeprefix("torch."),
            float("inf"),
            float("inf"),
            0.0,
            False,
            problem=f"shape {tuple(result.shape)} != reference {tuple(reference.shape)}",
        )
    res, ref = result.detach().cpu().double(), reference.detach().cpu().double()
    max_abs = max_abs_difference(res, ref)
    finite_ref = ref[torch.isfinite(ref)]
    scale = float(finite_ref.abs().max()) if finite_ref.numel() else 0.0
    max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
    flat_res, flat_ref = res.flatten(), ref.flatten()
    norms = float(flat_res.norm() * flat_ref.norm())
    cosine = float(flat_res @ flat_ref) / norms if norms > 0 else float(max_abs == 0)
    dtype_name = str(result.dtype).removeprefix("torch.")
    common = (name, tuple(result.shape), dtype_name, max_abs, max_rel, cosine)
    if not result.is_floating_point():
        ok = bool(torch.equal(result.cpu(), reference.cpu()))
        return TensorComparison(*common, ok, rule="exact" if ok else "", problem="" if ok else "integer output differs")
    both_finite = torch.isfinite(res) & torch.isfinite(ref)
    finite = bool((both_finite | (res == ref) | (torch.isnan(res) & torch.isnan(ref))).all())
    if golden is not None and tuple(golden.shape) == tuple(result.shape):
        figures = golden_figures(res, ref, golden)
        judged = judge_against_golden(figures, dtype)
        relative = figures.golden_rms if figures.golden_rms > 0 else None
        extra = {
            "golden_err": figures.error / relative if relative else None,
            "floor": figures.floor / relative if relative else None,
            "bias": figures.bias if relative else None,
            "sensitivity": judged.sensitivity,
        }
        if not finite:
            return TensorComparison(*common, False, problem="non-finite values differ", **extra)
        return TensorComparison(*common, judged.passed, "golden" if judged.passed else "", judged.problem, **extra)
    tol = tolerance_for(dtype)
    if finite and torch.allclose(res, ref, atol=tol, rtol=tol, equal_nan=True):
        return TensorComparison(*common, True, "allclose")
    problem = "non-finite values differ" if not finite else f"max abs error {max_abs:.3g} > tol {tol:g}"
    return TensorComparison(*common, False, problem=problem)


def compare_outputs(
    outputs: Mapping[str, Any],
    reference: Mapping[str, Any],
    golden: Mapping[str, Any] | None,
    dtype: str,
    reference_name: str,
) -> Correctness:
    """Compare flattened outputs with the flattened same-dtype reference (and golden)."""
    tol = tolerance_for(dtype)
    comparisons = []
    missing = [name for name in reference if name not in outputs]
    extra = [name for name in outputs if name not in reference]
    for name, ref in reference.items():
        if name in outputs:
            gold = golden.get(name) if golden is not None else None
            comparisons.append(compare_tensor(name, outputs[name], ref, gold, dtype))
    failed = [c for c in comparisons if not c.passed]
    fallback = [c.name for c in comparisons if c.rule == "allclose"]
    note = (
        f"no float64 golden for {', '.join(fallback)}: judged by allclose(atol=rtol={tol:g}) to "
        f"{reference_name} only, blind to a systematic error below that"
        if fallback
        else ""
    )
    if missing or extra or failed:
        parts = []
        if missing:
            parts.append("missing outputs: " + ", ".join(missing))
        if extra:
            parts.append("unexpected outputs: " + ", ".join(extra))
        parts.extend(f"{c.name}: {c.problem}" for c in failed)
        parts.extend([note] if note else [])
        return Correctness("fail", "; ".join(parts), reference_name, tol, tuple(comparisons))
    if not comparisons:
        return Correctness("not_comparable", "the workload returned no tensors", reference_name, tol)
    return Correctness("pass", note, reference_name, tol, tuple(comparisons))
