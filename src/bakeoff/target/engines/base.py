"""What an engine adapter is: a backend or engine that needs more than ``torch.compile(backend=name)``.

An :class:`Engine` says what it requires (modules, a device, how to get them), which target
options it takes, how it compiles a model (a :class:`Compiled`: the callable plus the compile
counter, summary, signals and clean-up a prepared target needs), which placement probe sees
its device, and what it cannot do (``inference_only``, ``fixed_signature``). Spec parsing,
detection and execution ask the registry (:mod:`bakeoff.target.engines`) instead of spelling
backend names. Heavy imports happen inside methods: loading an adapter must stay cheap,
because spec parsing loads them.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from bakeoff.target.spec import Target

__all__ = [
    "DYNAMIC",
    "FULLGRAPH",
    "Compiled",
    "DynamoBackend",
    "Engine",
    "Option",
    "Probe",
    "compile_with_dynamo",
    "dynamo_options",
    "importable",
]


def importable(module: str) -> bool:
    """Whether ``module`` can be found, without importing it (a blocked or broken entry counts as not)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


@dataclass(frozen=True)
class Option:
    """A target option that only the engines declaring it take (the others refuse it).

    Attributes:
        name: the key in the target spec; it sets the :class:`Target` field of that name, so an
            engine can declare only options the spec already has (``mode``, ``precision``,
            ``dynamic``, ``fullgraph``).
        refusal: completes "option 'NAME' in target 'SPEC' ..." when the target's backend does
            not take it; ``{takers}`` are the names of the engines that do, ``{backend!r}`` the
            target's backend.
        hint: what to do instead (same fields).
        values: the accepted values (None: the spec parses it, e.g. booleans).
        what: how an unknown value is named ("unknown {what} ...").
        casefold: values are matched and stored in lower case.
    """

    name: str
    refusal: str
    hint: str
    values: tuple[str, ...] | None = None
    what: str = ""
    casefold: bool = False

    def refused(self, backend: str, takers: list[str]) -> tuple[str, str]:
        """The refusal and hint for ``backend``, given the names of the engines that take the option."""
        fields = {"takers": ", ".join(takers), "first": takers[0] if takers else "", "backend": backend}
        return self.refusal.format(**fields), self.hint.format(**fields)


_EXPORT_REFUSAL = (
    "applies to torch.compile backends, not to the export engine {backend!r} (it compiles once per input shape)"
)
#: ``torch.compile(dynamic=...)`` and ``torch.compile(fullgraph=...)``: what dynamo backends take.
DYNAMIC = Option("dynamic", _EXPORT_REFUSAL, "drop dynamic=")
FULLGRAPH = Option("fullgraph", _EXPORT_REFUSAL, "drop fullgraph=")


class Probe(Protocol):
    """Brackets one forward pass and reports what a backend ran on the host."""

    def begin(self) -> None: ...

    def end(self) -> tuple[dict[str, int], dict[str, Any]]:
        """``(fallback_ops, signals)`` for the work since :meth:`begin`."""
        ...


@dataclass
class Compiled:
    """A model compiled by an engine, with what :class:`~bakeoff.target.execute.Prepared` needs.

    Attributes:
        model: the callable that replaces the model.
        compile_events: a counter that grows with each compilation.
        compile_summary: the compilation audit's findings so far.
        backend_signals: ``(fallback_ops, signals)`` from the backend's own reports, or None.
        uses_dynamo: the model runs under ``torch.compile`` (dynamo's stances apply).
        close: undoes process-wide changes the engine made (log handlers, patches).
    """

    model: Any
    compile_events: Callable[[], int]
    compile_summary: Callable[[], dict[str, Any]]
    backend_signals: Callable[[], tuple[dict[str, int], dict[str, Any]]] | None = None
    uses_dynamo: bool = False
    close: Callable[[], None] = field(default=lambda: None)


def dynamo_options(target: Target, backend: Any = None, options: Any = None) -> dict[str, Any]:
    """The keyword arguments of ``torch.compile`` for ``target``: its backend, ``fullgraph``,
    and ``dynamic`` and ``mode`` where the target sets them.

    Args:
        backend: what to hand ``torch.compile`` as its backend (default: the target's backend name).
        options: the backend's own ``options=`` (None: none).
    """
    kwargs: dict[str, Any] = {"backend": backend or target.backend, "fullgraph": target.fullgraph}
    if target.dynamic is not None:
        kwargs["dynamic"] = target.dynamic
    if target.mode is not None:
        kwargs["mode"] = target.mode
    if options is not None:
        kwargs["options"] = options
    return kwargs


def compile_with_dynamo(model: Any, target: Target, backend: Any = None, options: Any = None) -> Compiled:
    """``torch.compile`` with the target's compile options (:func:`dynamo_options`) and a compile watch."""
    import torch

    from bakeoff.target.dynamo import CompileWatch

    kwargs = dynamo_options(target, backend, options)
    watch = CompileWatch()
    return Compiled(
        model=torch.compile(model, **kwargs),
        compile_events=watch.events,
        compile_summary=watch.summary,
        uses_dynamo=True,
        close=watch.close,
    )


class Engine:
    """One backend or engine. Subclass it (or :class:`DynamoBackend`) and set the class attributes.

    Attributes:
        name: the ``+BACKEND`` name in target specs.
        modules: modules that must be importable for it to run.
        device: the device type it needs, or None for any.
        install: how to get what is missing (a module or the device).
        options: the :class:`Option` s it takes.
        dynamo_backend: ``name`` is a ``torch.compile`` backend registered with dynamo
            (detection checks that registration, importing ``modules`` to register it).
        inference_only: it cannot train (no backward pass).
        fixed_signature: it runs one exported input signature per compilation (no KV cache,
            no dynamic shapes).
        detail: what ``bakeoff targets`` says when it is available (not for dynamo backends).
        in_demo: ``bakeoff demo`` runs it on the CPU when it is available there.
    """

    name: str = ""
    modules: tuple[str, ...] = ()
    device: str | None = None
    install: str = ""
    options: tuple[Option, ...] = ()
    dynamo_backend: bool = False
    inference_only: bool = False
    fixed_signature: bool = False
    detail: str = "bakeoff engine"
    in_demo: bool = False

    def takes(self, option: str) -> bool:
        return any(o.name == option for o in self.options)

    def status(self, device: str | None) -> str | None:
        """Why it cannot run here (on ``device``, if given), or None. Dynamo backends are
        checked by :func:`bakeoff.target.detect.backend_status` instead."""
        for module in self.modules:
            if not importable(module):
                return f"backend '{self.name}' needs {module} ({self.install})"
        if self.device is not None and device is not None and device != self.device:
            return f"backend '{self.name}' runs on {self.device}, not {device}"
        return None

    def compile(self, model: Any, target: Target) -> Compiled:
        raise NotImplementedError

    def probe(self, target: Target) -> Probe | None:
        """A placement probe for ``target``. Asked of every engine whatever the target's
        backend, because a device's own counters see eager work too; None: none."""
        return None


class DynamoBackend(Engine):
    """A ``torch.compile`` backend of the same name: what an unlisted backend name gets."""

    options = (DYNAMIC, FULLGRAPH)
    dynamo_backend = True

    def __init__(self, name: str | None = None) -> None:
        if name is not None:
            self.name = name

    def compile(self, model: Any, target: Target) -> Compiled:
        if target.precision is not None and not self.takes("precision"):
            raise ValueError(f"backend '{target.backend}' has no precision option")
        return compile_with_dynamo(model, target)
