"""``bakeoff exec``: a team's own script, unchanged, run as a reference and on each target.

Each run is a fresh interpreter (``python -m bakeoff.runner.script_worker``: the launcher of
:mod:`bakeoff.script.launch` with the audit of that module) in its own copy of the working
directory, so one run's output files cannot feed another's. The reference runs the script as
written where its device exists (else on ``--reference``, by default the CPU, remapped like a
target); each target runs it with
the script's devices remapped to the target's. A run that raises, exits non-zero, dies from a
signal or hangs past the timeout is recorded as that target's failure; the others go on.

What each run captured (its losses, ``--capture``'d return values, ``bakeoff.capture`` calls) is
compared with the reference's by the correctness check's own rules, capture by capture and call
by call; the remapper's ledger (every rewrite with its count and first call site) becomes the
target's adjustments, and a rewrite that may change numerics becomes a note. The run is stored
as a run of a ``script:`` workload whose fingerprint is the script's source and argv.

Each target's run (never the reference's) is audited over the whole script: where its ops ran,
host fallbacks, copies and syncs with their lines in the script, parameters left on the host,
repeated copies of host state, and what ``torch.compile`` did; they are the target's
``placement`` and ``compilation`` checks, judged as a trial's are (see
:mod:`bakeoff.runner.script_worker` for what the audit cannot see and what it costs: the
target's wall time includes it, and a note says so).

Timing: the first run of each side is the evidence, not a fair clock (a target's is audited,
``--capture`` traces every Python call). Without ``repeats`` its wall time is the latency, a
single observation, said to be one, with no speed-up claimed. With ``repeats`` N, the reference
and each target run N more times, in turns, without the audit or the tracing (losses and
``bakeoff.capture`` calls are still kept: they cost little), and their wall times are the
latency, with a trial's statistics: noise flags, and the speed-up as a ratio of medians with its
bootstrap interval from two runs a side. A timing run that fails is a note, its time dropped.
Each run's time between captures (:mod:`bakeoff.analysis.spans`) is compared span by span with
the reference's and kept in the target's ``conditions["timing"]``; a span out of line with the
target's typical ratio is a note.

What it cannot see (yet): files the script writes, and child processes the script starts (they
run unmapped and unaudited).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bakeoff.analysis.compare import ratio_of_medians
from bakeoff.analysis.noise import noise_flags
from bakeoff.analysis.spans import compare_spans, spans
from bakeoff.checks.correctness import Correctness, compare_outputs
from bakeoff.env import capture_environment
from bakeoff.errors import SpecError
from bakeoff.results.librarylog import LibraryLog
from bakeoff.results.values import ErrorInfo, Latency, RunResult, TargetResult
from bakeoff.store.db import Store
from bakeoff.target.detect import unavailable_reason
from bakeoff.target.spec import Target

__all__ = ["ScriptRun", "copy_workdir", "flatten_captures", "run_script", "script_workload"]

#: Directories never copied into a run's working directory.
_SKIP_DIRS = frozenset({".git", ".hg", ".venv", "venv", "__pycache__", "node_modules", ".mypy_cache", ".ruff_cache"})
#: The largest working directory a run copies (bytes); a larger one needs --workdir.
MAX_WORKDIR_BYTES = 512 * 2**20


@dataclass(frozen=True)
class ScriptRun:
    """One run of the script: what the launcher wrote (``result``, the captures by name and
    call) and how the process ended (``status`` ok or error, with ``error``)."""

    status: str
    wall_s: float | None
    result: dict[str, Any] = field(default_factory=dict)
    captures: dict[str, list[Any]] = field(default_factory=dict)
    error: ErrorInfo | None = None
    log: tuple[dict[str, Any], ...] = ()
    audit: dict[str, Any] | None = None


def script_workload(script: Path, argv: Sequence[str]) -> dict[str, Any]:
    """The workload a script run is stored as: ``script:PATH ARGS``, fingerprinted by the
    script's source and its argv."""
    source = script.read_bytes()
    digest = hashlib.sha256(source + b"\0" + json.dumps(list(argv)).encode()).hexdigest()[:16]
    spec = "script:" + " ".join([str(script), *argv])
    return {
        "spec": spec,
        "kind": "script",
        "fingerprint": digest,
        "seed": 0,
        "dtype": "float32",
        "details": {"script": str(script), "argv": list(argv), "source_sha256": hashlib.sha256(source).hexdigest()},
    }


