"""Does a checkpoint written on the target read back as the weights it holds? The checkpoint
check (on request: ``--check checkpoint``).

The workload is built again and placed on the target as the trial places it (moved to its
device, cast to its dtype), and its ``state_dict`` is saved the two ways teams save one:
safetensors (``safetensors.torch.save_model``: tied weights stored once) and ``torch.save``.
Both are read back on the CPU (``safetensors.torch.load_file``; ``torch.load`` with
``weights_only=True`` and ``map_location="cpu"``: no pickle is trusted) and every tensor is
compared bit for bit with the same weights built on the CPU and cast to the target's dtype:
what the checkpoint should hold. A save is a copy, so no rounding is excused: one ulp off is a
difference.

Verdicts:
    pass   every tensor of both files read back with the reference's dtype, shape and bits
    fail   a tensor differs (named, with its largest difference in ulps), is missing, has
           another dtype or shape, or a file cannot be read back on the CPU (the reason says
           which, e.g. a ``map_location`` that fails)
    error  saving raised on the target: a tensor that cannot leave the device (the error)

With ``checkpoint?steps=N`` (2 by default) the model then trains N steps on the target and its
optimiser state goes through a save and a resume too (:mod:`bakeoff.checks.checkpoint_resume`).

What it cannot see: a checkpoint read back by another torch version or on another machine,
sharded or distributed checkpoints, and weights an engine keeps outside the module (an exported
graph's own constants).
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from bakeoff.checks.base import Check, CheckContext, Metric
from bakeoff.checks.checkpoint_resume import bits, same_bits
from bakeoff.checks.outputs import max_abs_difference
from bakeoff.codec import Value
from bakeoff.specsyntax import Option
from bakeoff.units import clip

__all__ = ["RANK", "Checkpoint", "CheckpointCheck", "compare_state"]

#: Checkpoint verdicts for regressions, better higher.
RANK = {"pass": 1, "fail": 0, "error": 0}
#: Differing tensors kept in a value.
KEPT = 5
#: The two formats, as the reasons name them.
FORMATS = ("safetensors", "torch.save")


@dataclass(frozen=True)
class Checkpoint(Value):
    """The round trip of the target's weights: ``tensors`` in its ``state_dict`` (each compared
    in both formats), ``differing`` the first :data:`KEPT` that did not read back as the
    reference's (``format:name: why``), of ``differing_total``; ``bytes`` the safetensors
    file's size; ``trained`` what the optimiser half did ("" where it did not run)."""

    verdict: str
    reason: str
    tensors: int = 0
    differing: tuple[str, ...] = ()
    differing_total: int = 0
    bytes: int = 0
    trained: str = ""


def _ulps(a: Any, b: Any) -> int:
    """The largest distance in units in the last place between two real floating tensors of one
    dtype and shape (as ordered integers of their bits)."""
    import torch

    if not a.numel():
        return 0
    raw_a, raw_b = bits(a), bits(b)
    wide_a, wide_b = raw_a.to(torch.int64), raw_b.to(torch.int64)
    top = torch.iinfo(raw_a.dtype).min

    def ordered(x: Any) -> Any:
        return torch.where(x < 0, top - x, x)  # negative floats count down from zero

    return int((ordered(wide_a) - ordered(wide_b)).abs().max())


def compare_state(
    expected: Mapping[str, Any], read: Mapping[str, Any], label: str, tied: Mapping[str, tuple[str, ...]]
) -> list[str]:
    """How ``read`` (a checkpoint read back) differs from ``expected`` (CPU tensors), one line
    per tensor; ``tied`` maps a name to the names sharing its storage (a format that stores
    shared weights once may keep any one of them)."""
    found = []
    for name, want in expected.items():
        got = read.get(name)
        if got is None:
            if any(other in read for other in tied.get(name, ()) if other != name):
                continue
            found.append(f"{label}:{name}: missing")
        elif got.dtype != want.dtype or got.shape != want.shape:
            found.append(
                f"{label}:{name}: {got.dtype} {tuple(got.shape)} read back, {want.dtype} {tuple(want.shape)} held"
            )
        elif got.device.type != "cpu":
            found.append(f"{label}:{name}: read back on {got.device}, not the CPU")
        elif not same_bits(want, got):
            if want.is_complex():
                found.append(f"{label}:{name}: other bits")
                continue
            far = _ulps(want, got) if want.is_floating_point() else None
            if far == 0:  # values that compare equal
                found.append(f"{label}:{name}: same values, other bits (a signed zero or a NaN's payload)")
                continue
            shown = f"{far} ulp, " if far is not None else ""
            found.append(f"{label}:{name}: {shown}max abs {max_abs_difference(want, got):.3g}")
    found += [f"{label}:{name}: not in the model" for name in read if name not in expected]
    return found


