"""A script run's outputs against the reference's: the correctness of a ``bakeoff exec`` target.

What each run captured (losses, ``--capture``'d return values, module outputs, ``bakeoff.capture``
calls) and the files it wrote (read by :mod:`bakeoff.script.outputs`) are flattened to tensors
keyed ``NAME[CALL]PATH`` and ``file:PATH[:NAME]`` and judged by the correctness check's own rules
(:func:`bakeoff.checks.correctness.compare_outputs`): each tensor in its dtype's tolerance, or
within the honest spread (the reference run again under rounding noise); strings exactly. A run
that failed is judged on what it captured before it stopped; a compiled graph's own random
draws make a failure ``not_comparable`` (:func:`drawn_in_graphs`). The runs are read by their
attributes (``status``, ``error``, ``captures``, ``outputs``, ``audit``, ``result``), as
:class:`bakeoff.runner.script.ScriptRun` has them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bakeoff.checks.base import ScriptContext
from bakeoff.checks.comparison import Correctness, compare_outputs, pooled_spreads
from bakeoff.script.compiled import SCRIPT_COMPILE
from bakeoff.script.modules import PREFIX as MODULE_PREFIX
from bakeoff.script.outputs import Outputs
from bakeoff.units import clip

__all__ = [
    "before_failure",
    "compare_captures",
    "drawn_in_graphs",
    "flatten_captures",
    "flatten_files",
    "listed",
    "script_correctness",
]


def script_correctness(context: ScriptContext) -> Correctness | None:
    """The target's correctness against the reference (None: nothing could be judged, the
    target or the reference failed before capturing anything); what the comparison left out
    goes to ``context.notes``."""
    run, reference, name = context.run, context.reference, context.reference_name
    compared, uncompared = _compiled_view(reference, run) if context.target.is_compiled else (reference, [])
    both_ran = run.status == "ok" and reference.status == "ok"
    correctness = compare_captures(run, compared, name, context.honest) if both_ran else None
    if run.status == "ok" and reference.error is not None and reference.error.type == "ReferenceDevice":
        correctness = Correctness("not_comparable", reference.error.message, name)
    notes = _file_notes(run, reference) if correctness is not None else []
    if run.status != "ok" and reference.status == "ok" and run.captures:
        correctness, said = before_failure(run, compared, name, context.honest)
        notes.append(said)
    correctness = drawn_in_graphs(correctness, run)
    if uncompared:
        names = ", ".join(uncompared[:5])
        notes.append(f"not compared: {len(uncompared)} module capture(s) inside compiled graphs ({names})")
    context.notes.extend(notes)
    return correctness


def _walker(tensors: dict[str, Any], others: dict[str, Any]) -> Callable[[str, Any], None]:
    """A function that files a captured value's leaves under ``KEY.PATH``: tensors and numbers
    (as tensors) in ``tensors``, strings and Nones in ``others``."""
    import torch

    def walk(key: str, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            tensors[key] = value
        elif isinstance(value, bool | int | float):
            tensors[key] = torch.tensor(value, dtype=torch.float32 if isinstance(value, float) else torch.int64)
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(f"{key}.{k}", v)
        elif isinstance(value, list | tuple):
            for i, v in enumerate(value):
                walk(f"{key}.{i}", v)
        else:
            others[key] = value

    return walk


def flatten_captures(captures: Mapping[str, list[Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(tensors, others)``: every captured tensor and number as a tensor keyed
    ``NAME[CALL]PATH``, and the strings and Nones under the same keys (compared exactly)."""
    tensors: dict[str, Any] = {}
    others: dict[str, Any] = {}
    walk = _walker(tensors, others)
    for name, calls in captures.items():
        for index, value in enumerate(calls):
            walk(f"{name}[{index}]", value)
    return tensors, others


