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

The root calls, by default (:data:`ROOTS`, ``@roots``): a call of a module made while no other
module call is active in the thread (the model the script calls, a loss module it calls beside
it) is a root call. With no ``--capture-modules``, every run records the root calls at a small
budget (:data:`ROOT_CALLS` calls of each root, :data:`ROOT_BYTES` in all), so a fault that moves
the model's outputs but not what the script prints is caught without asking. ``none``
(:data:`NONE`) records no module call. ``@roots`` can be given beside other patterns.

The cap: at most :data:`MAX_CALLS_PER_MODULE` calls of each module name and
:data:`MAX_MODULE_BYTES` of tensors in all are recorded (the roots' budget when only the
roots are asked for: :func:`budget`), so a training loop over a large model does not keep
gigabytes of activations; the calls past it are counted (:attr:`ModuleCalls.capped`). The
reference and the targets make the same calls in the same order, so they stop at the same call
and the comparison stays call by call.

What it cannot see: module calls inside a ``torch.compile``'d graph (their Python does not run;
a compiled target's root calls are recorded by :mod:`bakeoff.script.compiled` instead), calls in
child processes, and work a model does outside ``forward`` (a ``generate`` loop's sampling).
A module whose forward raises records nothing for that call. A root's output larger than the
budget is not kept at all (the note says how many calls were not).
"""

from __future__ import annotations

import fnmatch
import sys
import threading
import weakref
from collections import Counter
from collections.abc import Sequence
from typing import Any

from bakeoff.script.capture import Captures

__all__ = [
    "DEFAULT",
    "HOOKS_WARNING",
    "MAX_CALLS_PER_MODULE",
    "MAX_MODULE_BYTES",
    "NONE",
    "PREFIX",
    "ROOTS",
    "ROOT_BYTES",
    "ROOT_CALLS",
    "ModuleCalls",
    "ModuleNames",
    "budget",
    "check_patterns",
    "matches",
]

#: The prefix of a module capture's name: ``module:Net.fc2``.
PREFIX = "module:"
#: Calls recorded per module name; later calls are counted, not kept.
MAX_CALLS_PER_MODULE = 8
#: Bytes of tensors recorded over all module captures of a run; past it nothing more is kept.
MAX_MODULE_BYTES = 256 * 2**20
#: The pattern of the root module calls (see the module docstring).
ROOTS = "@roots"
#: The pattern that records no module call.
NONE = "none"
#: What is recorded when no pattern is given: the root calls, at their budget.
DEFAULT = (ROOTS,)
#: Calls recorded per root when only the roots are asked for.
ROOT_CALLS = 4
#: Bytes of tensors recorded over the root calls when only the roots are asked for.
ROOT_BYTES = 32 * 2**20
#: PyTorch's warning at each call of a compiled module while global module hooks are installed:
#: the hooks are bakeoff's (they fire for the wrapper too, as they should), not the script's.
HOOKS_WARNING = r"Using `torch.compile\(module\)` when there are global hooks"


def check_patterns(patterns: Sequence[str]) -> tuple[str, str] | None:
    """The first unusable ``--capture-modules`` pattern and why, or None."""
    for pattern in patterns:
        if not isinstance(pattern, str) or not pattern.strip():
            return pattern, "an empty pattern matches no module: give a name or a glob, e.g. '*.mlp' or Linear"
        if pattern != pattern.strip():
            return pattern, f"{pattern!r} has leading or trailing spaces"
        if pattern == NONE and len(patterns) > 1:
            return pattern, f"{NONE!r} records no module call: give it alone"
    return None


def budget(patterns: Sequence[str]) -> tuple[int, int]:
    """The calls per module and the bytes in all recorded for ``patterns``."""
    if tuple(dict.fromkeys(patterns)) == DEFAULT:
        return ROOT_CALLS, ROOT_BYTES
    return MAX_CALLS_PER_MODULE, MAX_MODULE_BYTES


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
    try:  # at least 4 bytes an element: a run under autocast stops at the same call as one without
        return int(value.numel() * max(value.element_size(), 4))
    except Exception:
        return 0


class ModuleCalls:
    """Records the outputs of the module calls that match ``patterns`` into ``captures``.

    :meth:`install` adds the global hooks, :meth:`uninstall` removes them. :meth:`enter` and
    :meth:`record` are what the hooks call; a caller that runs a module outside them (a compiled
    root call) calls them itself. Never raises into the script: a value that cannot be kept is
    counted in :attr:`errors`.
    """

    def __init__(
        self,
        patterns: Sequence[str],
        captures: Captures,
        names: ModuleNames | None = None,
        max_calls: int | None = None,
        max_bytes: int | None = None,
    ) -> None:
        self.patterns = tuple(dict.fromkeys(p for p in patterns if p != NONE))
        self.roots = ROOTS in self.patterns
        self.names = names or ModuleNames()
        calls, size = budget(self.patterns)
        self.max_calls = calls if max_calls is None else max_calls
        self.max_bytes = size if max_bytes is None else max_bytes
        self._captures = captures
        self._named: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # module -> (capture name, matched)
        self._lock = threading.Lock()
        self._local = threading.local()  # the capture names of the calls under way, outermost first
        self._handles: list[Any] = []
        self._filter: Any = None
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
        """The patterns no called module matched (the roots' is not one: a script may call none)."""
        return tuple(p for p in self.patterns if p not in self.matched and p != ROOTS)

    def install(self) -> None:
        import warnings

        import torch
        from torch.nn.modules import module as hooks

        self._compiling = torch.compiler.is_compiling
        self._graph_module = torch.fx.GraphModule
        self._handles = [
            hooks.register_module_forward_pre_hook(self._pre),
            hooks.register_module_forward_hook(self._post, always_call=True),  # the stack stays whole on a raise
        ]
        warnings.filterwarnings("ignore", message=HOOKS_WARNING)
        self._filter = warnings.filters[0]

    def uninstall(self) -> None:
        import warnings

        while self._handles:
            self._handles.pop().remove()
        if self._filter in warnings.filters:
            warnings.filters.remove(self._filter)
        self._filter = None

    def _stack(self) -> list[str]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def _pre(self, module: Any, _args: Any) -> None:
        if not self._compiling():  # inside a graph dynamo is tracing: its Python does not run later
            stack = self._stack()
            stack.append(self.enter(module, root=not stack))

    def _post(self, module: Any, _args: Any, output: Any) -> None:
        if self._compiling():
            return
        stack = self._stack()
        name = stack.pop() if stack else ""
        if name and not (output is None and sys.exc_info()[0] is not None):  # a raise: nothing to record
            self.record(name, output)

    def enter(self, module: Any, root: bool) -> str:
        """The capture name of this call of ``module`` (a ``root`` call or not), or '' when it is
        not recorded. Whether its name matches a pattern is decided once per module."""
        try:
            known = self._named.get(module)
        except TypeError:
            return ""
        if known is None:
            if isinstance(module, self._graph_module):
                known = ("", False)
            else:
                name = self.names.name(module)
                hit = matches(self.patterns, name, type(module).__name__)
                with self._lock:
                    self.matched.update(hit)
                known = (PREFIX + name, bool(hit))
            try:
                self._named[module] = known
            except TypeError:
                pass
        name, hit = known
        if name and not hit and root and self.roots:
            with self._lock:
                self.matched.add(ROOTS)
            return name
        return name if hit else ""

    def record(self, name: str, output: Any) -> None:
        """Record ``output`` as a call of ``name`` when the cap allows."""
        try:
            value = _capturable(output)
            size = _nbytes(value)
        except Exception as exc:
            self.errors.setdefault(name, f"{type(exc).__name__}: {exc}")
            return
        with self._lock:
            calls = self._calls[name]
            self._calls[name] += 1
            if self._full or calls >= self.max_calls or self._bytes + size > self.max_bytes:
                self._full = self._full or calls < self.max_calls  # the byte cap ends all recording
                self.capped += 1
                return
            self._bytes += size
        try:
            self._captures.add(name, value)
        except Exception as exc:  # never into the script: the result says so
            with self._lock:
                self.errors.setdefault(name, f"{type(exc).__name__}: {exc}")
