"""An honest other implementation, emulated: the workload with every arithmetic op's result
perturbed by a few units of roundoff.

Another engine (a compiler, ONNX Runtime, OpenVINO, a device's kernels, a padded batch) computes
the same function in another order: its reductions are blocked differently, its transcendental
functions are approximations good to a few units in the last place, its fusions skip or add
roundings. Its outputs therefore differ from eager's by more than eager differs from the float64
golden, although nothing is wrong. How much more depends on the workload: how many ops there
are, how much each layer amplifies an error, where values cancel.

:class:`RoundingNoise` measures that on the workload itself. Under it, the result of every
arithmetic op (every op ATen tags ``pointwise`` but the exact ones in :data:`EXACT`, and the
contractions, reductions and normalisations in :data:`ARITHMETIC`) is multiplied element by
element by ``1 + d`` with ``d`` uniform in ``[-a, a]``, computed in float32 or wider and
rounded back to the op's dtype, where ``a = HONEST_ULPS[dtype] * u(dtype)``
(:mod:`bakeoff.analysis.tolerance`), or, for a float32 reduction of ``n`` terms
(:data:`REDUCTIONS`), ``sqrt(n) * u(float32)`` where that is more. Ops that only move or select data (copies, views,
indexing, concatenation, embeddings, clamps) are left exact, as every engine leaves them. The
eager run under this mode is an implementation whose every op is within ``a`` of eager's
result: its error against the golden (:func:`bakeoff.analysis.tolerance.judge_against_golden`)
is the honest spread a correct engine may reach on this workload.

What this cannot emulate: an engine that is *less* accurate per op than ``HONEST_ULPS`` allows
(a fast-math approximation, a lower internal precision such as OpenVINO's default bfloat16 on a
float32 model), which is then judged by its measured error as before; a contraction's (matmul's)
error growing with its inner dimension beyond the per-op bound (engines block those as eager
does: measured within it); and errors that grow with reduction length faster than the model
does (catastrophic cancellation inside one reduction), which the float64 golden's floor term
still covers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from bakeoff.analysis.tolerance import honest_ulps, roundoff_for

__all__ = [
    "ARITHMETIC",
    "EXACT",
    "POLICY_OPS",
    "REDUCTIONS",
    "RoundingNoise",
    "honest_amplitude",
    "reordered_backend",
    "within_ulps_backend",
]


#: ATen ops (by overload packet name) that compute rather than move data, beyond those tagged
#: ``pointwise``: contractions, reductions, normalisations, attention, convolution.
ARITHMETIC = frozenset(
    {
        "mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "dot", "mv", "addmv", "linear",
        "sum", "mean", "prod", "cumsum", "cumprod", "var", "var_mean", "std", "std_mean",
        "linalg_vector_norm", "norm", "logsumexp",
        "_softmax", "_log_softmax", "softmax", "log_softmax",
        "native_layer_norm", "native_group_norm", "native_batch_norm", "_native_batch_norm_legit",
        "_native_batch_norm_legit_no_training", "rms_norm", "_fused_rms_norm",
        "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_attention_math",
        "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
        "convolution", "_convolution", "conv1d", "conv2d", "einsum",
    }
)  # fmt: skip


#: Reductions whose honest error grows with their length: an engine summing ``n`` float32 terms
#: one after another (a vectorised loop, inductor's) errs by about ``sqrt(n)`` units of roundoff
#: (a random walk of one rounding per addition), eager's pairwise sum by far less. Their float32
#: results are perturbed by ``sqrt(n)`` units where that is more than the per-op bound: on a mean
#: over 8,192 tokens inductor's error was 2.7x a spread of 8 units (bf16/fp16 reductions
#: accumulate in float32 and round once, so their one unit of the dtype already covers it).
REDUCTIONS = frozenset(
    {"sum", "mean", "nansum", "cumsum", "var", "var_mean", "std", "std_mean", "linalg_vector_norm", "norm", "logsumexp"}
)


def _reduced_length(func: Any, args: Any, out: Any) -> int:
    """How many terms each result of the reduction ``func`` sums (1 where it cannot tell)."""
    import torch

    source = args[0] if args and isinstance(args[0], torch.Tensor) else None
    first = out[0] if isinstance(out, tuple | list) else out
    if source is None or not isinstance(first, torch.Tensor):
        return 1
    if func.overloadpacket.__name__ == "cumsum":
        return int(source.shape[args[1]]) if source.dim() else 1
    return max(source.numel() // max(first.numel(), 1), 1)


def honest_amplitude(dtype: str) -> float:
    """The largest relative error one honest op in ``dtype`` may make (``a`` above)."""
    return honest_ulps(dtype) * roundoff_for(dtype)


#: Ops ATen tags ``pointwise`` whose results are exact in every engine: copies, selections,
#: signs and clamps (a perturbation there would be an error no honest engine makes).
EXACT = frozenset(
    {
        "clone", "where", "masked_fill", "abs", "neg", "maximum", "minimum", "fmax", "fmin", "clamp",
        "clamp_min", "clamp_max", "relu", "hardtanh", "threshold", "sign", "sgn", "ceil", "floor", "round",
        "trunc", "copysign", "positive", "nan_to_num", "fill", "zero", "lerp_",
    }
)  # fmt: skip


#: ATen ops some device's autocast runs in its lower dtype while another's runs them in float32
#: (matmuls, convolutions, attention, softmax, norms, losses, the reductions autocast upcasts):
#: those ``any_policy`` rounds at the autocast dtype. Elementwise ops are left to their own
#: dtype: no autocast casts them (a rotary angle computed in float32 stays float32 everywhere).
POLICY_OPS = ARITHMETIC | frozenset(
    {
        "addr", "chain_matmul", "linalg_multi_dot", "linalg_vecdot", "prelu", "_prelu_kernel",
        "nll_loss_forward", "nll_loss2d_forward", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
        "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "cross_entropy_loss",
        "_safe_softmax", "cdist", "_cdist_forward", "cosine_similarity",
    }
)  # fmt: skip


def _perturbs(func: Any) -> bool:
    """Whether ``func``'s floating results are perturbed: an arithmetic op that returns new
    tensors (an op returning an alias, a view or an in-place result keeps its exact value)."""
    import torch

    schema = func._schema
    if schema.is_mutable or any(r.alias_info is not None for r in schema.returns):
        return False
    name = func.overloadpacket.__name__
    return name not in EXACT and (torch.Tag.pointwise in func.tags or name in ARITHMETIC)


def _make_mode() -> type:
    """The dispatch mode class (built late: importing torch is deferred to the first use)."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_map

    from bakeoff.target.lazy_dynamo import lazy_dynamo

    class _AutocastSeen(TorchFunctionMode):
        """Tells ``noise`` the autocast dtype each torch call runs under (on its arguments'
        device): inside dispatch, where the noise is made, autocast reads as off."""

        def __init__(self, noise: Any) -> None:
            super().__init__()
            self.noise = noise

        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            found = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
            kind = found.device.type if found is not None else "cpu"
            saved = self.noise.autocast_dtype
            try:
                enabled = torch.is_autocast_enabled(kind)
            except RuntimeError:  # a device type without autocast
                enabled = False
            self.noise.autocast_dtype = torch.get_autocast_dtype(kind) if enabled else None
            try:
                return func(*args, **kwargs)
            finally:
                self.noise.autocast_dtype = saved

    @lazy_dynamo
    class _RoundingNoise(TorchDispatchMode):
        def __init__(self, dtype_amplitude: Callable[[Any], float], seed: int, any_policy: bool = False) -> None:
            super().__init__()
            self._amplitude = dtype_amplitude
            self._generator = torch.Generator().manual_seed(seed)
            self._seen = _AutocastSeen(self) if any_policy else None  # entered with this mode, around it
            self.perturbed = 0

        #: The autocast dtype of the torch call being run (set by :class:`_AutocastSeen`), or None.
        autocast_dtype: Any = None

        def __enter__(self) -> Any:
            if self._seen is not None:
                self._seen.__enter__()
            return super().__enter__()

        def __exit__(self, *exc: Any) -> None:
            try:
                super().__exit__(*exc)
            finally:
                if self._seen is not None:
                    self._seen.__exit__(*exc)

        def _perturb(self, value: Any, at_least: float = 0.0) -> Any:
            """``value`` perturbed in its dtype; a float32 one by ``at_least`` where that is more."""
            if type(value) not in (torch.Tensor, torch.nn.Parameter) or not value.is_floating_point():
                return value  # a subclass (fake, functional, a device's wrapper) is left as it is
            amplitude = self._amplitude(value.dtype)
            if value.dtype == torch.float32:
                amplitude = max(amplitude, at_least)
            if not amplitude or not value.numel():
                return value
            wide = torch.float64 if value.dtype == torch.float64 else torch.float32
            noise = torch.rand(value.shape, generator=self._generator, dtype=wide).mul_(2).sub_(1).mul_(amplitude)
            noise = noise if value.device.type == "cpu" else noise.to(value.device)
            self.perturbed += 1
            return (value.to(wide) * (1 + noise)).to(value.dtype)

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            if not _perturbs(func):
                return out
            # any_policy (the only setter of autocast_dtype): an op another device's autocast runs
            # in the region's dtype rounds as it would there
            region = self.autocast_dtype
            name = func.overloadpacket.__name__
            policy = region is not None and name in POLICY_OPS
            at_least = self._amplitude(region) if policy else 0.0
            if name in REDUCTIONS:
                at_least = max(at_least, math.sqrt(_reduced_length(func, args, out)) * roundoff_for("float32"))
            return tree_map(lambda value: self._perturb(value, at_least), out)

    return _RoundingNoise


