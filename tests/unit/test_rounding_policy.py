"""The exec honest reference under autocast (``RoundingNoise(any_policy=True)``): each device's
autocast has its own op lists, so an op the reference's policy ran in float32 (the CPU's
log_softmax) may run in the autocast dtype on another device. Inside an autocast region such an
op is perturbed by the autocast dtype's roundoff; outside one, and without ``any_policy``, by its
own dtype's (the control)."""

from __future__ import annotations

import torch

from bakeoff.checks.rounding import RoundingNoise, honest_amplitude


def _moved(any_policy: bool, autocast: bool) -> float:
    """How far log_softmax (float32 under the CPU's policy) moves under the noise, relative."""
    x = torch.randn(256, 64, generator=torch.Generator().manual_seed(0))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        exact = torch.log_softmax(x, 1)
        with RoundingNoise(3, any_policy=any_policy) as noise:
            moved = torch.log_softmax(x, 1)
    assert exact.dtype == torch.float32 and noise.perturbed == 1
    return float(((moved - exact) / exact).abs().max())


def test_an_op_in_an_autocast_region_rounds_as_the_autocast_dtype_would_on_another_device():
    bf16, fp32 = honest_amplitude("bfloat16"), honest_amplitude("float32")
    assert fp32 * 100 < bf16
    assert bf16 / 2 < _moved(any_policy=True, autocast=True) <= bf16 * 1.01
    # the controls: the reference's own policy alone, and any policy outside autocast
    assert _moved(any_policy=False, autocast=True) <= fp32 * 1.5  # and the float32 rounding of the result
    assert _moved(any_policy=True, autocast=False) <= fp32 * 1.5  # and the float32 rounding of the result


def test_an_elementwise_op_or_a_float64_one_in_an_autocast_region_keeps_its_own_dtypes_rounding():
    # no autocast casts them: a rotary angle (positions x frequencies, elementwise) rounded at bf16
    # would move by whole radians at long positions
    positions = torch.arange(4096, dtype=torch.float32)
    frequencies = torch.rand(32, generator=torch.Generator().manual_seed(0))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        exact = torch.outer(positions, frequencies)
        wide = torch.randn(8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
        exact64 = torch.log_softmax(wide, 1)
        with RoundingNoise(3, any_policy=True):
            angles = torch.outer(positions, frequencies)
            moved64 = torch.log_softmax(wide, 1)
    assert float(((angles - exact) / exact.clamp_min(1e-6)).abs().max()) <= honest_amplitude("float32") * 1.5
    assert float(((moved64 - exact64) / exact64).abs().max()) <= honest_amplitude("float64") * 1.5
