"""A script's root module calls, compiled with a target's ``torch.compile`` backend: ``--compile``.

A target such as ``cpu+inductor`` or ``emu+aot_eager?dynamic=true`` runs the script with its
device remapped as for the plain device, and with every *root* module call compiled: a call of
an ``nn.Module`` made while no other module call is active in the thread (the model the script
calls, a loss module it calls beside it). :class:`RootCompiler` replaces
``torch.nn.Module.__call__`` for the run; a root module's first call makes its
``torch.compile(module, ...)`` with the target's options
(:func:`~bakeoff.target.engines.base.dynamo_options`: the backend, ``dynamic``, ``mode``,
``fullgraph``), and each of its root calls runs through that compiled module instead. The script
keeps its own object (its state dict, its hooks, its ``.to()``). Each compiled call is a rewrite
in the ledger (``torch.compile(Net)``, its count, the script's line that made the first call).
The reference stays eager.

Why not ``module.compile()``, which compiles in place: it compiles ``Module._call_impl``, a
frame of PyTorch's own that dynamo does not trace, so a root that is one of PyTorch's modules
(``nn.Sequential``, ``nn.Linear``) would run eagerly while the ledger said compiled. The compiled
wrapper is kept for the life of the run (with the module it wraps).

Not compiled by it: the functions the script calls outside modules (a sampling loop, a loss
computed by ``torch.nn.functional`` at the top level), the modules inside a root call (they are
traced into its graph), a module the script compiled itself (``torch.compile(model)``,
``model.compile()``), a module whose class defines its own ``__call__``, and a ``GraphModule``
called as a root (a compiled function's graph, run by its backend outside any module, must not be
compiled again; a model the script traced or exported itself is one too, and runs as it is).

The script's own compiles (:class:`ScriptCompiles`, in every run): each ``torch.compile`` the
script makes (``torch.compile(model)``, ``@torch.compile``, ``model.compile()``) is counted in the
ledger under ``torch.compile (the script's)`` with the backend it asked for, so every row says
whose compile ran: an eager row or the reference whose script compiles is not eager for that
code. On a compiled target it is given the target's backend and options instead (the script's
``mode`` and ``options`` are kept only when it asked for the target's backend already), so a row
labelled ``cpu+aot_eager`` never runs the script's inductor. Under dynamo's
tracing the replacement steps aside (:func:`torch.compiler.is_compiling`), so it adds nothing to
the graphs; graph breaks are the model's own.

``--capture-modules`` on a compiled target records root calls only (here, outside the graph):
the modules inside a compiled graph run no Python, so their outputs cannot be seen without
breaking the graph.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from bakeoff.script.ledger import Recorder
from bakeoff.script.modules import HOOKS_WARNING, ModuleCalls
from bakeoff.target.engines.base import dynamo_options
from bakeoff.target.spec import Target

__all__ = ["SCRIPT_COMPILE", "RootCompiler", "ScriptCompiles"]

#: The ledger's name for the script's own ``torch.compile`` calls.
SCRIPT_COMPILE = "torch.compile (the script's)"


class RootCompiler:
    """Compiles the root module calls of a run with ``target``'s backend (see the module
    docstring); :attr:`recorder` counts them for the ledger. With ``modules``, it records the
    outputs of the root calls that match (their hooks are not installed on a compiled target)."""

    def __init__(self, target: Target, modules: ModuleCalls | None = None) -> None:
        self.options = dynamo_options(target)
        self.recorder = Recorder()
        self._reason = ", ".join(f"{key}={value}" for key, value in self.options.items())
        self._modules = modules
        self._local = threading.local()
        self._compiled: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # module -> compiled
        self._original: Any = None
        self._filter: Any = None
        self._compile: Any = None
        self._isolated: dict[str, Any] = {}

    def install(self) -> None:
        import warnings

        import torch
        from torch._dynamo.eval_frame import OptimizedModule
        from torch.fx import GraphModule

        self._compile = torch.compile  # before the script's compiles are rewritten: ours are not the script's
        self._isolated = _isolated()
        original = self._original = torch.nn.Module.__call__
        local, root = self._local, self._root
        compiling = torch.compiler.is_compiling

        def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
            if compiling():  # dynamo traces the model: nothing of ours goes into its graph
                return original(module, *args, **kwargs)
            depth = getattr(local, "depth", 0)
            if depth or isinstance(module, GraphModule):  # a graph module runs as it is
                local.depth = depth + 1
                try:
                    return original(module, *args, **kwargs)
                finally:
                    local.depth = depth
            # the script's own compiled module is a root too, recorded as the eager run records it
            return root(module, args, kwargs, not isinstance(module, OptimizedModule))

        __call__.__wrapped__ = original  # type: ignore[attr-defined]
        torch.nn.Module.__call__ = __call__  # type: ignore[method-assign]
        # the audit's global hooks fire for the wrapper too, as they should: not the script's warning
        warnings.filterwarnings("ignore", message=HOOKS_WARNING)
        self._filter = warnings.filters[0]

    def uninstall(self) -> None:
        if self._original is not None:
            import warnings

            import torch

            torch.nn.Module.__call__ = self._original  # type: ignore[method-assign]
            self._original = None
            if self._filter in warnings.filters:
                warnings.filters.remove(self._filter)

    def _root(self, module: Any, args: tuple, kwargs: dict, compile: bool) -> Any:
        try:
            compiled = self._compiled.get(module) if compile else None
        except TypeError:  # not weakly referenceable: it runs as written
            compiled = None
        else:
            # the script's own compiles (model.compile(), torch.compile(model)) stay theirs
            if compile and compiled is None and getattr(module, "_compiled_call_impl", None) is None:
                # isolated: the model's and its loss's compiles share Module.__call__'s code, and
                # would otherwise count each other's entries as recompilations
                compiled = self._compiled[module] = self._compile(module, **self.options, **self._isolated)
        if compiled is not None:
            self.recorder.record(f"torch.compile({type(module).__name__})", self._reason)
        name = self._modules.enter(module, root=True) if self._modules is not None else ""
        self._local.depth = 1
        try:
            output = compiled(*args, **kwargs) if compiled is not None else self._original(module, *args, **kwargs)
        finally:
            self._local.depth = 0
        if name and self._modules is not None:
            self._modules.record(name, output)
        return output


def _isolated() -> dict[str, Any]:
    """``isolate_recompiles=True`` where this torch has it (2.13 does; older ones share entries)."""
    import inspect

    import torch

    return {"isolate_recompiles": True} if "isolate_recompiles" in inspect.signature(torch.compile).parameters else {}


def _backend_name(backend: Any) -> str:
    if backend is None:
        return "inductor"
    if isinstance(backend, str):
        return backend
    return str(getattr(backend, "__name__", None) or type(backend).__name__)


class ScriptCompiles:
    """Counts the script's own ``torch.compile`` calls in :attr:`recorder` (see the module
    docstring); with ``target`` (a compiled target), gives each the target's backend and options."""

    def __init__(self, target: Target | None = None) -> None:
        self.options = dynamo_options(target) if target is not None else None
        self.recorder = Recorder()
        self._original: Any = None

    def install(self) -> None:
        import functools

        import torch

        original = self._original = torch.compile
        options, record = self.options, self.recorder.record

        @functools.wraps(original)
        def compile(model: Any = None, **kwargs: Any) -> Any:
            if model is None:  # @torch.compile(...): the decorator it returns calls this again, with the function
                return original(model, **kwargs)
            asked = _backend_name(kwargs.get("backend"))
            if options is None:
                record(SCRIPT_COMPILE, f"backend {asked}: the script's own compile ran")
                return original(model, **kwargs)
            given = options["backend"]
            if asked != given:  # mode and options are the script's backend's, not the target's
                kwargs.pop("mode", None)
                kwargs.pop("options", None)
            elif "mode" in options:  # torch.compile takes a mode or options, not both: the target's mode
                kwargs.pop("options", None)
            kwargs.update(options, fullgraph=bool(options.get("fullgraph") or kwargs.get("fullgraph")))
            change = f"the script's backend {asked} -> the target's {given}" if asked != given else f"backend {given}"
            record(SCRIPT_COMPILE, f"{change}: the target's compile ran")
            return original(model, **kwargs)

        torch.compile = compile

    def uninstall(self) -> None:
        if self._original is not None:
            import torch

            torch.compile = self._original
            self._original = None
