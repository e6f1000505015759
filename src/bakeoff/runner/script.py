"""``bakeoff exec``: a team's own script, unchanged, run as a reference and on each target.

Each run is a fresh interpreter (``python -m bakeoff.runner.script_worker``: the launcher of
:mod:`bakeoff.script.launch` with the audit of that module) in its own copy of the working
directory, so one run's output files cannot feed another's (:mod:`bakeoff.runner.script_run`).
The reference runs the script as written where its device exists (else on ``--reference``, by
default the CPU, remapped like a target); each target runs it with the script's devices
remapped to the target's. A compiled target (``cpu+inductor``) also
compiles the script's root module calls with its backend (:mod:`bakeoff.script.compiled`); an
export engine's target is skipped. A run that raises, exits non-zero, dies from a
signal or hangs past the timeout is recorded as that target's failure; the others go on.

What each run captured (its losses, ``--capture``'d return values, ``--capture-modules``' module
outputs, ``bakeoff.capture`` calls) is
compared with the reference's by the correctness check's own rules, capture by capture and call
by call, and so are the files it wrote in its copy of the working directory (new or changed:
safetensors, npy, npz and JSON, read by :mod:`bakeoff.script.outputs` without unpickling
anything), file by file and tensor by tensor, as captures named ``file:PATH``; a file the
reference wrote that a target did not is that target's failure, and files not read (pickles,
other formats, over the size caps, malformed) are notes. The remapper's ledger (every rewrite
with its count and first call site) becomes the target's adjustments, and a rewrite that may
change numerics becomes a note. The run is stored as a run of a ``script:`` workload whose
fingerprint is the script's source, its argv and the files of the working directory the
reference run read (its config, data and own modules: :mod:`bakeoff.script.inputs`).

Each target's run (never the reference's) is audited over the whole script: where its ops ran,
host fallbacks, copies and syncs with their lines in the script, parameters left on the host,
repeated copies of host state, and what ``torch.compile`` did; they are the target's
``placement`` and ``compilation`` checks, judged as a trial's are (see
:mod:`bakeoff.runner.script_worker` for what the audit cannot see and what it costs: the
target's wall time includes it, and a note says so).

Python child processes the script starts (``subprocess``, ``multiprocessing`` with any start
method, DataLoader workers) are remapped as the script is (:mod:`bakeoff.script.children`; never
those of the script as written): their rewrites join the target's ledger, each site marked with
the child processes it came from, and a note says how many ran remapped. They are not audited.

Timing (:mod:`bakeoff.runner.script_timing`): the first run of each side is the evidence, not a
fair clock; ``repeats`` more clean runs a side time it, and the spans between captures are
compared with the reference's.

What it cannot see (yet): where the work of child processes ran, the rewrites of a child that
ended without unwinding, files the script writes outside its working directory or in a format
not read here (pickles are never loaded), and files it deletes.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bakeoff.checks.base import ScriptContext
from bakeoff.checks.script_outputs import listed
from bakeoff.env import capture_environment
from bakeoff.launch.forkserver import ForkServer, forkable
from bakeoff.results.values import ErrorInfo, Latency, RunResult, TargetResult
from bakeoff.runner.script_checks import script_checks
from bakeoff.runner.script_ranks import gloo_interface, job_port
from bakeoff.runner.script_run import ScriptRun, copy_workdir, run_environment, run_script
from bakeoff.runner.script_stdin import remove_shared_stdin
from bakeoff.runner.script_timing import span_samples, speedups, timed
from bakeoff.runner.script_worker import COMPILER, PRELOAD
from bakeoff.script.child_reports import child_notes
from bakeoff.script.modules import budget
from bakeoff.settings.exec import ExecSettings, run_settings
from bakeoff.store.db import Store
from bakeoff.target.detect import unavailable_reason
from bakeoff.target.spec import Target
from bakeoff.units import clip

__all__ = [
    "ScriptRun",
    "copy_workdir",
    "input_digests",
    "run_script",
    "script_workload",
]


def script_workload(
    script: Path, argv: Sequence[str], shown: Path | None = None, inputs: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The workload a script run is stored as: ``script:PATH ARGS`` (``shown``: the path as the
    user gave it, by default ``script``), fingerprinted by the script's source, its argv and the
    files it read (``inputs``: path -> SHA-256 of its content, :func:`input_digests`)."""
    source = script.read_bytes()
    identity = source + b"\0" + json.dumps(list(argv)).encode()
    if inputs:  # none read: the fingerprint of before, so earlier runs stay comparable
        identity += b"\0" + json.dumps(dict(sorted(inputs.items()))).encode()
    digest = hashlib.sha256(identity).hexdigest()[:16]
    script = script if shown is None else shown
    spec = "script:" + " ".join([str(script), *argv])
    return {
        "spec": spec,
        "kind": "script",
        "fingerprint": digest,
        "seed": 0,
        "dtype": "float32",
        "details": {
            "script": str(script),
            "argv": list(argv),
            "source_sha256": hashlib.sha256(source).hexdigest(),
            **({"inputs": dict(sorted(inputs.items()))} if inputs else {}),
        },
    }