_MODE: type | None = None


def RoundingNoise(seed: int = 0, ulps: float | None = None, any_policy: bool = False) -> Any:
    """A dispatch mode perturbing every arithmetic op's floating result by up to
    :func:`honest_amplitude` of its dtype (see the module docstring), or by ``ulps`` units of
    roundoff of its dtype where given; ``seed`` fixes the draws, so a baseline's honest run is
    reproducible. Its ``perturbed`` counts the results changed.

    ``any_policy``: inside an autocast region, a float32 result of one of :data:`POLICY_OPS` is
    perturbed as a result in the autocast dtype would be (never an elementwise op's, nor float64).
    Each device's autocast has its own op lists (the CPU's runs
    ``cross_entropy`` in float32 and flash attention in bfloat16; CUDA's lists, which the test
    device shares, run ``log_softmax`` from bfloat16 logits in bfloat16 and the math attention in
    float32), so a script that asks for autocast accepts its dtype's rounding in any op of the
    region: an honest other device is as far from the reference as that."""
    global _MODE
    if _MODE is None:
        _MODE = _make_mode()

    def amplitude(dtype: Any) -> float:
        name = str(dtype).removeprefix("torch.")
        return honest_amplitude(name) if ulps is None else ulps * roundoff_for(name)

    return _MODE(amplitude, seed, any_policy)


