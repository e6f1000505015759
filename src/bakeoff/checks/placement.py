"""Where did the work really run? The placement audit.

One extra forward pass, after the timed ones so timings stay clean, runs under a
``TorchDispatchMode`` that sees every ATen op the model executes: the devices of its inputs
and outputs, cross-device copies (direction, bytes, and the module they happened in), and
device-to-host synchronisations. Parameters and buffers not on the target device, and a
Hugging Face ``hf_device_map``, are read from the model. A dispatch-level audit cannot see
work done inside a backend's own host fallback, or inside a compiled graph, so
backend-specific signals (the test device's fallback counter, the compile backends' own
reports) are merged in by the caller as ``fallback_ops`` and ``signals``.

Verdicts:
    on_device       every op ran on the target device, nothing left behind, no fallbacks
    fallbacks       some ops ran on the host (or a backend reports fallbacks), or tensors
                    were copied to the host and back in the middle of the forward pass
    left_on_host    parameters/buffers (or device-map entries) are not on the target device
    not_applicable  a CPU target: there is no other place the work could have run (unless a
                    CPU compile backend reports that it handed work back: then fallbacks)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["HOST_SYNC_OPS", "PlacementRecorder", "audit_module", "audit_placement", "judge"]

#: Ops that make the host wait for the device: they return data to Python or size an output
#: by the data's values.
HOST_SYNC_OPS = frozenset(
    {
        "aten::_local_scalar_dense",
        "aten::item",
        "aten::is_nonzero",
        "aten::nonzero",
        "aten::equal",
        "aten::masked_select",
        "aten::unique",
        "aten::_unique",
        "aten::_unique2",
        "aten::unique_consecutive",
        "aten::unique_dim",
        "aten::repeat_interleave",
        "aten::allclose",
        "aten::_assert_async",
    }
)
_COPY_OPS = frozenset({"aten::_to_copy", "aten::copy_", "aten::to", "aten::_copy_from", "aten::_copy_from_and_resize"})
_DIRECTIONS = ("host_to_device", "device_to_host")
_IGNORED = frozenset({"aten::detach", "aten::lift_fresh", "aten::alias"})


def _tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, list | tuple):
        return [t for item in value for t in _tensors(item)]
    if isinstance(value, Mapping):
        return [t for item in value.values() for t in _tensors(item)]
    return []


def _nbytes(tensor: Any) -> int:
    return int(tensor.numel() * tensor.element_size())


@dataclass
class PlacementRecorder:
    """Accumulates what the dispatch mode saw. ``is_target(device)`` says if a device counts as the target's."""

    is_target: Callable[[Any], bool]
    ops_total: int = 0
    ops_on_device: int = 0
    host_ops: Counter = field(default_factory=Counter)
    host_syncs: Counter = field(default_factory=Counter)
    transfers: dict[str, dict[str, int]] = field(
        default_factory=lambda: {"host_to_device": {"count": 0, "bytes": 0}, "device_to_host": {"count": 0, "bytes": 0}}
    )
    transfer_sites: Counter = field(default_factory=Counter)
    transfer_site_bytes: Counter = field(default_factory=Counter)
    flops_device: int = 0
    flops_host: int = 0
    device_calls: Counter = field(default_factory=Counter)
    device_flops: Counter = field(default_factory=Counter)
    module_stack: list[str] = field(default_factory=list)

    def record(self, name: str, args: tuple, kwargs: dict, out: Any, flops: int) -> None:
        if name in _IGNORED:
            return
        inputs, outputs = _tensors((args, kwargs)), _tensors(out)
        if not inputs and not outputs:
            return
        self.ops_total += 1
        module = self.module_stack[-1] if self.module_stack else "<top>"
        if name in _COPY_OPS:
            src = inputs[-1] if name == "aten::copy_" and len(inputs) > 1 else (inputs[0] if inputs else None)
            dst = outputs[0] if outputs else None
            if src is not None and dst is not None and self.is_target(src.device) != self.is_target(dst.device):
                direction = "host_to_device" if self.is_target(dst.device) else "device_to_host"
                self.transfers[direction]["count"] += 1
                self.transfers[direction]["bytes"] += _nbytes(dst)
                self.transfer_sites[(module, direction)] += 1
                self.transfer_site_bytes[(module, direction)] += _nbytes(dst)
                return
        decisive = outputs or inputs
        on_device = any(self.is_target(t.device) for t in decisive)
        if on_device and any(not self.is_target(t.device) and t.dim() > 0 for t in inputs):
            # a device op that read a host tensor (not a 0-dim scalar): a real device would refuse
            # it or copy it implicitly; either way the work was not all on the device
            name = f"{name} (reads a host tensor)"
            on_device = False
        if name in HOST_SYNC_OPS and any(self.is_target(t.device) for t in inputs):
            self.host_syncs[name] += 1
        if on_device:
            self.ops_on_device += 1
            self.flops_device += flops
            self.device_calls[name] += 1
            self.device_flops[name] += flops
        else:
            self.host_ops[name] += 1
            self.flops_host += flops

    def shares(self, fallback_ops: Mapping[str, int]) -> tuple[float | None, float | None]:
        """Op and FLOP shares on the device, after taking out what a backend ran on the host.

        ``fallback_ops`` come from the backend's own counter over an identical forward pass,
        named per overload (``aten::rsqrt.out``); each is matched to the dispatch-level op of the
        same base name and removed from the device's op count and (at that op's mean FLOPs per
        call) from its FLOP count.
        """
        ops_device, flops_device = self.ops_on_device, float(self.flops_device)
        for full_name, count in fallback_ops.items():
            base = full_name.split(".")[0]
            calls = self.device_calls.get(base, 0)
            moved = min(count, calls)
            ops_device -= moved
            if calls:
                flops_device -= moved * self.device_flops[base] / calls
        op_share = max(ops_device, 0) / self.ops_total if self.ops_total else None
        total_flops = self.flops_device + self.flops_host
        flop_share = max(flops_device, 0.0) / total_flops if total_flops else None
        return op_share, flop_share

    def sites(self) -> list[dict[str, Any]]:
        return [
            {
                "module": module,
                "direction": direction,
                "count": count,
                "bytes": self.transfer_site_bytes[(module, direction)],
            }
            for (module, direction), count in sorted(self.transfer_sites.items())
        ]


