"""Model-level correctness tolerances per dtype, in the spirit of PyTorch's dynamo benchmarks.

A target passes a tensor if it is ``allclose`` to the *same-dtype* eager CPU reference with
``atol = rtol = TOLERANCE[dtype]``. Otherwise it may still pass on the float64 rule used by
``torch._dynamo.utils.same``: its RMS error against the float64 golden output must be at most
``FP64_MULTIPLIER`` times the eager reference's own RMS error, plus ``tol / 10``. The second
rule accepts a target that is as accurate as eager in a different way (reordered sums), and
rejects one that is merely "close" to an inaccurate reference.
"""

from __future__ import annotations

__all__ = ["FP64_MULTIPLIER", "TOLERANCE", "passes_fp64_rule", "tolerance_for"]

TOLERANCE = {"float64": 1e-7, "float32": 1e-4, "float16": 1e-3, "bfloat16": 1e-2}
FP64_MULTIPLIER = 2.0


def tolerance_for(dtype: str) -> float:
    """Tolerance for outputs computed in ``dtype`` (integers must match exactly)."""
    return TOLERANCE.get(dtype, 0.0)


def passes_fp64_rule(res_error: float, ref_error: float, tol: float) -> bool:
    """True when ``res_error <= FP64_MULTIPLIER * ref_error + tol / 10`` (both RMS vs float64)."""
    return res_error <= FP64_MULTIPLIER * ref_error + tol / 10.0