def copy_workdir(source: Path, into: Path, skip: Sequence[Path] = ()) -> Path:
    """Copy ``source`` to ``into`` (version-control, virtual-environment and cache directories and
    ``skip`` left out), so that a run's outputs stay its own.

    Raises:
        SpecError: the directory holds more than :data:`MAX_WORKDIR_BYTES`.
    """
    skipped = {p.resolve() for p in skip}
    total = 0
    for root, dirs, files in os.walk(source):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS]
        for name in files:
            path = Path(root, name)
            if path.resolve() in skipped or path.is_symlink():
                continue
            total += path.stat().st_size
            if total > MAX_WORKDIR_BYTES:
                raise SpecError(
                    f"the working directory {source} holds more than {MAX_WORKDIR_BYTES >> 20} MiB",
                    hint="run bakeoff exec from a directory that holds the script and its inputs only",
                )

    def ignore(directory: str, names: list[str]) -> list[str]:
        return [n for n in names if n in _SKIP_DIRS or Path(directory, n).resolve() in skipped]

    shutil.copytree(source, into, ignore=ignore, symlinks=True)
    return into


def _death(code: int) -> tuple[str, str, str]:
    """(type, category, message) of a launcher that died from a signal."""
    name = signal.Signals(-code).name
    if -code == signal.SIGKILL:
        return name, "out_of_memory", f"killed by {name} (most likely the out-of-memory killer)"
    return name, "crash", f"died from signal {name}"


def _log_lines(out: Path, log: LibraryLog) -> None:
    for source in ("stdout", "stderr"):
        path = out / f"{source}.txt"
        if path.exists():
            for line in path.read_text(errors="replace").splitlines():
                if line.strip():
                    log.add(source, "script", line.rstrip())


def _tail(out: Path, lines: int = 20) -> str:
    path = out / "stderr.txt"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


def _failure(code: int | None, result: dict[str, Any], out: Path, timeout_s: float) -> ErrorInfo | None:
    """How the run failed (None: it did not): a timeout, a signal, the script's exception or
    its non-zero exit."""
    if code is None:
        return ErrorInfo("Timeout", f"no end within {timeout_s:g} s", "timeout", "script", _tail(out))
    if code < 0:
        kind, category, message = _death(code)
        return ErrorInfo(kind, message, category, "script", _tail(out))
    failed = result.get("error")
    if failed:
        return ErrorInfo(
            failed.get("type", "Exception"),
            failed.get("message", ""),
            "exception",
            failed.get("phase", "script"),
            failed.get("traceback", ""),
        )
    if code != 0:
        message = f"the script exited with code {result.get('exit_code', code)}"
        if not result:
            message = f"the launcher exited with code {code} without a result: {_tail(out, 3)}"
        return ErrorInfo("NonZeroExit", message, "exception", "script", _tail(out))
    return None


