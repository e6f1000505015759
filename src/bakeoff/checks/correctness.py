"""Does the target compute the same thing as the baseline? Dtype-aware, output by output.

See :mod:`bakeoff.analysis.tolerance` for the two rules. Verdicts:
    pass            every output tensor passes one rule
    fail            an output is missing, has another shape, or passes neither rule
    not_comparable  the reference itself cannot be trusted (nondeterministic eager runs, or a
                    workload whose fingerprint differs from the baseline's)
    error           the target produced no output (set by the runner, not here)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bakeoff.analysis.tolerance import passes_fp64_rule, tolerance_for
from bakeoff.results.values import Correctness, TensorComparison

__all__ = ["compare_outputs", "compare_tensor", "max_abs_difference"]


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


def compare_tensor(name: str, result: Any, reference: Any, golden: Any | None, dtype: str) -> TensorComparison:
    """Compare one output tensor; ``reference`` is same-dtype eager, ``golden`` float64 eager."""
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
    finite = torch.isfinite(res) == torch.isfinite(ref)
    max_abs = max_abs_difference(res, ref)
    finite_ref = ref[torch.isfinite(ref)]
    scale = float(finite_ref.abs().max()) if finite_ref.numel() else 0.0
    max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
    flat_res, flat_ref = res.flatten(), ref.flatten()
    norms = float(flat_res.norm() * flat_ref.norm())
    cosine = float(flat_res @ flat_ref) / norms if norms > 0 else float(max_abs == 0)
    dtype_name = str(result.dtype).removeprefix("torch.")
    if not result.is_floating_point():
        ok = bool(torch.equal(result.cpu(), reference.cpu()))
        return TensorComparison(
            name,
            tuple(result.shape),
            dtype_name,
            max_abs,
            max_rel,
            cosine,
            ok,
            rule="exact" if ok else "",
            problem="" if ok else "integer output differs",
        )
    tol = tolerance_for(dtype)
    if bool(finite.all()) and torch.allclose(res, ref, atol=tol, rtol=tol, equal_nan=True):
        return TensorComparison(name, tuple(result.shape), dtype_name, max_abs, max_rel, cosine, True, "allclose")
    if golden is not None and tuple(golden.shape) == tuple(result.shape):
        gold = golden.detach().cpu().double()
        if passes_fp64_rule(_rms(res - gold), _rms(ref - gold), tol):
            return TensorComparison(name, tuple(result.shape), dtype_name, max_abs, max_rel, cosine, True, "fp64")
    problem = "non-finite values differ" if not bool(finite.all()) else f"max abs error {max_abs:.3g} > tol {tol:g}"
    return TensorComparison(name, tuple(result.shape), dtype_name, max_abs, max_rel, cosine, False, problem=problem)


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
    if missing or extra or failed:
        parts = []
        if missing:
            parts.append("missing outputs: " + ", ".join(missing))
        if extra:
            parts.append("unexpected outputs: " + ", ".join(extra))
        parts.extend(f"{c.name}: {c.problem}" for c in failed)
        return Correctness("fail", "; ".join(parts), reference_name, tol, tuple(comparisons))
    if not comparisons:
        return Correctness("not_comparable", "the workload returned no tensors", reference_name, tol)
    return Correctness("pass", "", reference_name, tol, tuple(comparisons))
