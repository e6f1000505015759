"""The outputs of a script's module calls, by qualified name: ``--capture-modules PATTERN``.

Two global hooks (``torch.nn.modules.module.register_module_forward_pre_hook`` and
``register_module_forward_hook``) watch every ``nn.Module`` call of the script. A module gets
its qualified name the first time it is called: when it has none yet, it and its whole subtree
(``named_modules()``) are named with its class name as the root, so the model's first call
names ``LlamaForCausalLM``, ``LlamaForCausalLM.model.layers.0.mlp`` and so on. A module keeps
the first name it got (a submodule the script called on its own before its parent was ever
called is named after its own class; ``torch.compile(model)``'s wrapper has the model's name,
and the graphs a compiler runs, ``torch.fx.GraphModule`` s, are not the script's). The names
depend on the script's code only, never on object ids or the device, so they are the same in
the reference run and in each target's.

Each call of a module whose qualified name or class name matches a pattern (:func:`fnmatch.fnmatchcase`:
``*.mlp``, ``Linear``, ``Net.fc2``) is recorded as a capture named ``module:QUALNAME``
(:data:`PREFIX`), call by call, through :meth:`~bakeoff.script.capture.Captures.add`: its tensors
are copied to the host (the placement audit counts that copy as bakeoff's, not the script's).
Values a capture cannot hold (a key-value cache object in a model's output) are kept as the
string ``<TypeName>``, compared exactly.

The cap: at most :data:`MAX_CALLS_PER_MODULE` calls of each module name and
:data:`MAX_MODULE_BYTES` of tensors in all are recorded, so a training loop over a large model
does not keep gigabytes of activations; the calls past it are counted (:attr:`ModuleCalls.capped`).
The reference and the targets make the same calls in the same order, so they stop at the same
call and the comparison stays call by call.

What it cannot see: module calls inside a ``torch.compile``'d graph (their Python does not run;
a compiled target's root calls are recorded by :mod:`bakeoff.script.compiled` instead), calls in
child processes, and work a model does outside ``forward`` (a ``generate`` loop's sampling).
A module whose forward raises records nothing for that call.
"""

from __future__ import annotations

import fnmatch
import threading
import weakref
from collections import Counter
from collections.abc import Sequence
from typing import Any

from bakeoff.script.capture import Captures

__all__ = [
    "MAX_CALLS_PER_MODULE",
    "MAX_MODULE_BYTES",
    "PREFIX",
    "ModuleCalls",
    "ModuleNames",
    "check_pattern",
    "matches",
]

#: The prefix of a module capture's name: ``module:Net.fc2``.
PREFIX = "module:"
#: Calls recorded per module name; later calls are counted, not kept.
MAX_CALLS_PER_MODULE = 8
#: Bytes of tensors recorded over all module captures of a run; past it nothing more is kept.
MAX_MODULE_BYTES = 256 * 2**20


def check_pattern(pattern: str) -> str | None:
    """Why ``pattern`` is not a usable ``--capture-modules`` pattern, or None."""
    if not isinstance(pattern, str) or not pattern.strip():
        return "an empty pattern matches no module: give a name or a glob, e.g. '*.mlp' or Linear"
    if pattern != pattern.strip():
        return f"{pattern!r} has leading or trailing spaces"
    return None


def matches(patterns: Sequence[str], name: str, class_name: str) -> list[str]:
    """The patterns that match a module's qualified name or its class name."""
    return [p for p in patterns if fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(class_name, p)]


class ModuleNames:
    """The qualified name of each module, given when it is first asked for (see the module
    docstring): a module without one names its whole subtree after its own class."""

    def __init__(self) -> None:
        self._names: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def name(self, module: Any) -> str:
        inner = getattr(module, "_orig_mod", None)
        if inner is not None and type(module).__name__ == "OptimizedModule":  # torch.compile(model): the model
            return self.name(inner)
        try:
            known = self._names.get(module)
        except TypeError:  # not weakly referenceable or not hashable: its class is its name
            return type(module).__name__
        if known is not None:
            return known
        root = type(module).__name__
        with self._lock:
            for path, child in module.named_modules():
                try:
                    if child not in self._names:
                        self._names[child] = f"{root}.{path}" if path else root
                except TypeError:
                    continue
            return self._names.get(module, root)


