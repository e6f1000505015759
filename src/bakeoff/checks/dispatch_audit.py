"""The dispatch-level recorder behind the placement check: every ATen op of one forward pass.

A ``TorchDispatchMode`` sees the devices of each op's inputs and outputs, cross-device copies
(direction, bytes, and the module they happened in) and device-to-host synchronisations;
module hooks say which module was running. Parameters, buffers and a Hugging Face
``hf_device_map`` are read from the model. What it cannot see (work inside a backend's own host
fallback or inside a compiled graph) is merged in by :mod:`bakeoff.checks.placement` from the
backend's signals.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "HOST_SYNC_OPS",
    "PlacementRecorder",
    "audit_module",
    "off_device_map_entries",
    "stray_tensors",
]

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
#: Ops that compute nothing on the data: aliases, and the metadata query ``Module.to`` makes for
#: each parameter (whether the device tensor can take the host tensor's place: tied weights stay
#: tied), which reads a host tensor without touching its data.
_IGNORED = frozenset({"aten::detach", "aten::lift_fresh", "aten::alias", "aten::_has_compatible_shallow_copy_type"})


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


def _storage(tensor: Any) -> int | None:
    """A host tensor's storage address: views share it, so data keeps its origin through views."""
    try:
        return int(tensor.untyped_storage().data_ptr())
    except Exception:  # tensors without storage (sparse, some subclasses)
        return None


@dataclass
class PlacementRecorder:
    """Accumulates what the dispatch mode saw. ``is_target(device)`` says if a device counts as the target's.

    ``input_storages`` are the host storages of the workload's own inputs: copying them to the
    device is the workload's business, not state left behind. Host tensors that came from the
    device during the pass (and host results computed from them) are tracked, so copying them
    back is a round trip; any other host-to-device copy is host state, counted in ``host_state``.
    """

    is_target: Callable[[Any], bool]
    input_storages: set = field(default_factory=set)
    from_device: set = field(default_factory=set)
    host_state: Counter = field(default_factory=Counter)
    host_state_bytes: Counter = field(default_factory=Counter)
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
                if direction == "device_to_host":
                    self.from_device.add(_storage(dst))
                elif _storage(src) is None or _storage(src) not in self.input_storages | self.from_device:
                    self.host_state[module] += 1
                    self.host_state_bytes[module] += _nbytes(dst)
                return
        decisive = outputs or inputs
        host_inputs = {_storage(t) for t in inputs if not self.is_target(t.device)} - {None}
        if host_inputs & self.from_device:  # host work on data that came from the device
            self.from_device.update(_storage(t) for t in outputs if not self.is_target(t.device))
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

    def device_counts(self, fallback_ops: Mapping[str, int]) -> tuple[int, float]:
        """Op calls and FLOPs on the device, after taking out what a backend ran on the host.

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
        return max(ops_device, 0), max(flops_device, 0.0)

    def shares(self, fallback_ops: Mapping[str, int]) -> tuple[float | None, float | None]:
        """Op and FLOP shares on the device, after :meth:`device_counts` took out the fallbacks."""
        ops_device, flops_device = self.device_counts(fallback_ops)
        op_share = ops_device / self.ops_total if self.ops_total else None
        total_flops = self.flops_device + self.flops_host
        flop_share = flops_device / total_flops if total_flops else None
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

    def host_state_sites(self) -> list[dict[str, Any]]:
        """Per module: host-to-device copies per forward pass of data that was neither an input
        nor something the pass itself had brought back from the device."""
        return [
            {"module": module, "count": count, "bytes": self.host_state_bytes[module]}
            for module, count in sorted(self.host_state.items())
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


def audit_module(
    root: Any, run: Callable[[], Any], is_target: Callable[[Any], bool], inputs: Any = ()
) -> PlacementRecorder:
    """Run ``run()`` once under the dispatch-level recorder, attributing ops to ``root``'s submodules.

    ``inputs`` (any nesting) are the workload's own inputs: copying those to the device is not
    host state left behind.
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from bakeoff.target.lazy_dynamo import lazy_dynamo

    recorder = PlacementRecorder(is_target=is_target)
    recorder.input_storages = {_storage(t) for t in _tensors(inputs) if not is_target(t.device)}
    modules = list(root.named_modules()) if isinstance(root, torch.nn.Module) else []

    def push(module: Any, _inputs: Any) -> None:
        recorder.module_stack.append(names[id(module)])

    def pop(_module: Any, _inputs: Any, _output: Any) -> None:
        if recorder.module_stack:
            recorder.module_stack.pop()

    names = {id(m): n or type(m).__name__ for n, m in modules}

    @lazy_dynamo
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
