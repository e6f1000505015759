"""The engine registry: one adapter per backend or engine that needs more than ``torch.compile(backend=name)``.

Spec parsing, detection and execution ask this registry instead of spelling backend names.
The built-in adapters are listed in :data:`BUILTIN`; third parties add theirs through the
``bakeoff.engines`` entry point group, each entry naming an :class:`Engine` subclass or
instance::

    [project.entry-points."bakeoff.engines"]
    mine = "my_package.bakeoff_engine:Mine"

An entry that fails to load, is not an engine, or reuses a name already taken (a built-in's,
or that of a backend ``torch.compile`` knows, such as ``aot_eager``, unless the same package
registers that backend) is left out with one line on stderr; it never replaces a built-in or
another package's ``torch.compile`` backend. A backend name no adapter claims is a plain
``torch.compile`` backend (:class:`DynamoBackend`).
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Iterator, Mapping
from importlib.metadata import EntryPoint, EntryPoints, entry_points
from typing import Any

from bakeoff.entrypoints import load_plugins
from bakeoff.target.engines.base import (
    DYNAMIC,
    FULLGRAPH,
    Compiled,
    DynamoBackend,
    Engine,
    Option,
    Probe,
    compile_with_dynamo,
    importable,
)
from bakeoff.target.spec import Target

__all__ = [
    "BUILTIN",
    "DYNAMIC",
    "ENGINES",
    "ENTRY_POINT_GROUP",
    "FULLGRAPH",
    "Compiled",
    "DynamoBackend",
    "Engine",
    "Option",
    "Probe",
    "compile_with_dynamo",
    "demo_backends",
    "device_hint",
    "engine_for",
    "engine_status",
    "importable",
    "make_engine",
    "option",
    "probe_for",
    "registry",
    "takers",
]

ENTRY_POINT_GROUP = "bakeoff.engines"

#: The built-in adapters, as ``module:class`` under this package, in the order errors list them.
BUILTIN = (
    "inductor:Inductor",
    "openvino:OpenVINO",
    "openvino_export:OpenVINOExport",
    "onnxrt:OnnxRuntime",
    "plain:OpenXLA",
    "plain:OpenXLAEval",
    "plain:TVM",
    "neuron:Neuron",
    "plain:CudaGraphs",
    "emu:Emu",
)


@functools.cache
def registry() -> dict[str, Engine]:
    """Every adapter by name: the built-ins, then those of the ``bakeoff.engines`` entry points.

    Read once per process; ``registry.cache_clear()`` reads the entry points again.
    """
    engines: dict[str, Engine] = {}
    for entry in BUILTIN:
        module, attr = entry.split(":")
        engine = getattr(importlib.import_module(f"{__name__}.{module}"), attr)()
        engines[engine.name] = engine
    taken = set(engines)
    plugins = entry_points(group=ENTRY_POINT_GROUP)
    if plugins:  # only then: without plugins, parsing a spec imports no torch
        taken |= _dynamo_backends(plugins)
    for engine in load_plugins(ENTRY_POINT_GROUP, Engine, "engine", taken):
        engines[engine.name] = engine
    return engines


def _provider(entry: EntryPoint) -> str | None:
    return entry.dist.metadata.get("Name") if entry.dist is not None else None


def _dynamo_backends(plugins: EntryPoints) -> set[str]:
    """The backend names ``torch.compile`` knows (imports torch): a plugin engine taking one would
    silently replace that backend for every target naming it. A package may still adapt a
    backend it registers itself (through the ``torch_dynamo_backends`` entry points)."""
    from torch._dynamo import list_backends

    providers = {_provider(entry) for entry in plugins} - {None}
    own = {entry.name for entry in entry_points(group="torch_dynamo_backends") if _provider(entry) in providers}
    return set(list_backends(exclude_tags=())) - own


def engine_for(backend: str) -> Engine:
    """The adapter of ``backend``; a plain ``torch.compile`` backend when none claims the name."""
    return registry().get(backend) or DynamoBackend(backend)


def takers(name: str) -> list[str]:
    """The engines that take the target option ``name``, in registry order."""
    return [engine.name for engine in registry().values() if engine.takes(name)]


def option(name: str) -> Option | None:
    """The declaration of the target option ``name`` (the first engine's that takes it)."""
    for engine in registry().values():
        for declared in engine.options:
            if declared.name == name:
                return declared
    return None


def probe_for(target: Target) -> Probe | None:
    """The placement probe of the first engine that has one for ``target``.

    Every built-in engine is asked (a device's own counters see eager work too); a plugin
    engine only about its own backend or its own device, and one whose probe fails gives none:
    a third party's probe must not take over, or break, the placement of other targets.
    """
    for name, engine in registry().items():
        if not _builtin(name):
            if target.backend != name and (not engine.device or target.device != engine.device):
                continue
            try:
                probe = engine.probe(target)
            except Exception as exc:
                print(f"bakeoff: engine plugin {name!r} probe failed: {type(exc).__name__}: {exc}", file=sys.stderr)
                continue
        else:
            probe = engine.probe(target)
        if probe is not None:
            return probe
    return None


def _builtin(name: str) -> bool:
    """Whether the engine registered as ``name`` is one of bakeoff's own adapters."""
    return type(registry()[name]).__module__.startswith(f"{__name__}.")


def demo_backends() -> list[str]:
    """The engines ``bakeoff demo`` runs on the CPU when they are available there, in registry order."""
    return [engine.name for engine in registry().values() if engine.in_demo]


def device_hint(device: str) -> str | None:
    """How to get ``device``, from the first engine that needs it, or None."""
    return next((e.install for e in registry().values() if e.device == device and e.install), None)


class _Limited(Mapping[str, Engine]):
    """The engines that cannot run every scenario: inference only, or one input signature."""

    def _engines(self) -> dict[str, Engine]:
        return {n: e for n, e in registry().items() if e.inference_only or e.fixed_signature}

    def __getitem__(self, name: str) -> Engine:
        return self._engines()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._engines())

    def __len__(self) -> int:
        return len(self._engines())


#: The export engines (inference only, one input signature); ask an engine's
#: ``inference_only`` and ``fixed_signature`` instead.
ENGINES: Mapping[str, Engine] = _Limited()


def engine_status(name: str, device: str | None) -> str | None:
    """Why the engine cannot run here, or None."""
    return engine_for(name).status(device)


def make_engine(model: Any, target: Target) -> Any:
    """The callable that runs ``model`` on ``target``'s engine."""
    return engine_for(target.backend or "").compile(model, target).model