def _make_reordered() -> type:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from bakeoff.target.lazy_dynamo import lazy_dynamo

    aten = torch.ops.aten
    log2e = 1.4426950408889634

    def split_k(a: Any, b: Any) -> Any:
        half = a.shape[-1] // 2
        return torch.matmul(a[..., :half], b[..., :half, :]) + torch.matmul(a[..., half:], b[..., half:, :])

    def fast_exp(x: Any) -> Any:  # (e^(x/4))^4: a few units of roundoff, as vectorised kernels
        quarter = torch.exp2(x * (log2e / 4))
        return (quarter * quarter) * (quarter * quarter)

    @lazy_dynamo
    class _Reordered(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            floating = all(not isinstance(a, torch.Tensor) or a.is_floating_point() for a in args)
            if not floating:
                return func(*args, **kwargs)
            if func in (aten.mm.default, aten.bmm.default) and args[0].shape[-1] >= 2:
                return split_k(*args)
            if func is aten.addmm.default and args[1].shape[-1] >= 2 and not kwargs:
                return args[0] + split_k(args[1], args[2])
            if func is aten.exp.default:
                return fast_exp(args[0])
            if func is aten._softmax.default and args[1] == -1 and args[0].dtype == torch.float32:
                shifted = fast_exp(args[0] - args[0].amax(-1, keepdim=True))
                return shifted / shifted.sum(-1, keepdim=True)
            if func is aten.silu.default and args[0].dtype == torch.float32:
                return args[0] / (1 + fast_exp(-args[0]))
            if func is aten.rsqrt.default:
                return 1 / torch.sqrt(args[0])
            return func(*args, **kwargs)

    return _Reordered


def reordered_backend(gm: Any, example_inputs: Any) -> Any:
    """A ``torch.compile`` backend that is an honest other implementation, run for real: every
    matrix product summed in two halves of its inner dimension (another blocking); ``exp`` as
    ``exp2(x log2(e) / 4)`` raised to the 4th power, a few units of roundoff off as vectorised
    kernels are, and softmax and SiLU in float32 decomposed over it, as exporters decompose
    them; ``rsqrt`` as ``1 / sqrt``. Nothing in it is wrong, yet no output is bit-identical to eager's: the correctness
    rule must pass it (the tests and ``benchmarks/false_alarms.py`` register it)."""
    mode = _make_reordered()

    def run(*args: Any) -> Any:
        with mode():
            return gm(*args)

    return run


def within_ulps_backend(ulps: float, seed: int = 7) -> Any:
    """A ``torch.compile`` backend whose every arithmetic op errs by up to ``ulps`` units of
    roundoff of its dtype (seeded): an honest engine by construction, as inaccurate per op as a
    fast-math kernel library (the tests and ``benchmarks/false_alarms.py`` register it)."""

    def backend(gm: Any, example_inputs: Any) -> Any:
        def run(*args: Any) -> Any:
            with RoundingNoise(seed=seed, ulps=ulps):
                return gm(*args)

        return run

    return backend
