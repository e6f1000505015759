"""One run of a script, in a process of its own: the runner's side of ``bakeoff exec``.

The script's working directory is copied (:func:`copy_workdir`), so one run's output files
cannot feed another's; the run is ``python -m bakeoff.runner.script_worker`` (the launcher of
:mod:`bakeoff.script.launch` with its audit) as a command line in its own process group
(:func:`bakeoff.launch.command.run_command`: past its timeout, or on Ctrl-C, the worker gets
SIGTERM and :data:`STOP_GRACE_S` to end the script and what it started, then the whole group
SIGKILL). What the launcher wrote comes back as a :class:`ScriptRun`: its result, captures,
log, audit and the files it wrote; a timeout, a signal, the script's exception or its non-zero
exit is the run's :class:`~bakeoff.results.values.ErrorInfo`. The run's temporary directory is
named after this process, so that a later run removes it when this one was killed.

Given a fork server (:mod:`bakeoff.launch.forkserver`, started once per ``bakeoff exec`` where
:func:`~bakeoff.launch.forkserver.forkable` allows), the same worker runs forked from that warm
process, in a process group of its own, stopped the same way: the reference and every target alike, each
without the seconds of importing PyTorch again.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bakeoff.errors import SpecError
from bakeoff.launch.command import run_command
from bakeoff.launch.deaths import died
from bakeoff.launch.forkserver import ForkServer
from bakeoff.launch.tempdirs import owned_tempdir
from bakeoff.logtail import LINE_LIMIT, read_lines, tail_text
from bakeoff.results.librarylog import OutputLog
from bakeoff.results.values import ErrorInfo
from bakeoff.script.child_reports import with_children
from bakeoff.script.children import ENV as CHILDREN_ENV
from bakeoff.script.outputs import Outputs, read_outputs, stamp, written
from bakeoff.settings.nodes import Nodes

__all__ = [
    "LINE_LIMIT",
    "MAX_WORKDIR_BYTES",
    "SKIP_DIRS",
    "STOP_GRACE_S",
    "WORKER",
    "ScriptRun",
    "copy_workdir",
    "run_environment",
    "run_script",
]

#: Environment variables a script's run does not get: they name bakeoff's own files (the
#: knowledge base and its artifacts) and the directory bakeoff was started in.
_KEPT_FROM_SCRIPTS = ("BAKEOFF_DB", "BAKEOFF_ARTIFACTS", "OLDPWD")
#: Directories never copied into a run's working directory.
SKIP_DIRS = frozenset({".git", ".hg", ".venv", "venv", "__pycache__", "node_modules", ".mypy_cache", ".ruff_cache"})
#: The largest working directory a run copies (bytes); a larger one needs --workdir.
MAX_WORKDIR_BYTES = 512 * 2**20


@dataclass(frozen=True)
class ScriptRun:
    """One run of the script: what the launcher wrote (``result``, the captures by name and
    call), how the process ended (``status`` ok or error, with ``error``) and the files it wrote
    in its working directory (``outputs``; None when they were not looked at); whether the script
    imported PyTorch's compiler (``compiler_imported``), and whether the run started with it
    imported, forked from a server that had (``compiler_preloaded``)."""

    status: str
    wall_s: float | None
    result: dict[str, Any] = field(default_factory=dict)
    captures: dict[str, list[Any]] = field(default_factory=dict)
    error: ErrorInfo | None = None
    log: tuple[dict[str, Any], ...] = ()
    audit: dict[str, Any] | None = None
    outputs: Outputs | None = None
    compiler_imported: bool = False
    compiler_preloaded: bool = False


#: The module a run's process runs.
WORKER = "bakeoff.runner.script_worker"


def run_environment(seed: int) -> dict[str, str]:
    """The environment every run of the script gets (with ``PWD``, its own directory): this
    process's, with the hash seed fixed and bakeoff's own variables left out."""
    from bakeoff.runner.script_worker import PARENT_ENV

    env = {**os.environ, "PYTHONHASHSEED": str(seed), PARENT_ENV: str(os.getpid())}
    env.pop(CHILDREN_ENV, None)  # bakeoff exec inside a remapped script: the launcher starts clean
    for name in _KEPT_FROM_SCRIPTS:  # where bakeoff keeps its own files is none of the script's business
        env.pop(name, None)
    return env


def copy_workdir(source: Path, into: Path, skip: Sequence[Path] = ()) -> Path:
    """Copy ``source`` to ``into`` (version-control, virtual-environment and cache directories and
    ``skip`` left out), so that a run's outputs stay its own.

    Raises:
        SpecError: the directory holds more than :data:`MAX_WORKDIR_BYTES`.
    """
    skipped = {p.resolve() for p in skip}
    total = 0
    for root, dirs, files in os.walk(source):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
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
        return [n for n in names if n in SKIP_DIRS or Path(directory, n).resolve() in skipped]

    shutil.copytree(source, into, ignore=ignore, symlinks=True)
    return into


#: How long a stopped run's supervisor may take to end the script and what it started.
STOP_GRACE_S = 5.0


def _log_lines(out: Path, log: OutputLog, who: str = "script") -> None:
    for source in ("stdout", "stderr"):
        path = out / f"{source}.txt"
        if path.exists():
            for line in read_lines(path):
                if line.strip():
                    log.add(source, who, line.rstrip())


#: How much of the end of stderr a failure's tail is read from.
TAIL_CHARS = 65536


def _tail(out: Path, lines: int = 20) -> str:
    end = tail_text(out / "stderr.txt", TAIL_CHARS)
    return "\n".join(line[:LINE_LIMIT] for line in end.splitlines()[-lines:])


def _failure(code: int | None, result: dict[str, Any], out: Path, timeout_s: float) -> ErrorInfo | None:
    """How the run failed (None: it did not): a timeout, a signal, the script's exception or
    its non-zero exit."""
    if code is None:
        return ErrorInfo("Timeout", f"no end within {timeout_s:g} s", "timeout", "script", _tail(out))
    if code < 0:
        return died(code, "", phase="script", log=_tail(out))
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
            tail = _tail(out, 3)
            message = f"the script's process exited with code {code} before bakeoff could record its result "
            message += "(os._exit, or a crash in native code)" + (f": {tail}" if tail else "")
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
    files: bool = True,
    capture_modules: Sequence[str] = (),
    compile: str = "",
    rounding_noise: bool = False,
    server: ForkServer | None = None,
    nproc: int = 1,
    nodes: Nodes | None = None,
    job: int = 0,
    gloo_ifname: str = "",
) -> ScriptRun:
    """Run ``script`` once in a copy of ``workdir`` under ``mapping`` (empty: as written);
    with ``audit`` (the target's device), audit where its work ran
    (:mod:`bakeoff.runner.script_worker`); with ``files``, read the files it wrote
    (:mod:`bakeoff.script.outputs`; ``skip``, bakeoff's own files, never count); with
    ``compile`` (``BACKEND[?OPTIONS]``), compile its root module calls
    (:mod:`bakeoff.script.compiled`); with ``rounding_noise``, perturb every arithmetic op's
    result by a few units of roundoff (:mod:`bakeoff.checks.rounding`, seeded by ``seed``);
    with ``server`` (started with :data:`~bakeoff.runner.script_worker.PRELOAD` in
    :func:`run_environment` of ``seed``), forked from that warm process instead of a fresh
    interpreter (a fresh one when the server cannot, and again in a fresh one when the script
    changes a variable the server's preloaded compiler read:
    :mod:`bakeoff.script.compiler_preload`); with ``nproc`` over 1, as that many ranks
    of a torchrun-style job (:mod:`bakeoff.runner.script_ranks`); with ``nodes``, as this
    machine's ``nproc`` ranks of a job across machines, the run's job at position ``job``, its ranks
    given ``GLOO_SOCKET_IFNAME=gloo_ifname`` where that is not empty
    (:func:`~bakeoff.runner.script_ranks.gloo_interface`, decided once for the whole exec).

    The run's temporary directory is named after this process, so that a later run removes it
    when this process was killed before it could (:mod:`bakeoff.launch.tempdirs`)."""

    from bakeoff.runner.script_worker import COMPILER, COMPILER_USED, FRESH

    ranks = _Ranks(nproc, nodes, job, gloo_ifname)

    def attempt(server: ForkServer | None) -> ScriptRun | None:
        """The run once, forked from ``server`` where it is given; None when a forked run must
        start again in a fresh interpreter (:mod:`bakeoff.script.compiler_preload`)."""
        base = owned_tempdir("exec")
        try:
            work = copy_workdir(workdir, base / "work", skip)
            before = stamp(work, SKIP_DIRS) if files else {}
            relative = (
                script.resolve().relative_to(workdir.resolve())
                if script.resolve().is_relative_to(workdir.resolve())
                else None
            )
            path = str(relative) if relative is not None else str(script.resolve())  # call sites read train.py:19

            def arguments(out: Path, audited: str | None) -> list[str]:
                """The worker's command line after ``python -m WORKER``."""
                args = ["--out", str(out), "--seed", str(seed)]
                args += ["--audit", audited] if audited else []
                args += ["--rounding-noise", str(seed)] if rounding_noise else []
                args += [arg for src, dst in mapping.items() for arg in ("--map", f"{src}={dst}")]
                args += ["--strict"] if strict else []
                args += [arg for name in captures for arg in ("--capture", name)]
                args += [arg for pattern in capture_modules for arg in ("--capture-modules", pattern)]
                args += ["--compile", compile] if compile else []
                return [*args, "--", path, *argv]

            env = {**run_environment(seed), "PWD": str(work)}
            if ranks.nproc > 1 or ranks.nodes is not None:
                read = _ranks(arguments, env, work, base, ranks, timeout_s, audit, server)
            else:
                read = _single(arguments, env, work, base, timeout_s, audit, server)
            result, captured, error, log, audited = read
            if server is not None and any((base / "out").rglob(FRESH)):
                return None
            wall = result.get("wall_s") if error is None or error.category != "timeout" else None
            outputs = None
            if files:
                ours = {p.resolve().relative_to(workdir.resolve()).as_posix() for p in skip if _inside(p, workdir)}
                outputs = read_outputs(work, written(work, before, SKIP_DIRS, ours))
            status = "ok" if error is None else "error"
            compiler = any((base / "out").rglob(COMPILER_USED))
            preloaded = server is not None and COMPILER in server.preloaded
            return ScriptRun(
                status, wall, result, captured, error, log.entries(), audited, outputs, compiler, preloaded
            )
        finally:
            shutil.rmtree(base, ignore_errors=True)

    forks = server if server is not None and server.env == run_environment(seed) else None
    run = attempt(forks) if forks is not None else None
    # None: no server, or the script changed what the server's preloaded compiler read
    return run if run is not None else attempt(None)  # type: ignore[return-value]


#: What one run (or rank) left: its result, captures, error, output and audit.
_Read = tuple[dict[str, Any], dict[str, list[Any]], ErrorInfo | None, OutputLog, dict[str, Any] | None]


def _read(out: Path, code: int | None, timeout_s: float, audit: str | None, log: OutputLog, who: str) -> _Read:
    """What the worker that wrote to ``out`` left, its output added to ``log`` as ``who``'s."""
    from bakeoff.runner.script_worker import read_audit
    from bakeoff.script.capture import Captures

    _log_lines(out, log, who)
    result_path = out / "result.json"
    result = json.loads(result_path.read_text()) if result_path.exists() else {}
    captured = {}
    if (out / "captures.safetensors").exists():
        found = Captures.from_safetensors(out / "captures.safetensors")
        captured = {name: list(found[name]) for name in found.names()}
    error = _failure(code, result, out, timeout_s)
    result = with_children(result, out) if result else result
    return result, captured, error, log, read_audit(out) if audit else None


def _single(
    arguments: Any, env: dict[str, str], work: Path, base: Path, timeout_s: float, audit: str | None,
    server: ForkServer | None,
) -> _Read:  # fmt: skip
    """One process: past its time, or on Ctrl-C, SIGTERM to the worker, which ends the script
    and then what the script started (a process detached with setsid included), then SIGKILL to
    the run's whole process group for anything left in it."""
    out = base / "out"
    out.mkdir()
    args = arguments(out, audit)
    ran = None
    if server is not None:
        streams = (out / "stdout.txt", out / "stderr.txt")
        ran = server.run(f"{WORKER}:forked", args, env, work, *streams, timeout_s, STOP_GRACE_S)
    if ran is None:  # a fresh interpreter
        with open(out / "stdout.txt", "wb") as stdout, open(out / "stderr.txt", "wb") as stderr:
            command = [sys.executable, "-m", WORKER, *args]
            ran = run_command(command, env, timeout_s, cwd=work, stdout=stdout, stderr=stderr, grace_s=STOP_GRACE_S)
    return _read(out, ran.code, timeout_s, audit, OutputLog(), "script")


@dataclass(frozen=True)
class _Ranks:
    """A run's ranks on this machine: ``nproc`` of them, this machine's place in a job across
    machines (``nodes``, None: the loopback alone) and the run's job position there."""

    nproc: int
    nodes: Nodes | None = None
    job: int = 0
    gloo_ifname: str = ""  # the interface gloo is told to use, where it must be


def _ranks(
    arguments: Any, env: dict[str, str], work: Path, base: Path, ranks: _Ranks, timeout_s: float, audit: str | None,
    server: ForkServer | None,
) -> _Read:  # fmt: skip
    """``ranks.nproc`` processes as one job, torchrun's way (:mod:`bakeoff.runner.script_ranks`)."""
    import uuid

    from bakeoff.launch.group import Member, forked_member, run_group, start_command, stop
    from bakeoff.runner.script_ranks import (
        first_rank,
        free_port,
        hang_site,
        job_port,
        merged,
        torchrun_env,
        worst_placement,
    )
    from bakeoff.runner.script_worker import ENDED, STACKS

    nproc, nodes = ranks.nproc, ranks.nodes
    port = job_port(nodes, ranks.job) if nodes is not None else free_port()
    run_id = uuid.uuid4().hex[:8] if nodes is None else f"bakeoff-{nodes.host}-{port}"  # alike on every machine
    outs = [base / "out" / f"rank{rank}" for rank in range(nproc)]
    members: list[Member] = []
    try:
        for rank, out in enumerate(outs):
            out.mkdir(parents=True)
            rank_env = {**env, **torchrun_env(rank, nproc, port, env, run_id, nodes)}
            if ranks.gloo_ifname:
                rank_env["GLOO_SOCKET_IFNAME"] = ranks.gloo_ifname
            args = arguments(out, audit)
            streams = (out / "stdout.txt", out / "stderr.txt")
            member = forked_member(server, f"{WORKER}:forked", args, rank_env, work, *streams) if server else None
            if member is None:
                with open(streams[0], "wb") as stdout, open(streams[1], "wb") as stderr:
                    member = start_command([sys.executable, "-m", WORKER, *args], rank_env, work, stdout, stderr)
            members.append(member)
        end = run_group(members, timeout_s, STOP_GRACE_S, on_timeout=lambda running: _ask_stacks(members, running))
    except BaseException:  # a start that failed half-way, or Ctrl-C: the ranks started go
        stop(members)
        raise
    log = OutputLog()
    offset = first_rank(nodes, nproc)
    read = [
        _read(out, end.ran[rank].code, timeout_s, audit, log, f"rank {offset + rank}") for rank, out in enumerate(outs)
    ]
    sites = {}
    for rank in (r for r, ran in enumerate(end.ran) if ran.timed_out):
        stacks = outs[rank] / STACKS
        found = hang_site(stacks.read_text(errors="replace"), work.resolve()) if stacks.exists() else None
        if found is not None:
            sites[rank] = found
    ended = {}
    for rank, out in enumerate(outs):
        try:
            ended[rank] = float((out / ENDED).read_text())
        except (OSError, ValueError):
            pass
    parts = [r[0] for r in read], [r[1] for r in read], [r[2] for r in read]
    result, captured, error = merged(end, *parts, timeout_s, sites, ended, nodes)
    audited, note = worst_placement([r[4] for r in read], offset)
    if note:
        result["placement_of"] = note
    return result, captured, error, log, audited


def _ask_stacks(members: Sequence[Any], running: Sequence[int], wait_s: float = 1.0) -> None:
    """Ask each rank still running for its Python stacks (the worker's supervisor passes the
    signal on; ``faulthandler`` writes them to :data:`STACKS`), and give them ``wait_s``."""
    import time

    from bakeoff.runner.script_worker import STACKS_SIGNAL

    if STACKS_SIGNAL is None:
        return
    for i in running:
        try:
            os.kill(members[i].pid, STACKS_SIGNAL)
        except (ProcessLookupError, PermissionError):
            pass
    time.sleep(wait_s)


def _inside(path: Path, directory: Path) -> bool:
    return path.resolve().is_relative_to(directory.resolve())
