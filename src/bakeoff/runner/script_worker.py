"""The process one ``bakeoff exec`` run is: the launcher, plus the audit of where the work ran.

::

    python -m bakeoff.runner.script_worker [--audit DEVICE] LAUNCHER-ARGUMENTS...

It takes the arguments of :mod:`bakeoff.script.launch` (and behaves as it does: the same
``result.json``, ``captures.safetensors`` and exit code). With ``--audit DEVICE`` (the target's
device, ``emu`` or ``xpu:0``) a :class:`ScriptAudit` watches the whole script run and writes
``audit.json`` (:data:`AUDIT`) beside the result: a :class:`~bakeoff.checks.placement.Placement`
judged by the placement check's own :func:`~bakeoff.checks.placement.judge`, and a
:class:`~bakeoff.checks.compilation.Compilation` when the script called ``torch.compile``. The
launcher sits in a lower layer than the checks, so it takes the audit as its ``around`` hook.

What the audit counts, on a device that is not the host:

* op calls (ATen ops, through a ``TorchDispatchMode`` on the script's thread) on the device and
  on the host. Work the script itself does on host tensors (data preparation, metrics on values
  it moved to the host) is counted in ``signals["script"]["host_only_ops"]`` and is not a
  fallback: the script as written does it on the host too. A device op that reads a non-scalar
  host tensor is (a real device refuses or copies it), and so is every op a backend reports it
  ran on the host (the emu test device's own counter);
* host<->device copies (count, bytes, first call site in the script's code, per site); a copy of
  a host tensor that was already copied to the device before (the same tensor object) is host
  state left behind: one the script keeps on the host and sends to the device again and again;
* host syncs (``.item()``, ``nonzero``...; :data:`~bakeoff.checks.dispatch_audit.HOST_SYNC_OPS`),
  with the first call site of each;
* parameters and buffers on the host of every ``nn.Module`` the script ran (a global forward
  hook: checked each time a module runs until it is clean; not inside a graph dynamo traces,
  where the hook would break the graph: a compiled module's parameters are seen through the ops
  of an ``eager`` or ``aot_eager`` graph only), and a Hugging Face ``hf_device_map`` placing
  modules on the cpu or disk;
* ``torch.compile``: dynamo's own counters and logs (:class:`~bakeoff.target.dynamo.CompileWatch`),
  from the script's first call of ``torch.compile``: graphs, graph breaks with their source
  lines, recompilations with their reasons.

What it cannot see: work inside a compiled graph whose kernels are not ATen ops (inductor's,
a vendor backend's; an ``eager`` or ``aot_eager`` graph's ops are seen), work in other threads
(a dispatch mode is per thread; module hooks are global, so their parameter check still
covers modules run in threads) and in child processes the script starts, a backend's host
fallback below the dispatcher unless the backend counts it (the emu test device does; MPS's
CPU fallback, for one, does not), copies made inside C++ (a DataLoader's pinned-memory thread),
and compilations through ``torch._dynamo.optimize`` without ``torch.compile`` (their counters
are read, without graph-break lines). A round trip (device to host and back) is counted but not
judged: in a whole script it is often the script's intent (a sampling loop).

Its cost: every ATen op passes through a Python call. After :data:`MAX_AUDITED_OPS` op calls
the audit records only copies between the host and the device and host syncs, over the whole
run (a host tensor sent to the device every training step after an evaluation pass that filled
the window is still found), and counts the other op calls (the scope says so); past the window
the overhead is that call and a name lookup; ``signals["script"]["audit_s"]`` is the time spent
recording. The reference runs without it, so a target's wall time includes it: a note says so
(``bakeoff exec --repeats`` times both sides over more runs without it).

Every run of one ``bakeoff exec`` reads the same stdin (:func:`script_stdin`, see
:mod:`bakeoff.runner.script_stdin`): a copy of bakeoff's own, or ``/dev/null`` for a terminal.

On POSIX the worker is two processes: this one forks the run and stays its supervisor, a child
subreaper on Linux (``PR_SET_CHILD_SUBREAPER``: what the script starts and leaves behind, a
process detached with ``setsid`` included, becomes its child when its own parent ends). When the
run ends, it gives what the script started a moment to end by itself, kills what is still
running, reaps it, and exits as the run did (its code, or the signal it died of). What it did
(:data:`PROCESSES`) becomes the run's notes (:func:`bakeoff.script.child_reports.child_notes`).
What it cannot clean up: what left the process group when the whole group is killed (the
runner's kill on a timeout takes the supervisor too, so a process detached with ``setsid`` stays;
a SIGTERM to the supervisor ends the run and cleans up first), and, off Linux (no subreaper), a
detached process whose own parent had already ended.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bakeoff.checks.script_audit import AUDIT, MAX_AUDITED_OPS, ScriptAudit, read_audit
from bakeoff.launch.reaping import descendants, end_all, running, subreaper
from bakeoff.runner.script_stdin import STDIN_CAP, script_stdin
from bakeoff.script import launch as launcher
from bakeoff.script.child_reports import PROCESSES

__all__ = [
    "AUDIT",
    "COMPILER",
    "COMPILER_USED",
    "ENDED",
    "FRESH",
    "FRESH_EXIT",
    "MAX_AUDITED_OPS",
    "PARENT_ENV",
    "PRELOAD",
    "PROCESSES",
    "STACKS",
    "STACKS_SIGNAL",
    "STDIN_CAP",
    "ScriptAudit",
    "forked",
    "main",
    "read_audit",
    "script_stdin",
]

#: Asks a run for its Python stacks (:data:`STACKS`, written by ``faulthandler`` under its
#: output directory): the supervisor passes it on to the run. How a hung rank is found.
STACKS_SIGNAL = getattr(signal, "SIGUSR1", None)
STACKS = "stacks.txt"
#: When the script's process ended (seconds since the epoch), written by its supervisor.
ENDED = "ended.txt"
#: The open file ``faulthandler`` writes the stacks to (kept for the life of the run).
_stacks_file: Any = None

#: The bakeoff process that started the worker: the worker dies with it (a ``kill -9`` included).
PARENT_ENV = "BAKEOFF_EXEC_PARENT"
#: How long what the script started may take to end by itself once the script has ended.
_GRACE_S = 1.0
#: How long the supervisor keeps killing and reaping before it gives up on a process.
_REAP_S = 10.0


def _end_descendants(grace_s: float = _GRACE_S) -> list[str]:
    """Kill what the script started that is still running (after ``grace_s`` to end by itself)
    and reap it: ``name (pid N)`` of each one killed."""
    return end_all(lambda: [p for p in descendants() if running(p)], grace_s, _REAP_S)


#: What the supervisor gets when the process that started it ends (a ``kill -9`` of bakeoff):
#: caught, so that it kills the run and everything the run started before it goes itself (with
#: SIGKILL, the script's own children would outlive it, reparented to init).
ORPHANED_SIGNAL = getattr(signal, "SIGUSR2", None)


def _end_when_orphaned() -> None:
    """On :data:`ORPHANED_SIGNAL`, kill every descendant (the run, and what it started: a
    subreaper's orphans included) and exit."""

    def orphaned(_signum: int, _frame: Any) -> None:
        _end_descendants(grace_s=0.0)
        os._exit(1)

    if ORPHANED_SIGNAL is not None:
        signal.signal(ORPHANED_SIGNAL, orphaned)


def _out_dir(argv: Sequence[str]) -> Path | None:
    split = argv.index("--") if "--" in argv else len(argv)
    for at, arg in enumerate(argv[:split]):
        if arg == "--out" and at + 1 < split:
            return Path(argv[at + 1])
        if arg.startswith("--out="):
            return Path(arg.removeprefix("--out="))
    return None


def _supervise(run: int, out: Path | None, stdin_note: str | None) -> int:
    """Wait for the run (process ``run``), end and reap what it left running, write
    :data:`PROCESSES`, and return its exit code; a run that died of a signal is mirrored (this
    process dies of the same signal, so the runner classifies the death as before)."""

    def forward(signum: int, _frame: Any) -> None:  # the run ends first; the cleanup follows
        try:
            os.kill(run, signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, STACKS_SIGNAL):
        if signum is not None:
            signal.signal(signum, forward)
    _, status = os.waitpid(run, 0)
    ended = time.time()
    code = os.waitstatus_to_exitcode(status)
    if out is not None and out.is_dir():  # when the script's process ended: which rank failed first
        try:
            (out / ENDED).write_text(repr(ended))
        except OSError:
            pass
    killed = _end_descendants()
    if out is not None and out.is_dir():
        try:
            (out / PROCESSES).write_text(json.dumps({"stdin": stdin_note, "killed": killed}) + "\n")
        except OSError:
            pass
    if code < 0:
        try:
            signal.signal(-code, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL and SIGSTOP take no handler: theirs is the default already
            pass
        os.kill(os.getpid(), -code)
        code = 128 - code
    return code


def _answer_stacks(out: Path | None) -> None:
    """Write every thread's Python stack to :data:`STACKS` under ``out`` on :data:`STACKS_SIGNAL`."""
    global _stacks_file
    if out is None or STACKS_SIGNAL is None:
        return
    import faulthandler

    try:
        out.mkdir(parents=True, exist_ok=True)
        _stacks_file = open(out / STACKS, "w")
        faulthandler.register(STACKS_SIGNAL, file=_stacks_file, all_threads=True)
    except (OSError, RuntimeError, ValueError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: ``[--audit DEVICE | --rounding-noise SEED]`` then the launcher's own
    arguments; ``--rounding-noise`` runs the script under
    :class:`bakeoff.checks.rounding.RoundingNoise` (the honest reference of ``bakeoff exec``).
    On POSIX the script runs in a forked child of this process, which supervises it (see the
    module docstring). Where PyTorch's compiler was imported before the run began (a run forked
    from a server that preloaded :data:`COMPILER`), its guard watches the script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    device = None
    split = argv.index("--") if "--" in argv else len(argv)
    if "--audit" in argv[:split]:
        at = argv.index("--audit")
        if at + 1 >= split:
            print(f"{launcher.PROG}: --audit needs a device", file=sys.stderr)
            return 2
        device = argv[at + 1]
        del argv[at : at + 2]
    around = (lambda out: ScriptAudit(device, out)) if device is not None else None
    if "--rounding-noise" in argv[:split]:  # the honest reference: every op within a few roundoffs
        at = argv.index("--rounding-noise")
        seed = argv[at + 1] if at + 1 < split else ""
        if not seed.isdigit() or device is not None:
            print(f"{launcher.PROG}: --rounding-noise needs a seed (and no --audit)", file=sys.stderr)
            return 2
        del argv[at : at + 2]
        from bakeoff.checks.rounding import RoundingNoise

        around = lambda _out: RoundingNoise(int(seed), any_policy=True)  # noqa: E731
    parent = os.environ.pop(PARENT_ENV, "")
    from bakeoff.launch.forkserver import server_pid
    from bakeoff.launch.process import die_with_parent

    watched = server_pid() or (int(parent) if parent.isdigit() else None)  # the process that started this one

    if os.name == "posix":
        stdin_note = script_stdin(parent)
        subreaper()
        supervisor = os.getpid()
        run = os.fork()
        if run:
            if watched is not None:  # a kill -9 of bakeoff: the supervisor ends the run and what it started
                _end_when_orphaned()
                die_with_parent(watched, ORPHANED_SIGNAL or signal.SIGKILL)
            return _supervise(run, _out_dir(argv), stdin_note)
        die_with_parent(supervisor)
        _answer_stacks(_out_dir(argv))
    elif watched is not None:  # a kill -9 of bakeoff takes the script with it
        die_with_parent(watched)
    out = _out_dir(argv)
    if COMPILER in sys.modules and out is not None:
        from bakeoff.script.compiler_preload import guard

        guard(out / FRESH, FRESH_EXIT)
    code = launcher.main(argv, around=around)
    if out is not None and "torch._dynamo" in sys.modules:
        (out / COMPILER_USED).touch()
    return code


#: The file a forked run leaves in its output directory when it must start again in a fresh
#: interpreter (:mod:`bakeoff.script.compiler_preload`; it names the variable), and its exit code.
FRESH = "fresh.txt"
FRESH_EXIT = 75

#: What a fork server (:mod:`bakeoff.launch.forkserver`) imports before it forks runs: what a
#: run's process imports before the script's first statement, except what enabling a device does.
PRELOAD = ("torch", "numpy", "bakeoff.runner.script_worker", "bakeoff.script.remap", "bakeoff.checks.rounding")
#: PyTorch's compiler, which a script's first optimizer imports: the runs (and a job's ranks) after
#: the first that imported it are forked from a server that imported this too
#: (:mod:`bakeoff.script.compiler_preload`: a run that changes what it read starts fresh).
COMPILER = "bakeoff.script.compiler_preload"
#: The file a run leaves in its output directory when its script imported PyTorch's compiler.
COMPILER_USED = "compiler-imported"


def forked(argv: Sequence[str]) -> int:
    """:func:`main` in a run forked from a fork server that imported :data:`PRELOAD` (and
    perhaps :data:`COMPILER`): the
    launcher's clock and directory start here (:func:`bakeoff.script.launch.restart`), and the
    run dies with the server (which dies with bakeoff)."""
    launcher.restart()
    return main(argv)


if __name__ == "__main__":
    sys.exit(main())
