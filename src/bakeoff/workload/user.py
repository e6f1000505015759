"""``py:<module or file.py>:<function>`` - the user's own model factory.

The contract (documented in docs/workloads.md): bakeoff seeds ``torch.manual_seed(seed)``, then calls
``function(**options)`` with the spec's options other than ``seed`` as strings. The function
returns ``(model, inputs)`` where ``inputs`` is a tensor, a tuple of positional arguments, a
dict of keyword arguments, or a ``(args_tuple, kwargs_dict)`` pair. To run over an input
profile, return a third element, ``make_inputs(batch, seq)``, that builds inputs of that shape
in the same forms (bakeoff seeds torch's RNG per shape before calling it).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any

from bakeoff.errors import SpecError, WorkloadError
from bakeoff.hashing import file_sha256
from bakeoff.workload.base import BuiltWorkload, WorkloadSpec

__all__ = ["build_user", "load_module"]


def _class_sources(model: Any, factory_file: str | None) -> list[str]:
    """SHA-256 of each file defining a class of ``model``'s modules (sorted: wherever the
    checkout is, the same files give the same list), other than the factory's own (hashed
    already) and those of installed packages and the standard library (their versions are the
    environment's)."""
    import sysconfig

    installed = {Path(sysconfig.get_paths()[k]).resolve() for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    own = Path(factory_file).resolve() if factory_file else None
    found: set[str] = set()
    for kind in {type(m) for m in model.modules()}:
        try:
            where = inspect.getsourcefile(kind)
        except TypeError:  # a built-in class
            continue
        path = Path(where).resolve() if where else None
        if path is None or path == own or not path.is_file() or any(path.is_relative_to(r) for r in installed):
            continue
        found.add(file_sha256(path))
    return sorted(found)


def load_module(target: str) -> Any:
    if target.endswith(".py"):
        path = Path(target).expanduser().resolve()
        if not path.is_file():
            raise WorkloadError(f"no such file {target!r}", hint="give a path to an existing .py file")
        name = "bakeoff_user_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        argv = sys.argv
        sys.argv = [str(path)]  # as `python FILE` gives it: a module that parses its arguments finds none of ours
        try:
            spec.loader.exec_module(module)
        except (Exception, SystemExit) as exc:  # sys.exit() in a workload is its error, not bakeoff's exit
            del sys.modules[name]
            raise WorkloadError(
                f"importing {target} failed: {type(exc).__name__}: {exc}", hint="fix the error in your module"
            ) from exc
        finally:
            sys.argv = argv
        return module
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        raise WorkloadError(
            f"cannot import module {target!r}: {exc}",
            hint="run from the directory that contains it, or give a .py path",
        ) from exc
    except (Exception, SystemExit) as exc:
        raise WorkloadError(
            f"importing {target} failed: {type(exc).__name__}: {exc}", hint="fix the error in your module"
        ) from exc


def _split_inputs(spec: WorkloadSpec, inputs: Any) -> tuple[tuple, dict]:
    import torch

    if isinstance(inputs, torch.Tensor):
        return (inputs,), {}
    if isinstance(inputs, dict):
        return (), dict(inputs)
    if isinstance(inputs, tuple) and len(inputs) == 2 and isinstance(inputs[0], tuple) and isinstance(inputs[1], dict):
        return inputs[0], dict(inputs[1])
    if isinstance(inputs, tuple | list):
        return tuple(inputs), {}
    raise WorkloadError(
        f"{spec} returned inputs of type {type(inputs).__name__}",
        hint="return a tensor, a tuple of args, a dict of kwargs, or (args, kwargs)",
    )


def _takes_device(factory: Any) -> bool:
    try:
        return "device" in inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False


def _training_recipe(spec: WorkloadSpec, module: Any, seed: int, own: tuple[tuple, dict]) -> Any:
    """The module's own ``training_batch(step)`` and ``training_loss(output, args, kwargs)``,
    either or both (None: neither, and the synthetic fallback applies). Without
    ``training_batch`` every step trains on the factory's own inputs (``own``)."""
    from bakeoff.workload.training import TrainingRecipe, synthetic_loss

    batch_fn, loss_fn = getattr(module, "training_batch", None), getattr(module, "training_loss", None)
    if not callable(batch_fn) and not callable(loss_fn):
        return None

    def batch(step: int) -> tuple[tuple, dict]:
        import torch

        if not callable(batch_fn):
            return own
        torch.manual_seed(seed * 1_000_003 + 7_919 * (step + 1) + 1)  # the same data in every run
        try:
            return _split_inputs(spec, batch_fn(step))
        except WorkloadError:
            raise
        except Exception as exc:
            raise WorkloadError(
                f"training_batch({step}) of {spec} raised {type(exc).__name__}: {exc}", hint="fix training_batch"
            ) from exc

    return TrainingRecipe("workload" if callable(loss_fn) else "synthetic", batch, loss_fn or synthetic_loss)


def build_user(spec: WorkloadSpec, device: str | None = None) -> BuiltWorkload:
    """Import the factory, seed, call it and check what it returned.

    A factory with a ``device`` parameter places the model and inputs itself: it is called
    with the target device (``"cpu"`` for the baseline), and bakeoff does not move them.
    """
    import torch

    module_name, sep, func_name = spec.name.rpartition(":")
    if not sep or not module_name or not func_name:
        raise SpecError(f"malformed workload {spec}", hint="expected py:<module or file.py>:<function>")
    module = load_module(module_name)
    factory = getattr(module, func_name, None)
    if not callable(factory):
        raise WorkloadError(
            f"{module_name} has no function {func_name!r}", hint="name a function that returns (model, inputs)"
        )
    options = dict(spec.options)
    seed_text = options.pop("seed", "0")
    if not (seed_text.isascii() and seed_text.isdigit()):
        raise SpecError(f"seed={seed_text!r} in {spec} is not a non-negative integer", hint="e.g. seed=0")
    seed = int(seed_text)
    torch.manual_seed(seed)
    try:
        self_placed = _takes_device(factory)
        produced = factory(**options, device=device or "cpu") if self_placed else factory(**options)
    except TypeError as exc:
        raise WorkloadError(
            f"calling {func_name}({', '.join(options)}) failed: {exc}",
            hint="the factory must accept the spec's options as keyword arguments",
        ) from exc
    except (Exception, SystemExit) as exc:
        raise WorkloadError(
            f"{spec} raised {type(exc).__name__}: {exc}", hint="fix the factory; it runs on the CPU before any target"
        ) from exc
    make_inputs = None
    if isinstance(produced, tuple) and len(produced) == 3 and callable(produced[2]):
        produced, make_inputs = produced[:2], produced[2]
    if not (isinstance(produced, tuple) and len(produced) == 2 and isinstance(produced[0], torch.nn.Module)):
        raise WorkloadError(
            f"{spec} returned {type(produced).__name__}, not (model, inputs)",
            hint="return a torch.nn.Module and its example inputs",
        )
    model, inputs = produced
    args, kwargs = _split_inputs(spec, inputs)
    model.eval()
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):
        source = module_name
    identity = {
        "kind": "py",
        "function": f"{module_name}:{func_name}",
        "options": options,
        "source_sha256": hashlib.sha256(source.encode()).hexdigest(),
    }
    classes = _class_sources(model, getattr(module, "__file__", None))
    if classes:  # the model's code in the user's other files: a change there is a change of the model
        identity["classes_sha256"] = classes
    details = {
        "model_class": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "inputs": {f"arg{i}": list(a.shape) for i, a in enumerate(args) if isinstance(a, torch.Tensor)}
        | {k: list(v.shape) for k, v in kwargs.items() if isinstance(v, torch.Tensor)},
    }
    return BuiltWorkload(
        training=_training_recipe(spec, module, seed, (args, kwargs)),
        spec=spec,
        model=model,
        args=args,
        kwargs=kwargs,
        seed=seed,
        details=details,
        identity=identity,
        self_placed=self_placed,
        make_inputs=(lambda batch, seq: _split_inputs(spec, make_inputs(batch, seq))) if make_inputs else None,
    )
