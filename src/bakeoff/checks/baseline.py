"""Compute the references a baseline preserves, and read/write them as safetensors.

References are named ``golden`` (float64 eager on the CPU), ``eager:<dtype>`` (eager on the CPU
in a working dtype), ``amp:<dtype>`` (eager on the CPU in the workload's own dtype under
``torch.autocast("cpu", dtype=<dtype>)``: what a mixed-precision target is judged against) and
``repeat:<dtype>`` (a second eager run, to detect nondeterminism). Each ``eager:<dtype>`` and
``amp:<dtype>`` reference has an ``honest:<dtype>`` / ``honest-amp:<dtype>`` twin: the same run
under :class:`bakeoff.checks.rounding.RoundingNoise`, an emulated honest other implementation
whose error sets the honest spread a correct engine may reach on this workload.
Files are safetensors, never pickles: loading a baseline cannot execute code.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bakeoff.checks.outputs import flatten_outputs, max_abs_difference
from bakeoff.errors import WorkloadError
from bakeoff.workload.base import BuiltWorkload

__all__ = [
    "compute_references",
    "honest_reference",
    "load_references",
    "repeat_error",
    "run_eagerly",
    "save_references",
    "shape_tag",
]

_SEP = "::"


def _cast(value: Any, dtype: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, dict):
        return {k: _cast(v, dtype) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def shape_tag(batch: int, seq: int) -> str:
    """Suffix of the references for one profile shape, e.g. ``@1x16``."""
    return f"@{batch}x{seq}"


def honest_reference(name: str) -> str:
    """The emulated honest twin of a reference: ``eager:float32`` -> ``honest:float32``,
    ``amp:bfloat16`` -> ``honest-amp:bfloat16``."""
    kind, _, dtype = name.partition(":")
    return f"honest:{dtype}" if kind == "eager" else f"honest-{kind}:{dtype}"


def _run_in(
    workload: BuiltWorkload,
    dtype_name: str,
    args: tuple,
    kwargs: dict,
    amp: str | None = None,
    honest: bool = False,
) -> dict[str, Any]:
    """One eager CPU call in ``dtype_name``; under CPU autocast in ``amp`` if given (its weight
    cache off, as on an amp target); ``honest``: under :class:`RoundingNoise` (seeded by the
    workload's seed, so a baseline is reproducible)."""
    import contextlib

    import torch

    from bakeoff.checks.rounding import RoundingNoise

    dtype = getattr(torch, dtype_name)
    model = copy.deepcopy(workload.model).to(dtype)
    autocast = (
        torch.autocast("cpu", dtype=getattr(torch, amp), cache_enabled=False)
        if amp is not None
        else contextlib.nullcontext()
    )
    noise = RoundingNoise(workload.seed) if honest else contextlib.nullcontext()
    with torch.no_grad(), autocast, noise:
        out = workload(model, _cast(args, dtype), _cast(kwargs, dtype))
    return flatten_outputs(out)


def run_eagerly(workload: BuiltWorkload) -> dict[str, Any]:
    """The workload's flattened outputs from one eager CPU call.

    Raises:
        WorkloadError: the call raised (or called ``sys.exit``): without an eager CPU run
            there is nothing to compare against.
    """
    import torch

    try:
        with torch.no_grad():
            return flatten_outputs(workload())
    except (Exception, SystemExit) as exc:
        first = (str(exc).splitlines() or [""])[0][:300]
        raise WorkloadError(
            f"{workload.spec} fails eagerly on the CPU, so it has no reference: {type(exc).__name__}: {first}",
            hint="make the model run eagerly on the CPU first (python -c 'model(**inputs)')",
        ) from exc


def compute_references(
    workload: BuiltWorkload,
    dtypes: Iterable[str] = (),
    shapes: Iterable[tuple[int, int]] = (),
    amp_dtypes: Iterable[str] = (),
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Run the workload eagerly on the CPU: float64 golden, native dtype twice, other dtypes once,
    and the native dtype under CPU autocast once per ``amp_dtypes`` entry (``amp:bfloat16``);
    and each but the golden once more under rounding noise (``honest:float32``).

    For each ``(batch, seq)`` in ``shapes`` (an input profile), the golden, eager and autocast
    references of that shape are added too, named with :func:`shape_tag` (``eager:float32@1x16``).

    Returns:
        ``(references, notes)``; a dtype the CPU cannot run is left out with a note.
    """

    native = workload.dtype
    refs: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    refs[f"eager:{native}"] = run_eagerly(workload)
    refs[f"repeat:{native}"] = run_eagerly(workload)
    inputs = [("", workload.args, workload.kwargs)]
    inputs += [(shape_tag(b, s), *workload.inputs_for(b, s)) for b, s in dict.fromkeys(shapes)]
    for tag, args, kwargs in inputs:
        runs = [("golden", "float64", None, ""), *((f"eager:{d}", d, None, "") for d in {native, *dtypes})]
        runs += [(f"amp:{d}", native, d, "") for d in sorted(set(amp_dtypes))]
        runs += [(honest_reference(name), dtype, amp, name) for name, dtype, amp, _ in runs if name != "golden"]
        for name, dtype, amp, twin_of in runs:
            # an honest twin needs its reference and a golden to spread around
            if name + tag in refs or (twin_of and not {"golden" + tag, twin_of + tag} <= set(refs)):
                continue
            try:
                refs[name + tag] = _run_in(workload, dtype, args, kwargs, amp, honest=bool(twin_of))
            except (Exception, SystemExit) as exc:  # e.g. an op without a float64 or float16 CPU kernel
                if name == f"eager:{native}":  # the shape itself does not work: refuse it now
                    raise WorkloadError(
                        f"{workload.spec} fails eagerly on the CPU for profile shape {tag.lstrip('@')}: "
                        f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}",
                        hint="remove that shape from the profile, or fix the model for it",
                    ) from exc
                notes.append(f"no {name + tag} reference: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
    return refs, notes


def repeat_error(refs: dict[str, dict[str, Any]], dtype: str) -> float:
    """Largest absolute difference between the two eager runs in ``dtype`` (inf if shapes differ)."""
    first, second = refs.get(f"eager:{dtype}", {}), refs.get(f"repeat:{dtype}", {})
    worst = 0.0
    for name, tensor in first.items():
        other = second.get(name)
        if other is None or other.shape != tensor.shape:
            return float("inf")
        worst = max(worst, max_abs_difference(tensor, other))
    return worst


def save_references(path: Path, refs: dict[str, dict[str, Any]]) -> None:
    from safetensors.torch import save_file

    flat = {
        f"{ref}{_SEP}{name}": t.contiguous().clone() for ref, tensors in refs.items() for name, t in tensors.items()
    }
    order = {ref: list(tensors) for ref, tensors in refs.items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(flat, str(path), metadata={"bakeoff.order": json.dumps(order)})


def load_references(path: Path, names: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
    """Load (some of) the references from a safetensors file, keeping output order."""
    from safetensors import safe_open

    wanted = set(names) if names is not None else None
    refs: dict[str, dict[str, Any]] = {}
    with safe_open(str(path), framework="pt") as handle:
        order = json.loads((handle.metadata() or {}).get("bakeoff.order", "{}"))
        for ref, tensor_names in order.items():
            if wanted is not None and ref not in wanted:
                continue
            refs[ref] = {name: handle.get_tensor(f"{ref}{_SEP}{name}") for name in tensor_names}
    return refs
