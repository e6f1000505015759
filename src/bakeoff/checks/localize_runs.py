"""Recording module calls, and replaying one module alone: the runs behind localisation.

:func:`record_calls` runs a model once with a pre- and a post-forward hook on every module and
keeps each call's inputs and outputs (as given: args and kwargs with their structure, tensors
copied to the host) in completion order. :func:`replay` runs one module alone on the target
with the *reference's* inputs for that call, eagerly or compiled by the target's engine: what
the module does when nothing before it went wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bakeoff.target.execute import move_tensors
from bakeoff.target.spec import Target

__all__ = ["RecordedCall", "flat_tensors", "record_calls", "record_ops", "replay"]


@dataclass
class RecordedCall:
    """One module call: its qualified name (``""`` for the root), class, how many times the
    module had been called before (``index``), its depth, its caller's key, its inputs
    (``args``, ``kwargs``) and output, tensors on the host."""

    name: str
    cls: str
    index: int
    depth: int
    parent: tuple[str, int] | None
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    output: Any = None

    @property
    def key(self) -> tuple[str, int]:
        return self.name, self.index


def _to_host(value: Any) -> Any:
    import torch
    from torch.utils._pytree import tree_map_only

    return tree_map_only(torch.Tensor, lambda t: t.detach().to("cpu", copy=True), value)


def flat_tensors(value: Any, prefix: str) -> dict[str, Any]:
    """Every tensor in ``value`` by its path (``out``, ``out.0``, ``in.hidden_states``...)."""
    import torch

    found: dict[str, Any] = {}

    def walk(item: Any, path: str) -> None:
        if isinstance(item, torch.Tensor):
            found[path] = item
        elif isinstance(item, dict):
            for key, inner in item.items():
                walk(inner, f"{path}.{key}")
        elif isinstance(item, list | tuple):
            for i, inner in enumerate(item):
                walk(inner, f"{path}.{i}")
        elif hasattr(item, "to_tuple") and callable(item.to_tuple):  # a Hugging Face ModelOutput
            walk(dict(item.items()), path)

    walk(value, prefix)
    return found


def _sampled(value: Any, sample: int) -> Any:
    """Every tensor in ``value`` cut to at most ``sample`` evenly strided elements, flattened:
    the same elements in every run of the same shapes (statistics over them estimate the whole)."""
    import torch
    from torch.utils._pytree import tree_map_only

    def cut(t: torch.Tensor) -> torch.Tensor:
        flat = t.detach().reshape(-1)
        step = max(1, -(-flat.numel() // sample))
        return flat[::step].to("cpu", copy=True)

    return tree_map_only(torch.Tensor, cut, value)


def record_calls(
    model: Any, run: Callable[[], Any], sample: int = 0, full: Callable[[str, str], bool] | None = None
) -> list[RecordedCall]:
    """Run ``run()`` with every module of ``model`` hooked; the calls in completion order.

    With ``sample`` > 0, tensors are kept as at most ``sample`` strided elements each (a large
    model's activations would not fit three times over), except for the calls of modules that
    ``full(name, class name)`` chooses, kept whole.
    """
    names = {module: name for name, module in model.named_modules(remove_duplicate=False)}
    counts: dict[str, int] = {}
    stack: list[RecordedCall] = []
    done: list[RecordedCall] = []

    def keep(value: Any, name: str, cls: str) -> Any:
        return _to_host(value) if not sample or (full is not None and full(name, cls)) else _sampled(value, sample)

    def before(module: Any, args: tuple, kwargs: dict) -> None:
        name, cls = names.get(module, type(module).__name__), type(module).__name__
        index = counts[name] = counts.get(name, -1) + 1
        parent = stack[-1].key if stack else None
        stack.append(RecordedCall(name, cls, index, len(stack), parent, keep(args, name, cls), keep(kwargs, name, cls)))

    def after(module: Any, args: tuple, kwargs: dict, output: Any) -> None:
        if stack:
            call = stack.pop()
            call.output = keep(output, call.name, call.cls)
            done.append(call)

    handles = []
    for module in dict.fromkeys(names):
        handles.append(module.register_forward_pre_hook(before, with_kwargs=True))
        handles.append(module.register_forward_hook(after, with_kwargs=True))
    try:
        run()
    finally:
        for handle in handles:
            handle.remove()
    return done


def replay(module: Any, call: RecordedCall, dtype: Any, device: Any, compiled_as: Target | None = None) -> Any:
    """``module`` alone on the target with ``call``'s inputs (cast, moved); its output on the host.

    With ``compiled_as`` (a compiled target), the module is compiled by that target's engine
    adapter with the target's options, as a trial prepares the target
    (:func:`bakeoff.target.execute.prepare`): a ``torch.compile`` backend that its library
    registers on import (``openvino``), or an engine that is no ``torch.compile`` backend at
    all (``onnxrt``, ``openvino_export``) runs here as it ran in the trial. What the engine
    changed in the process (log handlers, patches) is undone after the call.
    """
    import torch

    from bakeoff.target.engines import engine_for

    fn, compiled = module, None
    if compiled_as is not None and compiled_as.backend is not None:
        torch._dynamo.reset()  # a module compiled alone: no graph or guard of another run applies
        compiled = engine_for(compiled_as.backend).compile(module, compiled_as)
        fn = compiled.model
    try:
        with torch.no_grad():
            return _to_host(fn(*move_tensors(call.args, device, dtype), **move_tensors(call.kwargs, device, dtype)))
    finally:
        if compiled is not None:
            compiled.close()


def record_ops(module: Any, call: RecordedCall, dtype: Any, device: Any) -> list[tuple[str, Any]]:
    """``module`` alone, eagerly, on ``call``'s inputs (cast to ``dtype``, moved to ``device``),
    under a dispatch mode that keeps every ATen op's name and outputs (on the host), in order."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from bakeoff.target.lazy_dynamo import lazy_dynamo

    ops: list[tuple[str, Any]] = []

    @lazy_dynamo
    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            out = func(*args, **(kwargs or {}))
            ops.append((str(func.overloadpacket.__name__), _to_host(out)))
            return out

    args, kwargs = move_tensors(call.args, device, dtype), move_tensors(call.kwargs, device, dtype)
    with torch.no_grad(), Recorder():
        module(*args, **kwargs)
    return ops