def _capturable(value: Any) -> Any:
    """``value`` with every leaf a capture cannot hold replaced by ``<TypeName>``."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [_capturable(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_capturable(v) for v in value)
    if isinstance(value, dict):
        return {
            k if isinstance(k, (str, int)) and not isinstance(k, bool) else repr(k): _capturable(v)
            for k, v in value.items()
        }
    if type(value).__module__.startswith("torch") and hasattr(value, "detach"):
        return value
    return f"<{type(value).__name__}>"


def _nbytes(value: Any) -> int:
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    try:
        return int(value.numel() * value.element_size())
    except Exception:
        return 0


class ModuleCalls:
    """Records the outputs of the module calls that match ``patterns`` into ``captures``.

    :meth:`install` adds the global hooks, :meth:`uninstall` removes them. :meth:`enter` and
    :meth:`leave` are what the hooks call; a caller that runs a module outside them (a compiled
    root call) calls them itself. Never raises into the script: a value that cannot be kept is
    counted in :attr:`errors`.
    """

    def __init__(
        self,
        patterns: Sequence[str],
        captures: Captures,
        names: ModuleNames | None = None,
        max_calls: int = MAX_CALLS_PER_MODULE,
        max_bytes: int = MAX_MODULE_BYTES,
    ) -> None:
        self.patterns = tuple(dict.fromkeys(patterns))
        self.names = names or ModuleNames()
        self._captures = captures
        self._max_calls = max_calls
        self._max_bytes = max_bytes
        self._wanted: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # module -> capture name or ""
        self._lock = threading.Lock()
        self._handles: list[Any] = []
        self._compiling: Any = lambda: False
        self._graph_module: Any = ()
        self._calls: Counter = Counter()
        self._bytes = 0
        self._full = False
        self.capped = 0
        self.matched: set[str] = set()
        self.errors: dict[str, str] = {}

    @property
    def unmatched(self) -> tuple[str, ...]:
        """The patterns no called module matched."""
        return tuple(p for p in self.patterns if p not in self.matched)

    def install(self) -> None:
        import torch
        from torch.nn.modules import module as hooks

        self._compiling = torch.compiler.is_compiling
        self._graph_module = torch.fx.GraphModule
        self._handles = [
            hooks.register_module_forward_pre_hook(self._pre),
            hooks.register_module_forward_hook(self._post),
        ]

    def uninstall(self) -> None:
        while self._handles:
            self._handles.pop().remove()

    def _pre(self, module: Any, _args: Any) -> None:
        if not self._compiling():  # inside a graph dynamo is tracing: its Python does not run later
            self.enter(module)

    def _post(self, module: Any, _args: Any, output: Any) -> None:
        if not self._compiling():
            self.leave(module, output)

    def enter(self, module: Any) -> str:
        """Name ``module`` and decide, once, whether its calls are recorded; its capture name or ''."""
        try:
            wanted = self._wanted.get(module)
        except TypeError:
            return ""
        if wanted is not None:
            return wanted
        if isinstance(module, self._graph_module):
            return ""
        name = self.names.name(module)
        hit = matches(self.patterns, name, type(module).__name__)
        wanted = PREFIX + name if hit else ""
        with self._lock:
            self.matched.update(hit)
        try:
            self._wanted[module] = wanted
        except TypeError:
            pass
        return wanted

    def leave(self, module: Any, output: Any) -> None:
        """Record ``output`` when ``module`` is wanted and the cap allows."""
        try:
            name = self._wanted.get(module)
        except TypeError:
            return
        if name:
            self.record(name, output)

    def record(self, name: str, output: Any) -> None:
        try:
            value = _capturable(output)
            size = _nbytes(value)
        except Exception as exc:
            self.errors.setdefault(name, f"{type(exc).__name__}: {exc}")
            return
        with self._lock:
            calls = self._calls[name]
            self._calls[name] += 1
            if self._full or calls >= self._max_calls or self._bytes + size > self._max_bytes:
                self._full = self._full or calls < self._max_calls  # the byte cap ends all recording
                self.capped += 1
                return
            self._bytes += size
        try:
            self._captures.add(name, value)
        except Exception as exc:  # never into the script: the result says so
            with self._lock:
                self.errors.setdefault(name, f"{type(exc).__name__}: {exc}")