def flatten_files(files: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(tensors, others)`` of the files a run wrote (:class:`~bakeoff.script.outputs.Outputs`'s
    values) like :func:`flatten_captures`'s: a file's value keyed ``file:PATH``, or for a dict or
    list (a safetensors or npz file's tensors, a JSON document's members) ``file:PATH:NAME``."""
    tensors: dict[str, Any] = {}
    others: dict[str, Any] = {}
    walk = _walker(tensors, others)
    for path, value in files.items():
        key = f"file:{path}"
        members = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else None
        if members is None:
            walk(key, value)
        for name, member in members or ():
            walk(f"{key}:{name}", member)
    return tensors, others


def _flatten(captures: Mapping[str, list[Any]], files: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    tensors, others = flatten_captures(captures)
    file_tensors, file_others = flatten_files(files)
    return {**tensors, **file_tensors}, {**others, **file_others}


def listed(paths: Sequence[str], most: int = 5) -> str:
    more = f" (and {len(paths) - most} more)" if len(paths) > most else ""
    return ", ".join(paths[:most]) + more


def compare_captures(run: Any, reference: Any, reference_name: str, honest: Any = None) -> Correctness:
    """The target's captures and files against the reference's, by the correctness check's rules
    (each tensor in its own dtype's tolerance, or within the honest spread: how far ``honest``,
    the reference run again under rounding noise, is from the reference; strings exactly).

    A file the reference wrote is compared where both runs read it, per tensor; one the target
    did not write is missing, and one it wrote but could not read (where the reference's was
    read) is wrong: both fail. A file only the target wrote, or one either run did not read for
    a reason other than a reader's error (a pickle, a format or size not read), is a note
    (:func:`_file_notes`), not compared."""
    ref_files = reference.outputs or Outputs()
    files = run.outputs or Outputs()
    problems = [f"missing output file {path}" for path in sorted(ref_files.paths() - files.paths())]
    problems += [
        f"output file {path} {files.skipped[path]} (the reference's was read)"
        for path in ref_files.values
        if files.skipped.get(path, "").startswith("unreadable")
    ]
    both = [path for path in ref_files.values if path in files.values]
    if not reference.captures and not both and not problems:
        said = "captured nothing" + (" and wrote no file it reads" if reference.outputs is not None else "")
        return Correctness("not_comparable", f"the reference run {said} to compare", reference_name)
    tensors, others = _flatten(run.captures, {path: files.values[path] for path in both})
    ref_tensors, ref_others = _flatten(reference.captures, {path: ref_files.values[path] for path in both})
    dtypes = {key: str(value.dtype).removeprefix("torch.") for key, value in ref_tensors.items()}
    spread = None
    if honest is not None and honest.status == "ok":
        honest_files = honest.outputs or Outputs()
        spread, _ = _flatten(honest.captures, {p: honest_files.values[p] for p in both if p in honest_files.values})
    pooled = pooled_spreads(ref_tensors, spread) if spread is not None else None
    judged = compare_outputs(
        tensors, ref_tensors, None, "float32", reference_name, dtypes=dtypes, honest=spread, pooled=pooled
    )
    differ = [key for key, value in ref_others.items() if others.get(key, object()) != value]
    if differ:
        problems.append("captured values differ: " + ", ".join(differ[:5]))
    if problems:
        reason = "; ".join(filter(None, [*problems, judged.reason]))
        return Correctness("fail", reason, reference_name, judged.tolerance, judged.outputs)
    return judged


def before_failure(run: Any, reference: Any, reference_name: str, honest: Any = None) -> tuple[Correctness | None, str]:
    """What a run that failed captured before it stopped, against the reference's same calls:
    ``(correctness, note)``. The correctness is kept only when those values already differ (a
    wrong value before the failure is a finding of its own); values that agree are said in the
    note, never as a ``pass`` beside a failed run. Files are left out: a failed run's are partial."""
    counts = {name: len(calls) for name, calls in run.captures.items()}

    def trimmed(other: Any) -> Any:
        if other is None:
            return None
        kept = {name: calls[: counts[name]] for name, calls in other.captures.items() if name in counts}
        return dataclasses.replace(other, captures=kept, outputs=None)

    judged = compare_captures(
        dataclasses.replace(run, outputs=None), trimmed(reference), reference_name, trimmed(honest)
    )
    stopped = ", ".join(
        f"{name} {counts[name]} of {len(reference.captures.get(name, ()))} call(s)" for name in sorted(counts)
    )
    where = f"before it stopped it captured {stopped}"
    if judged.verdict == "fail":
        return judged, f"{where}; those already differ from the reference: {clip(judged.reason, 300)}"
    if judged.verdict == "pass":
        return None, f"{where}; those agree with the reference (the failure came after them)"
    return None, f"{where}; they could not be compared: {clip(judged.reason, 200)}"


def _moved(problem: str) -> bool:
    """Whether a capture's failure is finite values that moved (what another draw does), not a
    non-finite value, a shape, an integer or a missing output."""
    return problem.startswith(("rms error vs the reference", "max abs error")) or (
        problem.startswith("the ") and " together: rms error " in problem
    )


def drawn_in_graphs(correctness: Correctness | None, run: Any) -> Correctness | None:
    """A ``fail`` of a run whose compiled graphs drew random numbers, as ``not_comparable``.

    A compiled graph draws its random numbers with its backend's own generator (inductor's
    Philox streams), not the eager reference's, so a dropout in training makes every value after
    it differ from the reference's, whatever the seed: no honest engine could match it. The
    failing captures are named, and what differs elsewhere (a missing file, a captured string)
    still fails. What it cannot see: a real fault in those values (compare with the dropout off,
    ``model.eval()`` or ``p=0``, to judge them)."""
    if correctness is None or correctness.verdict != "fail":
        return correctness
    compilation = (run.audit or {}).get("compilation")
    compiled = run.result.get("compile") or any(r.get("api") == SCRIPT_COMPILE for r in run.result.get("ledger", ()))
    if compilation is None and compiled:  # compiled, but the audit was off: unseen
        unseen = "not looked for: random draws in the compiled graphs (the audit was off, --no-audit)"
        return dataclasses.replace(correctness, reason=f"{correctness.reason}; {unseen}")
    signals = getattr(compilation, "signals", None) or {}
    drawn = signals.get("random_ops") or {}
    failing = [o for o in correctness.outputs if not o.passed]
    failed = [o.name for o in failing]
    said = {f"{o.name}: {o.problem}" for o in failing}
    others = [part for part in correctness.reason.split("; ") if part and part not in said]
    if (
        not drawn
        or not failed
        or not all(_moved(o.problem) for o in failing)
        or any(not part.startswith(("no float64 golden", "rounding alone")) for part in others)
    ):
        return correctness  # a non-finite value, a shape, a missing output or file: not a draw's doing
    ops = ", ".join(f"{name} x{count}" for name, count in sorted(drawn.items()))
    where = f" (first at {signals['random_site']})" if signals.get("random_site") else ""
    reason = (
        f"not comparable: the compiled graphs draw random numbers ({ops}){where} with the backend's own "
        f"generator, so values after a draw cannot match the reference's; they differ in {listed(failed)}. "
        "Judge them with the draws off (model.eval(), dropout p=0)"
    )
    return dataclasses.replace(correctness, verdict="not_comparable", reason=reason)


def _file_notes(run: Any, reference: Any) -> list[str]:
    """What a target's comparison left out of its files: those only it wrote, and those the
    reference wrote but did not read while the target did (its own unread files are in
    :func:`_notes`)."""
    if run.outputs is None or reference.outputs is None:
        return []
    notes = []
    only = sorted(run.outputs.paths() - reference.outputs.paths())
    if only:
        notes.append(f"output file(s) only this run wrote, not compared: {listed(only)}")
    unread = sorted(p for p in run.outputs.values if p in reference.outputs.skipped)
    if unread:
        notes.append(f"output file(s) {listed(unread)} not compared: the reference's were not read")
    return notes


def _compiled_view(reference: Any, run: Any) -> tuple[Any, list[str]]:
    """The reference as a compiled target's run can be compared with it: without the module
    captures the target could not record (modules inside a compiled graph run no Python; see
    :mod:`bakeoff.script.compiled`), and the names left out."""
    dropped = [n for n in reference.captures if n.startswith(MODULE_PREFIX) and n not in run.captures]
    if not dropped:
        return reference, []
    kept = {n: v for n, v in reference.captures.items() if n not in dropped}
    return dataclasses.replace(reference, captures=kept), dropped