def _flops(func: Any, args: tuple, kwargs: dict, out: Any) -> int:
    from torch.utils.flop_counter import flop_registry

    counter = flop_registry.get(func._overloadpacket)
    if counter is None:
        return 0
    try:
        return int(counter(*args, **kwargs, out_val=out))
    except Exception:  # an op variant the flop formula does not cover
        return 0


def audit_module(root: Any, run: Callable[[], Any], is_target: Callable[[Any], bool]) -> PlacementRecorder:
    """Run ``run()`` once under the dispatch-level recorder, attributing ops to ``root``'s submodules."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    recorder = PlacementRecorder(is_target=is_target)
    modules = list(root.named_modules()) if isinstance(root, torch.nn.Module) else []

    def push(module: Any, _inputs: Any) -> None:
        recorder.module_stack.append(names[id(module)])

    def pop(_module: Any, _inputs: Any, _output: Any) -> None:
        if recorder.module_stack:
            recorder.module_stack.pop()

    names = {id(m): n or type(m).__name__ for n, m in modules}

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            name = f"aten::{func._schema.name.split('::')[-1]}"
            recorder.record(name, args, kwargs, out, _flops(func, args, kwargs, out))
            return out

    # Hooks on this model's modules only: global hooks would also fire inside unrelated code.
    handles = [h for _, m in modules for h in (m.register_forward_pre_hook(push), m.register_forward_hook(pop))]
    try:
        with torch.no_grad(), Mode():
            run()
    finally:
        for handle in handles:
            handle.remove()
    return recorder


def stray_tensors(model: Any, is_target: Callable[[Any], bool]) -> list[str]:
    """Names of parameters and buffers that are not on the target device."""
    import torch

    if not isinstance(model, torch.nn.Module):
        return []
    stray = [f"{name} ({p.device})" for name, p in model.named_parameters() if not is_target(p.device)]
    stray += [f"{name} ({b.device})" for name, b in model.named_buffers() if not is_target(b.device)]
    return stray


def off_device_map_entries(device_map: Mapping[str, Any] | None, is_target: Callable[[Any], bool]) -> list[str]:
    """Entries of an ``hf_device_map`` that place modules anywhere but the target ("cpu", "disk")."""
    import torch

    if not device_map:
        return []
    off = []
    for module, where in device_map.items():
        if isinstance(where, int):
            continue  # an accelerator index: the target's device type
        if str(where) == "disk" or not is_target(torch.device(str(where))):
            off.append(f"{module or '<model>'} -> {where}")
    return off


def judge(
    *,
    cpu_target: bool,
    stray: list[str],
    off_map: list[str],
    host_ops: Mapping[str, int],
    fallback_ops: Mapping[str, int],
    transfers: Mapping[str, Mapping[str, int]],
    sites: list[dict],
) -> tuple[str, str]:
    """The verdict and a one-line explanation, from the audit's findings (pure)."""
    if cpu_target:
        if fallback_ops:  # a CPU compile backend that handed work back to PyTorch or inductor
            top = ", ".join(f"{n} x{c}" for n, c in Counter(fallback_ops).most_common(3))
            return "fallbacks", f"{sum(fallback_ops.values())} op call(s) did not run in the backend: {top}"
        return "not_applicable", "CPU target: all work runs on the host by definition"
    if stray or off_map:
        what = (stray + off_map)[:3]
        more = len(stray) + len(off_map) - len(what)
        return "left_on_host", ("not on the target device: " + ", ".join(what) + (f" and {more} more" if more else ""))
    fallback_total = sum(fallback_ops.values()) + sum(host_ops.values())
    round_trips = [s for s in sites if s["direction"] == "device_to_host"]
    if fallback_total:
        names = Counter({**host_ops}) + Counter({**fallback_ops})
        top = ", ".join(f"{n} x{c}" for n, c in names.most_common(3))
        return "fallbacks", f"{fallback_total} op call(s) ran on the host: {top}"
    if round_trips and transfers["host_to_device"]["count"]:
        where = ", ".join(sorted({s["module"] for s in round_trips})[:3])
        return "fallbacks", f"tensors copied to the host and back during the forward pass (in {where})"
    return "on_device", "every op ran on the target device; nothing left on the host"