def run_script(
    script: Path,
    argv: Sequence[str],
    workdir: Path,
    mapping: Mapping[str, str],
    *,
    strict: bool = False,
    captures: Sequence[str] = (),
    seed: int = 0,
    timeout_s: float = 600.0,
    skip: Sequence[Path] = (),
    audit: str | None = None,
) -> ScriptRun:
    """Run ``script`` once in a copy of ``workdir`` under ``mapping`` (empty: as written);
    with ``audit`` (the target's device), audit where its work ran
    (:mod:`bakeoff.runner.script_worker`)."""
    from bakeoff.runner.script_worker import PARENT_ENV, read_audit
    from bakeoff.script.capture import Captures

    base = Path(tempfile.mkdtemp(prefix="bakeoff-exec-"))
    try:
        work = copy_workdir(workdir, base / "work", skip)
        out = base / "out"
        out.mkdir()
        relative = (
            script.resolve().relative_to(workdir.resolve())
            if script.resolve().is_relative_to(workdir.resolve())
            else None
        )
        path = str(relative) if relative is not None else str(script.resolve())  # call sites read train.py:19
        command = [sys.executable, "-m", "bakeoff.runner.script_worker", "--out", str(out), "--seed", str(seed)]
        command += ["--audit", audit] if audit else []
        command += [arg for src, dst in mapping.items() for arg in ("--map", f"{src}={dst}")]
        command += ["--strict"] if strict else []
        command += [arg for name in captures for arg in ("--capture", name)]
        command += ["--", path, *argv]
        env = {**os.environ, "PYTHONHASHSEED": str(seed), PARENT_ENV: str(os.getpid())}
        with open(out / "stdout.txt", "wb") as stdout, open(out / "stderr.txt", "wb") as stderr:
            process = subprocess.Popen(command, cwd=work, stdout=stdout, stderr=stderr, env=env, start_new_session=True)
            try:
                code = process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                code = None
            except BaseException:  # Ctrl-C or SIGTERM: the script's process group goes too
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                raise
        log = LibraryLog()
        _log_lines(out, log)
        result_path = out / "result.json"
        result = json.loads(result_path.read_text()) if result_path.exists() else {}
        captured = {}
        if (out / "captures.safetensors").exists():
            found = Captures.from_safetensors(out / "captures.safetensors")
            captured = {name: list(found[name]) for name in found.names()}
        error = _failure(code, result, out, timeout_s)
        wall = result.get("wall_s") if code is not None else None
        audited = read_audit(out) if audit else None
        return ScriptRun("ok" if error is None else "error", wall, result, captured, error, log.entries(), audited)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def flatten_captures(captures: Mapping[str, list[Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(tensors, others)``: every captured tensor and number as a tensor keyed
    ``NAME[CALL]PATH``, and the strings and Nones under the same keys (compared exactly)."""
    import torch

    tensors: dict[str, Any] = {}
    others: dict[str, Any] = {}

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

    for name, calls in captures.items():
        for index, value in enumerate(calls):
            walk(f"{name}[{index}]", value)
    return tensors, others


def compare_captures(run: ScriptRun, reference: ScriptRun, reference_name: str) -> Correctness:
    """The target's captures against the reference's, by the correctness check's rules (each
    tensor in its own dtype's tolerance; strings exactly)."""
    if not reference.captures:
        return Correctness("not_comparable", "the reference run captured nothing to compare", reference_name)
    tensors, others = flatten_captures(run.captures)
    ref_tensors, ref_others = flatten_captures(reference.captures)
    dtypes = {key: str(value.dtype).removeprefix("torch.") for key, value in ref_tensors.items()}
    judged = compare_outputs(tensors, ref_tensors, None, "float32", reference_name, dtypes=dtypes)
    differ = [key for key, value in ref_others.items() if others.get(key, object()) != value]
    if differ:
        reason = "; ".join(filter(None, [judged.reason, "captured values differ: " + ", ".join(differ[:5])]))
        return Correctness("fail", reason, reference_name, judged.tolerance, judged.outputs)
    return judged


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _adjustments(run: ScriptRun) -> list[dict[str, Any]]:
    return [
        {
            "name": r["api"],
            "value": f"{r['count']}x, first at {r['site']}" + (f": {r['reason']}" if r.get("reason") else ""),
        }
        for r in run.result.get("ledger", ())
    ]


def _notes(run: ScriptRun, timed: bool = False) -> list[str]:
    notes = [
        f"numerics may change: {r['api']} ({r.get('reason') or 'flagged'}) at {r['site']}"
        for r in run.result.get("ledger", ())
        if r.get("numerics")
    ]
    missing = run.result.get("captures_missing") or []
    if missing:
        notes.append("never called, so not captured: " + ", ".join(missing))
    if run.wall_s is not None and not timed:  # timed: its latency is from the clean runs (_timed)
        notes.append(f"wall time {run.wall_s:.3g} s is a single observation (one run; time it with --repeats)")
    audit = run.audit or {}
    placement = audit.get("placement")
    if run.wall_s is not None and not timed and placement is not None and placement.verdict != "not_applicable":
        spent = (placement.signals.get("script") or {}).get("audit_s")
        if spent is not None:
            notes.append(f"wall time includes the placement audit, {spent:.3g} s of it recording ops")
    if audit.get("error"):
        notes.append(f"placement audit: {audit['error']}")
    return notes


def _result(
    target: Target, run: ScriptRun, is_reference: bool, correctness: Correctness | None, timed: bool = False
) -> TargetResult:
    checks: dict[str, Any] = {"correctness": correctness} if correctness is not None else {}
    for name in ("placement", "compilation"):
        value = (run.audit or {}).get(name)
        if value is not None:
            checks[name] = value
    latency = Latency((run.wall_s * 1e3,)) if run.status == "ok" and run.wall_s is not None else None
    return TargetResult(
        target=target,
        status=run.status,
        is_reference=is_reference,
        latency=latency,
        adjustments=tuple(_adjustments(run)),
        notes=tuple(_notes(run, timed)),
        error=run.error,
        log=run.log,
        checks=checks,
    )


def _span_samples(runs: Sequence[ScriptRun]) -> dict[str, list[float]]:
    """Per span between captures (:func:`~bakeoff.analysis.spans.spans`), its milliseconds in
    each finished run, in the order the spans came."""
    found: dict[str, list[float]] = {}
    for run in runs:
        if run.status == "ok" and run.wall_s is not None:
            for name, seconds in spans(run.result.get("capture_times") or {}, run.wall_s).items():
                found.setdefault(name, []).append(seconds * 1e3)
    return found


def _timed(
    result: TargetResult,
    runs: Sequence[ScriptRun] | None,
    span_ms: Mapping[str, Sequence[float]],
    reference_span_ms: Mapping[str, Sequence[float]] | None,
) -> TargetResult:
    """``result`` with its timing: with ``runs`` (the clean timing runs, ``--repeats``) its
    latency is their wall times (a failed one is a note and its time dropped) and their noise
    flags; either way its spans beside the reference's, and a note for a span out of line."""
    if result.status != "ok":
        return result
    notes = list(result.notes)
    latency, noise = result.latency, list(result.noise)
    if runs is not None:
        kept = [r.wall_s * 1e3 for r in runs if r.status == "ok" and r.wall_s is not None]
        for i, r in enumerate(runs, 1):
            if r.status != "ok" or r.wall_s is None:
                why = f"{r.error.category}: {r.error.type}: {r.error.message}" if r.error else "no wall time"
                notes.append(f"timing run {i} of {len(runs)} failed, its time dropped ({why.splitlines()[0][:160]})")
        latency = Latency(tuple(kept)) if kept else None
        if len(kept) == 1:  # more runs: the settings line says how they were timed
            notes.append("wall time from 1 run without the audit: a single observation, no speed-up claimed")
        if len(kept) > 1:
            noise += noise_flags(kept, [], os.cpu_count() or 1)
    compared = compare_spans(span_ms, reference_span_ms if not result.is_reference else None)
    for row in compared["spans"]:
        if row["out_of_line"]:
            notes.append(
                f"span {row['span']} took {row['ms']:.3g} ms, {row['ratio']:.3g}x the reference's "
                f"(its spans' typical ratio {compared['typical_ratio']:.3g}x)"
            )
    timing = {
        "runs": len(runs) if runs is not None else 0,
        "spans_from": "the timing runs"
        if runs is not None
        else "the first run" + ("" if result.placement is None else ", audited"),
        "typical_span_ratio": compared["typical_ratio"],
        "spans": compared["spans"],
    }
    return replace(
        result,
        latency=latency,
        noise=tuple(noise),
        notes=tuple(notes),
        conditions={**(result.conditions or {}), "timing": timing},
    )


def _speedups(results: list[TargetResult]) -> list[TargetResult]:
    """Speed-up against the reference (the ratio of median wall times, with its bootstrap
    interval, as a trial's), only where both sides have two runs or more: none is claimed from
    a single observation."""
    ref = next((r for r in results if r.is_reference), None)
    if ref is None or ref.latency is None or ref.latency.count < 2 or ref.latency.p50_ms <= 0:
        return results
    updated = []
    for r in results:
        if r.latency is None or r.latency.count < 2 or r.latency.p50_ms <= 0:
            updated.append(r)
            continue
        estimate = ratio_of_medians(ref.latency.samples_ms, r.latency.samples_ms)
        updated.append(replace(r, speedup=estimate.value, speedup_ci=estimate.to_dict()))
    return updated


def exec_script(
    store: Store | Callable[[], Store],
    script: Path,
    argv: Sequence[str],
    targets: Sequence[Target],
    *,
    reference: Target,
    source_devices: Sequence[str] = ("cuda",),
    strict: bool = False,
    captures: Sequence[str] = (),
    timeout_s: float = 600.0,
    seed: int = 0,
    as_written: bool = False,
    progress: Callable[[str], None] | None = None,
    audit: bool = True,
    keep_out: Sequence[Path] = (),
    repeats: int = 0,
) -> RunResult:
    """Run ``script`` as the reference (as written when ``as_written``, else remapped to
    ``reference``'s device) and on each target, compare, store and return the run. With
    ``audit``, each target's run (not the reference's) is audited for where its work ran and
    what ``torch.compile`` did: its ``placement`` and ``compilation`` checks. ``keep_out``: files
    of the working directory never copied into a run's (the knowledge base and its journals).

    ``repeats``: after those runs (the evidence of correctness and placement), run the reference
    and each target that ran this many times more, in turns, without the audit and without
    ``--capture``'s tracing, purely to time them: each one's latency is then those runs' wall
    times, and a speed-up against the reference is claimed from two or more a side. 0: the
    latency is the first run's wall time, a single observation (a target's includes its audit).
    Either way the spans between captures are compared with the reference's (with repeats, the
    median of each span over the timing runs)."""
    say = progress or (lambda _msg: None)
    workdir = Path.cwd()
    db_files = [Path(f"{path}{suffix}") for path in keep_out for suffix in ("", "-wal", "-shm", "-journal")]
    workload = script_workload(script, argv)
    env = capture_environment()

    def once(target: Target, remap: bool, audited: bool) -> ScriptRun:
        mapping = {src: target.torch_device for src in source_devices} if remap else {}
        return run_script(
            script, argv, workdir, mapping, strict=strict, captures=captures, seed=seed, timeout_s=timeout_s,
            skip=db_files, audit=target.torch_device if audited else None,
        )  # fmt: skip

    def clean(target: Target, remap: bool) -> ScriptRun:  # a timing run: no audit, no --capture tracing
        mapping = {src: target.torch_device for src in source_devices} if remap else {}
        return run_script(script, argv, workdir, mapping, strict=strict, seed=seed, timeout_s=timeout_s, skip=db_files)

    say(f"running {script.name} as the reference on {'its own device' if as_written else reference.spec}")
    ref_run = once(reference, not as_written, False)
    reference_name = "the script as written" if as_written else f"the script on {reference.spec}"
    results = [_result(reference, ref_run, True, None, timed=repeats > 0)]
    evidence: list[ScriptRun | None] = [ref_run]
    for target in targets:
        if target == reference:
            continue
        reason = unavailable_reason(target)
        if reason is None and target.is_compiled:
            reason = "a compile backend for a whole script is not supported yet: give a device"
        if reason is not None:
            results.append(TargetResult(target=target, status="skipped", reason=reason))
            evidence.append(None)
            continue
        say(f"running {script.name} on {target.spec}")
        run = once(target, True, audit)
        correctness = (
            compare_captures(run, ref_run, reference_name) if run.status == "ok" and ref_run.status == "ok" else None
        )
        results.append(_result(target, run, False, correctness, timed=repeats > 0))
        evidence.append(run)
    # the timing runs, in turns (the reference, then each target, N times): drift hits all alike
    timing: list[list[ScriptRun] | None] = [[] if repeats and r.status == "ok" else None for r in results]
    for i in range(repeats):
        for result, runs in zip(results, timing, strict=True):
            if runs is not None:
                say(f"timing {script.name} on {result.target.spec} ({i + 1} of {repeats})")
                runs.append(clean(result.target, not (result.is_reference and as_written)))
    span_ms = [
        _span_samples(t if t is not None else [e] if e is not None else [])
        for t, e in zip(timing, evidence, strict=True)
    ]
    results = [_timed(r, t, s, span_ms[0]) for r, t, s in zip(results, timing, span_ms, strict=True)]
    done = _speedups(results)  # none from single observations
    notes = [] if as_written else [f"the reference ran on {reference.spec}, remapped like the targets"]
    run = RunResult(
        run_id=uuid.uuid4().hex[:12],
        created_at=_now(),
        workload={**workload, "notes": notes},
        environment=env,
        results=tuple(done),
        settings={
            "reference": reference.spec,
            "reference_added": True,  # the basis of every comparison, never a candidate
            "exec": {
                "argv": list(argv),
                "map": list(source_devices),
                "strict": strict,
                "captures": list(captures),
                "seed": seed,
                "timeout_s": timeout_s,
                "as_written": as_written,
                "audit": audit,
                "repeats": repeats,
            },
        },
    )
    (store() if callable(store) else store).save_run(run)
    return run
