"""What a trial keeps between runs, as the trial core sees it: baselines and requirements, and
how a trial reuses, extends or recomputes its baseline (:func:`ensure_baseline`) and reads or
keeps its requirements (:func:`resolve_requirements`).

The trial core (:mod:`bakeoff.runner.trial` and what it runs) never imports the knowledge base
(``tests/test_layers.py`` holds that rule): it reads and keeps baselines and requirements
through :class:`Keeping`, and returns its run without saving it; whoever called it stores the
run. :class:`bakeoff.store.db.Store` is the knowledge base's implementation (it has these
methods); a sweep cell's is :class:`MemoryKeeping`, whose baseline goes back to the driver with
the cell (:mod:`bakeoff.sweep.cell`).
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from bakeoff.analysis.requirements import Requirement
from bakeoff.checks.baseline import (
    compute_references,
    honest_reference,
    repeat_error,
    save_references,
    shape_tag,
)
from bakeoff.env import Environment
from bakeoff.errors import SpecError, StoreError
from bakeoff.hashing import file_sha256
from bakeoff.metrics import parse_requirement
from bakeoff.results.values import BaselineInfo
from bakeoff.workload.base import BuiltWorkload

__all__ = [
    "ComputeReferences",
    "Keeping",
    "MemoryKeeping",
    "ensure_baseline",
    "now",
    "references_here",
    "resolve_requirements",
    "unwritable",
]

Progress = Callable[[str], None]


class Keeping(Protocol):
    """Baselines (the reference outputs, as files) and the requirements kept per workload."""

    def latest_baseline(self, workload_spec: str) -> BaselineInfo | None: ...

    def baseline_problem(self, info: BaselineInfo) -> str | None: ...

    def baseline_file(self, info: BaselineInfo) -> Path:
        """Where ``info``'s tensors are (or, for a new baseline, go): from its id and fingerprint."""
        ...

    def save_baseline(self, info: BaselineInfo, env: Environment) -> None: ...

    def requirements(self, workload_spec: str) -> list[str]: ...

    def save_requirements(self, workload_spec: str, texts: Sequence[str], at: str) -> None: ...