def input_digests(workdir: Path, paths: Sequence[str]) -> dict[str, str]:
    """SHA-256 of each file the script read (paths relative to ``workdir``, as the launcher's
    ``inputs_read`` gives them) that is in the user's working directory: a file the run wrote
    and read back is its own output, not an input."""
    found = {}
    for relative in paths:
        path = workdir / relative
        if path.is_file() and not path.is_symlink():
            digest = hashlib.sha256()
            with open(path, "rb") as file:
                for block in iter(lambda: file.read(1 << 20), b""):
                    digest.update(block)
            found[relative] = digest.hexdigest()
    return found


def _misplaced(run: ScriptRun, label: str, device: str) -> ScriptRun:
    """``run`` (the reference, whose row says ``label``, run on ``device``) as an error when the
    evidence says its work was done elsewhere: captured tensors on a device type that is neither
    ``device``'s nor the host's (any script may compute some values on the host). A script that
    picks its own device (``torch.accelerator``, a device named outright) would otherwise pass
    another device's results off as the reference's. What it cannot see: work whose values were
    never captured (a run that captured no tensor is not judged here: nothing is compared)."""
    kind = device.partition(":")[0]
    seen = run.result.get("devices") or {}
    elsewhere = {k: n for k, n in seen.items() if k not in (kind, "cpu")}
    if run.status != "ok" or not elsewhere:
        return run
    where = ", ".join(f"{n} on {k}" for k, n in sorted(elsewhere.items()))
    message = (
        f"the reference, labelled {label}, ran elsewhere ({where} of {sum(seen.values())} captured tensors): "
        f"not a {label} reference; the script chose its device itself (by name, or an API the remap does not cover)"
    )
    error = ErrorInfo("ReferenceDevice", message, "exception", "reference")
    return dataclasses.replace(run, status="error", error=error)


def _processes(server: ForkServer | None) -> str:
    """What the runs' processes were: forked from one that had imported PyTorch, or fresh."""
    if server is None:
        return "each run was a fresh interpreter"
    if server.broken is not None:
        return f"the runs were forked from one process that had imported PyTorch until {server.broken}; then fresh"
    return "each run was forked from one process that had imported PyTorch once (its import is in no run)"


def ranks_device(target: Target, nproc: int) -> tuple[str, str | None]:
    """The device a script's devices become on ``target`` when it runs as ``nproc`` ranks, and a
    note when the ranks share one: a device type with fewer devices here than ranks gets its
    first for every rank (each rank's ``cuda:LOCAL_RANK`` would name a device this machine
    lacks), as ``bakeoff dist`` places its ranks."""
    if nproc <= 1 or target.device == "cpu" or target.index is not None:
        return target.torch_device, None
    from bakeoff.target.detect import device_status

    count = device_status(target.device).count
    if count >= nproc:
        return target.torch_device, None
    shared = f"{target.device}:0"
    note = f"the {nproc} ranks share {shared}: this machine has {count} {target.device} device(s)"
    from bakeoff.distributed.run import ONE_RANK_PER_DEVICE, backend_for

    backend = backend_for(target.device)
    if backend in ONE_RANK_PER_DEVICE:  # the script may pick gloo itself; a group on this one fails
        note += f" ({backend} refuses two ranks on one device: a script on {backend} cannot run so here)"
    return shared, note


