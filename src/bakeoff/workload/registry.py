"""Dispatch a workload spec to the builder for its kind."""

from __future__ import annotations

from bakeoff.workload.base import BuiltWorkload, WorkloadSpec, parse_workload
from bakeoff.workload.hf import build_arch, build_hf_dir, list_architectures

__all__ = ["DEMO_WORKLOAD", "build_workload", "list_architectures"]

#: The bundled tiny workload used by ``bakeoff demo``: a 2-layer llama with random weights.
DEMO_WORKLOAD = "arch:llama"


def build_workload(spec: str | WorkloadSpec, device: str | None = None) -> BuiltWorkload:
    """Build a workload from its spec (a string or a parsed spec).

    Args:
        device: the target device (``"cuda:0"``...) for workloads that place themselves (a
            ``py:`` factory with a ``device`` parameter, an ``hf:`` model with ``device_map``);
            None builds everything on the CPU, as the baseline needs. Other workloads are always
            built on the CPU and moved by bakeoff.
    """
    import torch

    from bakeoff.workload.user import build_user

    parsed = parse_workload(spec) if isinstance(spec, str) else spec
    builder = {"arch": build_arch, "hf": build_hf_dir, "py": build_user}[parsed.kind]
    # One intra-op thread while building: how an op splits its work between threads can change
    # the last bit of what it computes (arch:rwkv's initialisation does), and a target's worker
    # runs with its own thread count (1 for cpu), so the same spec must build the same weights
    # in every process and on every machine, or the baseline is not comparable.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return builder(parsed) if parsed.kind == "arch" else builder(parsed, device)
    finally:
        torch.set_num_threads(threads)
