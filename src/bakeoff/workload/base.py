"""The workload value every kind produces, its spec, and its fingerprint.

A workload is a model plus the exact inputs it is called with. Its *fingerprint* identifies
everything that determines the outputs: the architecture/config or source, the weights, the
input spec and seed, and the dtype. Results from different fingerprints are not comparable.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bakeoff.errors import SpecError, WorkloadError
from bakeoff.specsyntax import split_options

if TYPE_CHECKING:
    import torch

    from bakeoff.workload.training import TrainingRecipe

__all__ = ["KINDS", "BuiltWorkload", "WorkloadSpec", "fingerprint_of", "parse_workload", "preload_for"]

KINDS = {
    "arch": "arch:<model_type>[?layers=2&hidden=64&...] - tiny random-weight Hugging Face model",
    "hf": "hf:<directory or hub id> - a saved Hugging Face model (config + weights)",
    "py": "py:<module or file.py>:<function> - your own factory returning (model, inputs)",
}


@dataclass(frozen=True)
class WorkloadSpec:
    """A parsed workload spec such as ``arch:llama?layers=4``."""

    kind: str
    name: str
    options: Mapping[str, str] = field(default_factory=dict)

    @property
    def spec(self) -> str:
        query = "&".join(f"{k}={v}" for k, v in self.options.items())
        return f"{self.kind}:{self.name}" + (f"?{query}" if query else "")

    def __str__(self) -> str:
        return self.spec


def parse_workload(text: str) -> WorkloadSpec:
    """Parse ``KIND:NAME[?options]``; raise SpecError naming the valid forms otherwise."""
    head, options = split_options(text, "workload")
    kind, sep, name = head.partition(":")
    if not sep or kind not in KINDS or not name:
        forms = "; ".join(KINDS.values())
        raise SpecError(
            f"malformed workload {text!r}; expected one of: {forms}",
            hint="run `bakeoff workloads` for the architecture names",
        )
    return WorkloadSpec(kind=kind, name=name, options=options)


@dataclass
class BuiltWorkload:
    """A model ready to run, with its inputs and identity.

    Attributes:
        spec: the spec it was built from.
        model: the module, on the CPU, in eval mode.
        args: positional inputs.
        kwargs: keyword inputs.
        seed: the seed used for weights and inputs.
        details: JSON-able description (config summary, parameter count...).
        identity: JSON-able data that, with the weights and inputs, defines the fingerprint.
        self_placed: the workload put its model (and inputs) on the target device itself;
            bakeoff must not move them, and the placement audit checks what it did.
        make_inputs: builds ``(args, kwargs)`` for a ``(batch, seq)`` request shape, for input
            profiles; None when the workload has only its one example input.
        training: how it trains (batches and loss, :mod:`bakeoff.workload.training`); None:
            :meth:`training_recipe` falls back to the synthetic loss on its own input.
    """

    spec: WorkloadSpec
    model: torch.nn.Module
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    details: dict[str, Any] = field(default_factory=dict)
    identity: dict[str, Any] = field(default_factory=dict)
    self_placed: bool = False
    make_inputs: Callable[[int, int], tuple[tuple, dict]] | None = None
    training: TrainingRecipe | None = None
    _fingerprint: str | None = None

    @property
    def dtype(self) -> str:
        """Name of the dtype of the model's first floating parameter (``float32`` if none)."""
        for p in self.model.parameters():
            if p.is_floating_point():
                return str(p.dtype).removeprefix("torch.")
        return "float32"

    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = fingerprint_of(self)
        return self._fingerprint

    def __call__(
        self, model: torch.nn.Module | None = None, args: tuple | None = None, kwargs: dict | None = None
    ) -> Any:
        """Call ``model`` (default: the workload's own) on the inputs (default: its own)."""
        fn = self.model if model is None else model
        return fn(*(self.args if args is None else args), **(self.kwargs if kwargs is None else kwargs))

    def training_recipe(self) -> TrainingRecipe:
        """How this workload trains: its own recipe, else the synthetic loss on its one input."""
        from bakeoff.workload.training import TrainingRecipe, synthetic_loss

        if self.training is not None:
            return self.training
        return TrainingRecipe("synthetic", lambda step: (self.args, self.kwargs), synthetic_loss)

    def inputs_for(self, batch: int, seq: int) -> tuple[tuple, dict]:
        """Inputs of one request shape (raises WorkloadError if the workload cannot vary them)."""

        if self.make_inputs is None:
            raise WorkloadError(
                f"{self.spec} cannot build inputs of other shapes",
                hint="return (model, inputs, make_inputs) from your factory to use --profile",
            )
        import torch

        # a seed per shape: each shape's inputs are the same whichever process or order asks
        torch.manual_seed(self.seed * 1_000_003 + batch * 10_007 + seq)
        try:
            return self.make_inputs(batch, seq)
        except Exception as exc:
            raise WorkloadError(
                f"{self.spec} could not build inputs of shape {batch}x{seq}: {type(exc).__name__}: {exc}",
                hint="fix make_inputs for that shape, or leave it out of the profile",
            ) from exc

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec.spec,
            "kind": self.spec.kind,
            "fingerprint": self.fingerprint,
            "seed": self.seed,
            "dtype": self.dtype,
            "details": self.details,
        }


def _update_with_tensor(h: hashlib._Hash, name: str, t: torch.Tensor) -> None:
    import torch

    t = t.detach().to("cpu").contiguous()
    h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
    if t.numel():
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())


def _hash_inputs(h: hashlib._Hash, prefix: str, value: Any) -> None:
    import torch

    if isinstance(value, torch.Tensor):
        _update_with_tensor(h, prefix, value)
    elif isinstance(value, Mapping):
        for key in sorted(value, key=str):
            _hash_inputs(h, f"{prefix}.{key}", value[key])
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _hash_inputs(h, f"{prefix}.{i}", item)
    else:
        h.update(f"{prefix}={value!r}|".encode())


def fingerprint_of(workload: BuiltWorkload) -> str:
    """SHA-256 over identity, weights (names, dtypes, shapes, bytes), inputs, seed and dtype.

    Hashing the weights costs one pass over them (about 1 s per GB); it is what makes a
    changed checkpoint, or a factory that does not seed its initialisation, visible.
    """
    h = hashlib.sha256()
    h.update(json.dumps(workload.identity, sort_keys=True, default=str).encode())
    h.update(f"|seed={workload.seed}|dtype={workload.dtype}|".encode())
    for name, tensor in sorted(workload.model.state_dict(keep_vars=False).items()):
        _update_with_tensor(h, name, tensor)
    _hash_inputs(h, "args", workload.args)
    _hash_inputs(h, "kwargs", workload.kwargs)
    return h.hexdigest()[:16]


def preload_for(spec: WorkloadSpec, model_module: bool = True) -> tuple[str, ...]:
    """What a worker for ``spec`` will import to build it: torch, and for a Hugging Face
    workload transformers with (``arch:``, and ``model_module``) the architecture's modeling
    module. A name that does not import is only a hint missed: the session that needs it
    reports the failure."""
    if spec.kind not in ("arch", "hf"):
        return ("torch",)
    modules = ["torch", "transformers", "transformers.models.auto.modeling_auto"]
    if spec.kind == "arch" and model_module:
        module = spec.name.replace("-", "_")
        modules.append(f"transformers.models.{module}.modeling_{module}")
    return tuple(modules)