def _compile_refusal(target: Target) -> str | None:
    """Why ``target``'s backend cannot compile a script's module calls here, or None."""
    from bakeoff.target.engines import engine_for

    if not engine_for(target.backend or "").dynamo_backend:
        return f"backend '{target.backend}' exports a whole model: bakeoff exec compiles with torch.compile backends"
    if target.precision is not None:
        return "precision= is an engine option bakeoff exec does not apply: drop it"
    return None


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
    unmatched = run.result.get("modules_unmatched") or []
    if unmatched:
        notes.append("no module call matched --capture-modules " + ", ".join(unmatched))
    capped = run.result.get("module_calls_capped") or 0
    if capped:
        calls, size = budget(run.result.get("capture_modules") or ())
        notes.append(
            f"{capped} module call(s) past the cap not captured (at most {calls} calls per "
            f"module, {size >> 20} MiB in all; --capture-modules names what to capture)"
        )
    if run.wall_s is not None and not timed:  # timed: its latency is from the clean runs (script_timing)
        notes.append(f"wall time {run.wall_s:.3g} s is a single observation (one run; time it with --repeats)")
    if run.wall_s is not None and run.result.get("compile"):
        notes.append("wall time includes compiling the root module calls (the compilation check has its time)")
    audit = run.audit or {}
    if run.result.get("placement_of"):
        notes.append(run.result["placement_of"])
    placement = audit.get("placement")
    if run.wall_s is not None and not timed and placement is not None and placement.verdict != "not_applicable":
        spent = (placement.signals.get("script") or {}).get("audit_s")
        if spent is not None:
            notes.append(f"wall time includes the placement audit, {spent:.3g} s of it recording ops")
    if audit.get("error"):
        notes.append(f"placement audit: {audit['error']}")
    unread: dict[str, list[str]] = {}
    for path, why in (run.outputs.skipped if run.outputs is not None else {}).items():
        unread.setdefault(why, []).append(path)
    notes.extend(f"output file(s) {listed(paths)} not compared: {why}" for why, paths in unread.items())
    return notes + child_notes(run.result.get("children"))


def _result(
    target: Target,
    run: ScriptRun,
    is_reference: bool,
    context: ScriptContext | None,
    notes: Sequence[str] = (),
    timed: bool = False,
) -> TargetResult:
    """A run's row: the reference's has no checks; a target's has every check's value over its
    run (:func:`~bakeoff.runner.script_checks.script_checks`) and their notes."""
    checks = script_checks(context) if context is not None else {}
    latency = Latency((run.wall_s * 1e3,)) if run.status == "ok" and run.wall_s is not None else None
    return TargetResult(
        target=target,
        status=run.status,
        is_reference=is_reference,
        latency=latency,
        adjustments=tuple(_adjustments(run)),
        notes=(*_notes(run, timed), *notes, *(context.notes if context is not None else ())),
        error=run.error,
        log=run.log,
        checks=checks,
    )