class MemoryKeeping:
    """Baselines and requirements held in this process, the baseline files under ``directory``:
    what a sweep cell keeps while it runs (the driver stores them with the cell).

    ``given`` is the baseline the driver already keeps for the workload, with its tensor file's
    bytes: the trial reuses it where :func:`ensure_baseline` would reuse it from the knowledge
    base (same fingerprint, every reference wanted, bytes matching the hash recorded), and it
    is not among :attr:`baselines`, the new ones that go back to the driver."""

    def __init__(
        self,
        directory: Path,
        requirements: dict[str, list[str]] | None = None,
        given: tuple[BaselineInfo, bytes] | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.baselines: list[tuple[BaselineInfo, Environment]] = []
        self._requirements = dict(requirements or {})
        self.given = None if given is None else given[0]
        if given is not None:
            path = self.baseline_file(given[0])
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(given[1])

    def latest_baseline(self, workload_spec: str) -> BaselineInfo | None:
        kept = [info for info, _ in self.baselines if info.workload_spec == workload_spec]
        if not kept and self.given is not None and self.given.workload_spec == workload_spec:
            return self.given
        return kept[-1] if kept else None

    def baseline_problem(self, info: BaselineInfo) -> str | None:
        path = self.baseline_file(info)
        if not path.exists():
            return "has no file"
        if info.sha256 and file_sha256(path) != info.sha256:
            return "does not match its recorded hash"
        return None

    def baseline_file(self, info: BaselineInfo) -> Path:
        return self.directory / f"baselines/{info.fingerprint}/{info.id}.safetensors"

    def save_baseline(self, info: BaselineInfo, env: Environment) -> None:
        self.baselines.append((info, env))

    def requirements(self, workload_spec: str) -> list[str]:
        return list(self._requirements.get(workload_spec, []))

    def save_requirements(self, workload_spec: str, texts: Sequence[str], at: str) -> None:
        self._requirements[workload_spec] = list(texts)


def now() -> str:
    """This moment in UTC, as every record of a trial is dated."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")


def _parse_ref(name: str) -> tuple[str, str, tuple[int, int] | None]:
    """``eager:float32@1x16`` -> ("eager", "float32", (1, 16)); ``golden`` -> ("golden", "", None)."""
    head, _, shape = name.partition("@")
    kind, _, dtype = head.partition(":")
    if not shape:
        return kind, dtype, None
    batch, _, seq = shape.partition("x")
    return kind, dtype, (int(batch), int(seq))


#: ``compute(workload, dtypes, shapes, amp_dtypes, path)``: the references of a new baseline
#: written to ``path``, as ``(their names, notes, the repeat run's largest difference)``.
ComputeReferences = Callable[
    [BuiltWorkload, list[str], list[tuple[int, int]], list[str], Path], tuple[tuple[str, ...], list[str], float]
]


def references_here(
    workload: BuiltWorkload, dtypes: list[str], shapes: list[tuple[int, int]], amp_dtypes: list[str], path: Path
) -> tuple[tuple[str, ...], list[str], float]:
    """:data:`ComputeReferences` in this process (:func:`compute_references`, then saved)."""
    refs, notes = compute_references(workload, dtypes, shapes, amp_dtypes)
    save_references(path, refs)
    return tuple(refs), notes, repeat_error(refs, workload.dtype)


def ensure_baseline(
    keeping: Keeping,
    workload: BuiltWorkload,
    env: Environment,
    dtypes: Sequence[str] = (),
    refresh: bool = False,
    progress: Progress | None = None,
    shapes: Sequence[tuple[int, int]] = (),
    amp_dtypes: Sequence[str] = (),
    compute: ComputeReferences = references_here,
) -> tuple[BaselineInfo, list[str]]:
    """Reuse the newest baseline for this workload, or compute and store a new one.

    A new baseline is computed when asked (``refresh``), when none exists, when the stored one
    is *stale* (its fingerprint differs from the workload's now: other weights, config or
    inputs), or when it lacks an eager reference for one of ``dtypes``, an autocast reference
    for one of ``amp_dtypes`` (the mixed precisions of the targets), or either of the profile
    ``shapes``. Extending keeps every reference the stored baseline had.

    Returns:
        The baseline and notes explaining why it was (re)computed, if it was.
    """
    spec = workload.spec.spec
    existing = keeping.latest_baseline(spec)
    wanted = {f"eager:{d}" for d in dtypes}
    wanted |= {f"eager:{d}{shape_tag(*shape)}" for d in {*dtypes, workload.dtype} for shape in shapes}
    wanted |= {f"amp:{d}{tag}" for d in amp_dtypes for tag in ("", *(shape_tag(*shape) for shape in shapes))}
    if existing is not None:  # each reference's honest twin, where the stored baseline could make one
        stored = set(existing.references)
        wanted |= {
            honest_reference(head) + at + shape
            for head, at, shape in (name.partition("@") for name in wanted | {f"eager:{workload.dtype}"})
            if {"golden" + at + shape, head + at + shape} <= stored
        }
    reason = None
    if refresh:
        reason = "baseline recomputed on request"
    elif existing is None:
        reason = "baseline created"
    elif existing.fingerprint != workload.fingerprint:
        reason = f"stored baseline was stale (fingerprint {existing.fingerprint} != {workload.fingerprint}); recomputed"
    elif (problem := keeping.baseline_problem(existing)) is not None:
        reason = f"stored baseline {existing.id} {problem}; recomputed"
    elif not wanted <= set(existing.references):
        missing = wanted - set(existing.references)
        parsed = [_parse_ref(r) for r in missing]
        missing_dtypes = sorted({dtype for kind, dtype, shape in parsed if kind == "eager" and shape is None})
        missing_amp = sorted({dtype for kind, dtype, shape in parsed if kind == "amp" and shape is None})
        missing_shapes = {shape for _, _, shape in parsed if shape is not None}
        honest = any(kind.startswith("honest") for kind, _, _ in parsed)
        parts = (
            (["eager references for " + ", ".join(missing_dtypes)] if missing_dtypes else [])
            + (["autocast references for " + ", ".join(missing_amp)] if missing_amp else [])
            + ([f"references for {len(missing_shapes)} profile shape(s)"] if missing_shapes else [])
            + (["the honest-spread runs the correctness rule needs"] if honest else [])
        )
        reason = "baseline extended with " + (" and ".join(parts) or "missing files")
    if existing is not None and reason is None:
        return replace(existing, path=str(keeping.baseline_file(existing))), []
    if progress:
        progress(f"computing baseline for {spec}")
    keep_dtypes, keep_shapes, keep_amp = set(dtypes), set(shapes), set(amp_dtypes)
    if existing is not None and existing.fingerprint == workload.fingerprint:
        for name in existing.references:
            kind, dtype, shape = _parse_ref(name)
            if kind == "eager":
                keep_dtypes.add(dtype)
            if kind == "amp":
                keep_amp.add(dtype)
            if shape is not None:
                keep_shapes.add(shape)
    draft = BaselineInfo(
        id=uuid.uuid4().hex[:12],
        workload_spec=spec,
        fingerprint=workload.fingerprint,
        seed=workload.seed,
        created_at=now(),
        environment_fingerprint=env.fingerprint,
        references=(),
        deterministic=True,
        repeat_max_abs_err=0.0,
        path="",
    )
    path = keeping.baseline_file(draft)  # from its id and fingerprint alone
    try:
        names, notes, repeat = compute(workload, sorted(keep_dtypes), sorted(keep_shapes), sorted(keep_amp), path)
    except OSError as exc:  # a directory the knowledge base's artifacts cannot be written to
        raise unwritable(path, exc.strerror or str(exc)) from exc
    info = replace(
        draft,
        references=names,
        deterministic=repeat == 0.0,
        repeat_max_abs_err=repeat,
        path=str(path),
        sha256=file_sha256(path),
    )
    keeping.save_baseline(info, env)
    return info, [reason, *notes]


def unwritable(path: Path, why: str) -> StoreError:
    """The error for a baseline that cannot be written to ``path``."""
    return StoreError(
        f"cannot write the baseline to {path.parent}: {why}",
        hint="make that directory writable, or choose another --db path or BAKEOFF_ARTIFACTS",
    )


def resolve_requirements(
    keeping: Keeping, workload_spec: str, given: Sequence[str] | None
) -> tuple[list[Requirement], list[str]]:
    """The requirements to check: ``given`` (then kept for the workload), else the stored ones.

    Raises:
        SpecError: a malformed requirement (nothing is stored then).
    """
    if given is None:
        kept, notes = [], []
        for text in keeping.requirements(workload_spec):
            try:
                kept.append(parse_requirement(text))
            except SpecError as exc:  # its metric's scenario or check is not installed here
                notes.append(f"kept requirement {text} not checked: {exc} (a plugin's metric?)")
        if kept:
            notes.insert(0, "requirements kept for this workload checked: " + ", ".join(r.text for r in kept))
        return kept, notes
    parsed = [parse_requirement(text) for text in given]
    keeping.save_requirements(workload_spec, [r.text for r in parsed], now())
    note = f"requirements kept for {workload_spec}: " + (", ".join(r.text for r in parsed) or "none")
    return parsed, [note]