def _tied(tensors: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """Each name whose tensor shares its storage with another name's: name -> every name of that
    group (a format that stores shared storage once keeps what covers it)."""
    groups: dict[int, list[str]] = {}
    for name, tensor in tensors.items():  # a view at another offset shares too (a slice kept as a buffer)
        groups.setdefault(tensor.untyped_storage().data_ptr(), []).append(name)
    return {name: tuple(group) for group in groups.values() if len(group) > 1 for name in group}


class CheckpointCheck(Check):
    """The target's weights through a save and a load on the CPU (see the module docstring)."""

    name = "checkpoint"
    title = "checkpoint round trip"
    value_type = Checkpoint
    phase = "checkpoint check"
    on_request = True
    options: ClassVar[Mapping[str, Option]] = {
        "steps": Option(
            int,
            2,
            minimum=0,
            help="AdamW steps on the target before its optimiser state is saved too (0: weights only)",
        )
    }

    def not_applicable(self, target: Any, is_reference: bool) -> str | None:
        if is_reference:
            return "the reference's weights are what a checkpoint is compared with"
        return None

    def run(self, context: CheckContext) -> Checkpoint:
        import torch

        from bakeoff.target.execute import place_model
        from bakeoff.workload.registry import build_workload

        reference = build_workload(context.job.workload_spec)
        if reference.fingerprint != context.job.fingerprint:
            why = f"the workload built again differs (fingerprint {reference.fingerprint} != {context.job.fingerprint})"
            return Checkpoint("error", why)
        target = context.target
        built = build_workload(context.job.workload_spec, device=target.torch_device)
        model = place_model(built, target)
        if built.self_placed:  # it initialised itself on the device: its own state is all there is to hold
            against = "the target's own state_dict copied to the CPU (the workload places itself)"
            expected = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        else:
            against = ""
            held = reference.model.to(dtype=getattr(torch, target.dtype)) if target.dtype else reference.model
            expected = {k: v.detach() for k, v in held.state_dict().items()}
        tied = _tied({**dict(model.named_parameters(remove_duplicate=False)),
                      **dict(model.named_buffers(remove_duplicate=False))})  # fmt: skip
        with tempfile.TemporaryDirectory(prefix="bakeoff-checkpoint-") as tmp:
            try:
                size, read = _round_trip(model, Path(tmp))
            except _SaveFailed as exc:
                return Checkpoint("error", str(exc))
        differing = [line for label in FORMATS for line in _differs(expected, read[label], label, tied)]
        tensors = len(expected)
        trained, untrained = _trained(context, reference, built, model, differing)
        if differing:
            shown = "; ".join(differing[:2]) + (f"; {len(differing) - 2} more" if len(differing) > 2 else "")
            count = f"{len(differing)} difference" + ("s" if len(differing) > 1 else "")
            reason = f"the checkpoint read back differs from what the target held ({count}): {shown}"
            return Checkpoint("fail", reason, tensors, tuple(differing[:KEPT]), len(differing), size, trained)
        if not tensors:
            return Checkpoint("pass", f"the model's state_dict holds no tensor: nothing to change ({size:,} bytes)")
        which = f"each of {tensors} tensors" if tensors > 1 else "its one tensor"
        reason = f"{which} read back bit for bit from safetensors and torch.save ({size:,} bytes)"
        if against:
            reason += f", against {against}"
        if trained:
            reason += f"; after {trained}: the optimiser state read back bit for bit and resumed as held"
        elif untrained:
            reason += f"; optimiser state not checked: {untrained}"
        return Checkpoint("pass", reason, tensors, (), 0, size, trained)

    def metrics(self, value: Checkpoint | None) -> list[Metric]:
        return [] if value is None else [Metric("checkpoint", value.verdict, "verdict", RANK)]

    def misses(self, value: Checkpoint) -> tuple[list[str], list[str]]:
        if value.verdict in ("fail", "error"):
            return [f"checkpoint {value.verdict}: {clip(value.reason, 160)}"], []
        return [], []

    def facts(self, value: Checkpoint, result: Any) -> list[str]:
        return [f"checkpoint {value.verdict}: {clip(value.reason, 200)}"]


def _trained(context: CheckContext, reference: Any, built: Any, model: Any, differing: list[str]) -> tuple[str, str]:
    """The optimiser half (:mod:`bakeoff.checks.checkpoint_resume`), its differences added to
    ``differing``: ``(what it did, why it did not run)``."""
    import torch

    from bakeoff.checks.checkpoint_resume import resume_round_trip
    from bakeoff.target.engines import engine_for
    from bakeoff.target.execute import move_tensors, place_inputs
    from bakeoff.workload.registry import build_workload

    target, steps = context.target, context.options.get("steps", 2)
    if steps == 0:
        return "", ""
    if target.backend is not None and engine_for(target.backend).inference_only:
        return "", f"the {target.backend} engine is inference only"
    if not any(p.is_floating_point() and p.requires_grad for p in model.parameters()):
        return "", "the model has no trainable floating-point parameters"
    dtype = getattr(torch, target.dtype) if target.dtype else None

    def fresh() -> Any:
        again = build_workload(context.job.workload_spec).model
        return again.to(dtype=dtype) if dtype is not None else again

    try:
        found, did = resume_round_trip(
            model,
            fresh,
            (
                built.training_recipe() if built.self_placed else reference.training_recipe(),
                reference.training_recipe(),
            ),
            steps,
            lambda args, kwargs: place_inputs(built, target, args, kwargs),
            lambda args, kwargs: move_tensors((args, kwargs), None, dtype),
        )
    except Exception as exc:  # training itself failed on the target: the training check's question
        return "", f"training on the target raised {type(exc).__name__}: {clip(str(exc), 120)}"
    differing += found
    return did, ""


class _SaveFailed(Exception):
    """Saving the target's weights raised."""


def _round_trip(model: Any, folder: Path) -> tuple[int, dict[str, Any]]:
    """Save ``model``'s weights both ways in ``folder`` and read them back on the CPU:
    ``(safetensors file size, {format: tensors read, or why they could not be})``."""
    import torch
    from safetensors.torch import load_file, save_model

    path = folder / "model.safetensors"
    buffer = io.BytesIO()
    try:
        save_model(model, str(path))
    except Exception as exc:
        raise _SaveFailed(
            f"safetensors could not save the weights: {type(exc).__name__}: {clip(str(exc), 200)}"
        ) from exc
    try:
        torch.save(model.state_dict(), buffer)
    except Exception as exc:
        raise _SaveFailed(
            f"torch.save could not save the weights: {type(exc).__name__}: {clip(str(exc), 200)}"
        ) from exc
    read: dict[str, Any] = {}
    try:
        read["safetensors"] = load_file(str(path), device="cpu")
    except Exception as exc:
        read["safetensors"] = f"cannot be read back on the CPU: {type(exc).__name__}: {clip(str(exc), 160)}"
    buffer.seek(0)
    try:
        read["torch.save"] = torch.load(buffer, map_location="cpu", weights_only=True)
    except Exception as exc:
        read["torch.save"] = f"map_location='cpu' failed: {type(exc).__name__}: {clip(str(exc), 160)}"
    return path.stat().st_size, read


def _differs(expected: Mapping[str, Any], read: Any, label: str, tied: Mapping[str, tuple[str, ...]]) -> list[str]:
    if isinstance(read, str):
        return [f"{label}: {read}"]
    return compare_state(expected, read, label, tied)