def audit_placement(prepared: Any, target: Any, probe: Any | None) -> Any:
    """The full placement check for a prepared workload on ``target``.

    Runs the real execution path once between ``probe.begin()``/``probe.end()`` (backend
    signals), then once under the dispatch-level recorder. For a compiled target the recorder
    sees the eager ops PyTorch runs while a dispatch mode is active, not the compiled graph:
    ``scope`` says so, and the backend's own signals speak for the compiled graph.
    """
    import torch

    from bakeoff.results.values import Placement

    def is_target(device: Any) -> bool:
        return device.type == target.device and (target.index is None or device.index in (None, target.index))

    fallback_ops: dict[str, int] = {}
    signals: dict[str, Any] = {}
    if probe is not None:
        probe.begin()
        with torch.no_grad():
            prepared()
        fallback_ops, signals = probe.end()
    if prepared.backend_signals is not None:
        backend_fallbacks, backend_signals = prepared.backend_signals()
        fallback_ops = {**fallback_ops, **backend_fallbacks}
        signals = {**signals, **backend_signals}
    if prepared.compile_summary is not None:  # graphs the compiler accepted vs frames left to eager
        summary = prepared.compile_summary()
        signals["compile"] = {
            key: summary.get(key, 0) for key in ("graphs", "graph_breaks", "eager_frames", "recompile_limit_hits")
        }
    root = getattr(prepared.model, "_orig_mod", prepared.model)
    recorder = audit_module(root, prepared, is_target)
    stray = stray_tensors(root, is_target)
    device_map = getattr(root, "hf_device_map", None)
    off_map = off_device_map_entries(device_map, is_target)
    sites = recorder.sites()
    verdict, explanation = judge(
        cpu_target=target.device == "cpu",
        stray=stray,
        off_map=off_map,
        host_ops=recorder.host_ops,
        fallback_ops=fallback_ops,
        transfers=recorder.transfers,
        sites=sites,
    )
    op_share, flop_share = recorder.shares(fallback_ops)
    scope = (
        "eager ATen ops (the compiled graph itself is covered by backend signals)"
        if target.is_compiled
        else "every ATen op of one forward pass"
    )
    return Placement(
        verdict=verdict,
        explanation=explanation,
        scope=scope,
        ops_total=recorder.ops_total,
        ops_on_device=recorder.ops_on_device,
        device_op_share=op_share,
        device_flop_share=flop_share,
        host_ops=dict(recorder.host_ops),
        fallback_ops=fallback_ops,
        transfers=recorder.transfers,
        transfer_sites=tuple(sites),
        host_syncs=dict(recorder.host_syncs),
        stray_parameters=tuple(stray),
        device_map={str(k): str(v) for k, v in device_map.items()} if device_map else None,
        signals=signals,
    )