def exec_script(
    store: Store | Callable[[], Store],
    script: Path,
    argv: Sequence[str],
    targets: Sequence[Target],
    settings: ExecSettings,
    *,
    reference: Target,
    as_written: bool = False,
    progress: Callable[[str], None] | None = None,
    keep_out: Sequence[Path] = (),
    workdir: Path | None = None,
) -> RunResult:
    """Run ``script`` as the reference (as written when ``as_written``, else remapped to
    ``reference``'s device) and on each target, compare, store and return the run, with
    ``settings`` (checked: see :class:`~bakeoff.settings.exec.ExecSettings`). With ``audit``,
    each target's run (not the reference's) is audited for where its work ran and what
    ``torch.compile`` did: its ``placement`` and ``compilation`` checks. ``keep_out``: files of
    the working directory never copied into a run's (the knowledge base and its journals), and
    never counted as the script's. With ``files``, the files each run wrote are compared with
    the reference's (:func:`compare_captures`). ``workdir``: the directory each run gets a copy
    of, ``script`` relative to it (None: the current one); it is stored, so that ``rerun`` can
    run the script again from there. ``capture_modules``: glob patterns of module names whose
    outputs are compared call by call (:mod:`bakeoff.script.modules`).

    ``repeats``: after those runs (the evidence of correctness and placement), run the reference
    and each target that ran this many times more, in turns, without the audit, ``--capture``'s
    tracing, module captures or reading files (a compiled target still compiles), purely to time
    them: each one's latency is then those runs' wall times, and a speed-up against the
    reference is claimed from two or more a side. 0: the latency is the first run's wall time, a
    single observation (a target's includes its audit). Either way the spans between captures
    are compared with the reference's (:mod:`bakeoff.runner.script_timing`)."""
    say = progress or (lambda _msg: None)
    workdir = (Path.cwd() if workdir is None else Path(workdir)).resolve()
    located = script if script.is_absolute() else workdir / script
    db_files = [Path(f"{path}{suffix}") for path in keep_out for suffix in ("", "-wal", "-shm", "-journal")]
    env = capture_environment()

    placed: dict[Target, tuple[str, str | None]] = {}  # each target's device for its ranks, probed once

    def device_for(target: Target) -> tuple[str, str | None]:
        if target not in placed:
            placed[target] = ranks_device(target, settings.nproc)
        return placed[target]

    others = [t for t in targets if t != reference]

    def timing_job(repeat: int, index: int) -> int:
        """The position of the ``repeat``-th timed run of result ``index`` (the reference's is 0):
        after the reference (0), the honest reference (1) and each target's audited run (2...)."""
        return 2 + len(others) + repeat * (1 + len(others)) + index

    nodes = settings.node_layout
    if nodes is not None:  # every job's port exists before the first job runs: the last is one before
        job_port(nodes, timing_job(settings.repeats, 0) - 1)  # where a further repeat would start
    chosen = gloo_interface(nodes.host, os.environ) if nodes is not None else None  # once for every job's ranks
    if chosen is not None:
        say(f"the ranks get GLOO_SOCKET_IFNAME={chosen[0]}: {chosen[1]}")

    def once(
        target: Target, remap: bool, audited: bool, job: int, timing: bool = False, honest: bool = False
    ) -> ScriptRun:
        """One run, the run's job at position ``job`` (fixed whatever runs before it: across
        machines, the same job of each meets at its port); a ``timing`` run is the script alone:
        no audit, captures, modules or files; an ``honest`` one runs under rounding noise (the
        honest reference)."""
        mapping = {src: device_for(target)[0] for src in settings.sources} if remap else {}
        return run_script(
            located, argv, workdir, mapping, strict=settings.strict, captures=() if timing else settings.capture,
            seed=settings.seed, timeout_s=settings.timeout_s, skip=db_files,
            audit=target.torch_device if audited and not timing else None, files=settings.files and not timing,
            capture_modules=() if timing else settings.capture_modules,
            compile=target.spec.partition("+")[2] if remap and target.is_compiled else "", rounding_noise=honest,
            server=server, nproc=settings.nproc, nodes=nodes, job=job, gloo_ifname=chosen[0] if chosen else "",
        )  # fmt: skip

    # every run forked from one warm process that imported PyTorch once, where the platform allows:
    # it shows a script what a fresh launcher would (that launcher too imports PyTorch, in the same
    # environment, before the script's first statement, so a change the script makes to its
    # environment reaches PyTorch no sooner)
    server = ForkServer(PRELOAD, run_environment(settings.seed)) if forkable() else None
    try:
        if nodes is not None:  # each run waits for the other machines' ranks: say where, and for how long
            say(f"node {nodes.rank} of {nodes.count}: this machine's {settings.nproc} rank(s) of each run meet the "
                f"other machines' at {nodes.host}:{nodes.port}, waiting for them up to --timeout "
                f"({settings.timeout_s:g} s)")  # fmt: skip
        say(f"running {script.name} as the reference on {'its own device' if as_written else reference.spec}")
        ref_run = once(reference, not as_written, False, 0)
        ref_run = _misplaced(ref_run, reference.spec, settings.sources[0] if as_written else reference.torch_device)
        if server is not None and ref_run.compiler_imported:
            server.preload(COMPILER)  # the runs after it start with PyTorch's compiler imported
        read = input_digests(workdir, ref_run.result.get("inputs_read") or ())  # as the reference read them
        workload = script_workload(located, argv, shown=script, inputs=read)
        reference_name = "the script as written" if as_written else f"the script on {reference.spec}"
        honest, ref_notes = None, []
        if ref_run.status == "ok" and others:  # judges only the targets' captures: none, no run
            say(f"running {script.name} again as the honest reference (every op within a few units of roundoff)")
            honest = once(reference, not as_written, False, 1, honest=True)
            if honest.status != "ok":
                why = clip(honest.error.message, 200) if honest.error else "it failed"
                ref_notes.append(
                    f"the honest reference (the script again under rounding noise) did not finish: {why}; "
                    "captures are judged by allclose to the reference alone, blind to the spread rounding makes"
                )
                honest = None
        results: list[TargetResult] = []  # the reference's goes first once the runs after it are known
        evidence: list[ScriptRun | None] = [ref_run]
        for target in targets:
            if target == reference:
                continue
            reason = unavailable_reason(target)
            if reason is None and target.amp is not None:
                reason = f"amp={target.amp} is not applied by bakeoff exec: a script's own torch.autocast decides"
            if reason is None and target.dtype is not None:
                reason = f"dtype={target.dtype} is not applied by bakeoff exec: a script's own tensors decide"
                reason += " their dtype"
            if reason is None and target.is_compiled:
                reason = _compile_refusal(target)
            if reason is not None:
                results.append(TargetResult(target=target, status="skipped", reason=reason))
                evidence.append(None)
                continue
            say(f"running {script.name} on {target.spec}")
            run = once(target, True, settings.audit, 2 + others.index(target))
            context = ScriptContext(target, run, ref_run, honest, reference_name)
            shared = device_for(target)[1]
            results.append(_result(target, run, False, context, [shared] if shared else (), settings.repeats > 0))
            evidence.append(run)
        later = [run for run in (honest, *evidence[1:]) if run is not None]
        preloaded = sum(run.compiler_preloaded for run in later)
        if preloaded and ref_run.wall_s is not None and settings.repeats == 0:  # timed: from later runs
            which = "the runs after it" if preloaded == len(later) else f"{preloaded} of the {len(later)} runs after it"
            ref_notes.insert(
                0,
                "its wall time includes importing PyTorch's compiler (torch._dynamo, which the script's "
                f"optimizer or compile imported), which {which} had imported before they started",
            )
        results.insert(0, _result(reference, ref_run, True, None, ref_notes, settings.repeats > 0))
        # the timing runs, in turns (the reference, then each target, N times): drift hits all alike
        timing: list[list[ScriptRun] | None] = [[] if settings.repeats and r.status == "ok" else None for r in results]
        for i in range(settings.repeats):
            for j, (result, runs) in enumerate(zip(results, timing, strict=True)):
                if runs is not None:
                    say(f"timing {script.name} on {result.target.spec} ({i + 1} of {settings.repeats})")
                    remap = not (result.is_reference and as_written)
                    runs.append(once(result.target, remap, False, timing_job(i, j), timing=True))
    finally:
        processes = _processes(server)
        if server is not None:
            server.close()
        remove_shared_stdin()
    span_ms = [
        span_samples(t if t is not None else [e] if e is not None else [])
        for t, e in zip(timing, evidence, strict=True)
    ]
    results = [
        timed(r, t, s, span_ms[0], e.wall_s if e is not None else None)
        for r, t, s, e in zip(results, timing, span_ms, evidence, strict=True)
    ]
    done = speedups(results)  # none from single observations
    notes = [] if as_written else [f"the reference ran on {reference.spec}, remapped like the targets"]
    notes.append(processes)
    run = RunResult(
        run_id=uuid.uuid4().hex[:12],
        created_at=_now(),
        workload={**workload, "notes": notes},
        environment=env,
        results=tuple(done),
        settings=run_settings(
            settings, argv=argv, workdir=str(workdir), reference=reference.spec, as_written=as_written
        ),
    )
    (store() if callable(store) else store).save_run(run)
    return run
