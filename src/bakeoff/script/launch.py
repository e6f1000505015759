"""Run a team's script once, unchanged, in this process: remapped, seeded, its values captured.

::

    python -m bakeoff.script.launch --out OUTDIR [--map cuda=DEVICE]... [--strict]
        [--capture MODULE:FUNCTION]... [--capture-modules PATTERN]... [--compile BACKEND[?OPTIONS]]
        [--seed N] [--no-losses] -- SCRIPT [ARGS...]

A runner spawns this in a fresh process whose working directory is a copy of the user's, enforces
the timeout by killing it, and reads what it wrote. The script runs as ``python SCRIPT ARGS``
would run it (``__name__ == "__main__"``, ``sys.argv == [SCRIPT, *ARGS]``, ``sys.path[0]`` its
directory, through :func:`runpy.run_path`), with ``random``, ``torch`` and ``numpy`` seeded, inside
a :class:`~bakeoff.script.remap.Remapper` when ``--map`` is given (none: the script runs as written,
the reference on a machine that has its device) and a :func:`~bakeoff.script.capture.recording`.
With ``--map``, the Python processes the script starts are remapped too
(:mod:`bakeoff.script.children`: each writes its ledger under ``OUTDIR/children``).
Its stdout and stderr are the process's own; the launcher itself prints nothing to stdout, and
on stderr only one line for a bad argument (exit 2) or a launcher problem.

Whatever happens to the script (an exception, ``sys.exit(n)``, a strict remap refusing a
rewrite), two files are written to ``OUTDIR``, captures first, each atomically:

* ``captures.safetensors``: the captured values (:class:`~bakeoff.script.capture.Captures`; empty
  when nothing was captured);
* ``result.json``: :class:`LaunchResult` (its keys are its fields; :func:`read_result` reads it).

The process exits with the script's code: 0, the code of its ``SystemExit``, or 1 for an uncaught
exception (its traceback printed to stderr as Python would, without the launcher's frames).

``--capture-modules PATTERN`` records the outputs of every module call whose qualified name
(``Net.encoder.0``) or class name matches the glob, as ``module:QUALNAME`` captures, up to a
cap per module (:mod:`bakeoff.script.modules`).

``--compile BACKEND[?OPTIONS]`` (a target's backend and its options, as in a target spec after
the device: ``aot_eager``, ``inductor?dynamic=true``) compiles every root module call with that
backend, each a rewrite in the ledger (:mod:`bakeoff.script.compiled`).

``--capture MODULE:FUNCTION`` records each return value of a function under that name, call by
call (:mod:`bakeoff.script.returns`: how it finds the calls, what it cannot see, what it costs).

``wall_s`` is the script's run time, from its first statement to its end; ``startup_s`` is the
launcher's time before it (importing PyTorch, enabling a device, seeding, installing the remap),
from the launcher's first statement (the interpreter's own start is not counted).
``capture_times`` holds, per capture name, the time of each call (on the same clock, from the
script's start, when its value had been copied to the host): the runner's spans between captures.

What it cannot see: a script that ends the process without unwinding (``os._exit``, a crash, a
kill) leaves no ``result.json``; the runner treats that as a crash. ``__file__`` is the path as
given (Python 3.9 and later make it absolute), so call sites in the ledger read the same in every
copy of the working directory. ``PYTHONHASHSEED`` cannot be set from inside the process.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import runpy
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from types import TracebackType
from typing import Any

from bakeoff.errors import BakeoffError, RemapError
from bakeoff.script import ledger
from bakeoff.script.capture import Captures, recording
from bakeoff.script.children import remapped_children
from bakeoff.script.devices import DeviceMap
from bakeoff.script.inputs import InputFiles
from bakeoff.script.launch_result import CAPTURES, FORMAT, RESULT, LaunchResult, ScriptError, read_result
from bakeoff.script.modules import NONE, ModuleCalls, check_patterns
from bakeoff.script.process_groups import kept_process_groups
from bakeoff.script.replicas import FinalWeights
from bakeoff.script.returns import Returns

_STARTED = time.perf_counter()


def restart() -> None:
    """Start the launcher's clock (``startup_s``) and the ledger's directory (call sites named
    relative to it) now, in the run's own directory: in a run forked from a warm process
    (:mod:`bakeoff.launch.forkserver`), where this module was imported before the run began."""
    global _STARTED
    _STARTED = time.perf_counter()
    ledger._STARTED_IN = os.getcwd()


__all__ = [
    "CAPTURES",
    "FORMAT",
    "RESULT",
    "LaunchResult",
    "ScriptError",
    "is_capture_name",
    "launch",
    "main",
    "read_result",
    "restart",
]

PROG = "python -m bakeoff.script.launch"
_USAGE = f"{PROG} --out OUTDIR [--map cuda=DEVICE]... [--strict] [--capture MODULE:FUNCTION]... -- SCRIPT [ARGS...]"
_QUALNAME = re.compile(r"^(?:[A-Za-z_]\w*|<locals>)(?:\.(?:[A-Za-z_]\w*|<locals>))*$")
_MODULE = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")


def is_capture_name(spec: str) -> bool:
    """Whether ``spec`` is ``MODULE:FUNCTION``: a module's dotted name and a function's
    qualified name (``<locals>`` allowed), as ``--capture`` takes them."""
    module, sep, qualname = spec.partition(":")
    return bool(sep and _MODULE.match(module) and _QUALNAME.match(qualname))


#: The files of the launcher's own frames above the script's (runpy's is ``<frozen runpy>`` when frozen).
_LAUNCHER_FILES = frozenset({os.path.abspath(__file__), runpy.run_path.__code__.co_filename})


def _exit_code(exc: SystemExit) -> int:
    """The process status of ``sys.exit(code)``, as Python gives it (a message exits 1)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return int(exc.code)
    print(exc.code, file=sys.stderr)  # what Python does with sys.exit("message")
    return 1


def _own_frames_dropped(tb: TracebackType | None) -> TracebackType | None:
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename not in _LAUNCHER_FILES and os.path.abspath(filename) not in _LAUNCHER_FILES:
            break
        tb = tb.tb_next
    return tb


def _script_error(exc: BaseException, phase: str) -> ScriptError:
    tb = _own_frames_dropped(exc.__traceback__)
    text = "".join(traceback.format_exception(type(exc), exc, tb))
    message = exc.one_line() if isinstance(exc, BakeoffError) else str(exc)
    return ScriptError(type=type(exc).__qualname__, message=message, traceback=text, phase=phase)


def _print_uncaught(exc: BaseException) -> None:
    """The traceback Python would print for the script (through its ``sys.excepthook``, which
    reads the exception's own traceback: the launcher's frames are dropped from it)."""
    tb = _own_frames_dropped(exc.__traceback__)
    exc.__traceback__ = tb
    try:
        sys.excepthook(type(exc), exc, tb)
    except Exception:
        traceback.print_exception(type(exc), exc, tb)


def _compile_target(text: str) -> Any:
    """The target whose compile options ``BACKEND[?OPTIONS]`` are (its device does not matter)."""
    from bakeoff.target.spec import parse_target

    target = parse_target("cpu+" + text)
    if not target.is_compiled:
        raise BakeoffError(f"no backend in {text!r}", hint="give a torch.compile backend, e.g. aot_eager")
    return target


def _seed(seed: int) -> None:
    import random

    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy
    except ImportError:
        return
    numpy.random.seed(seed)


def _write_atomically(path: Path, write: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def launch(
    script: str,
    args: Sequence[str] = (),
    *,
    out: str | Path,
    mapping: Mapping[str, str] | None = None,
    strict: bool = False,
    capture: Sequence[str] = (),
    seed: int = 0,
    losses: bool = True,
    capture_modules: Sequence[str] = (),
    compile: str = "",
    started_at: float | None = None,
    around: Callable[[Path], AbstractContextManager[Any]] | None = None,
) -> LaunchResult:
    """Run ``script`` with ``args`` in this process and write ``result.json`` and
    ``captures.safetensors`` to ``out``; see the module's docstring. ``sys.argv`` and
    ``sys.path[0]`` are restored afterwards, everything else the script did stays.

    Args:
        script: the script's path, as the user gave it (relative to the working directory).
        mapping: ``{"cuda": "cpu"}``; empty or None: no remap (the script as written).
        strict: refuse a numerics-changing rewrite (the run ends with a ``remap`` error).
        capture: ``MODULE:FUNCTION`` names whose return values to record.
        capture_modules: glob patterns of module names (or class names) whose outputs to record.
        compile: ``BACKEND[?OPTIONS]``: compile every root module call with it (empty: eager).
        losses: capture every ``backward()``'s tensor under ``loss``.
        started_at: the :func:`time.perf_counter` time ``startup_s`` counts from (the command
            line: the launcher's first statement; by default, this call).
        around: a context-manager factory, called with ``out``, entered around the script's
            run inside the remap and the recording (so its own work is not the script's) and
            left before the result is written, whatever the script did; it may write files of
            its own to ``out`` (a higher layer's audit of the run). Its enter and exit count in
            ``wall_s`` only for what it does while the script runs.
    """
    started_at = time.perf_counter() if started_at is None else started_at
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    mapping = dict(mapping or {})
    inputs = InputFiles(os.getcwd(), leave_out=(script,))
    error: ScriptError | None = None
    exit_code = 0
    remapper: Any = None
    captures = Captures()
    returns: Returns | None = None
    modules: ModuleCalls | None = None
    compiler: Any = None
    own_compiles: Any = None
    compile_target: Any = None
    wall_s = 0.0
    startup_s = 0.0
    started: float | None = None
    try:  # the setup: anything failing here is bakeoff's or the remap's, not the script's
        from bakeoff import emu

        if mapping and emu.NAME in {kind for kind, _ in DeviceMap(mapping).targets.values()}:
            emu.enable()
        emu.maybe_enable_from_env()
        _seed(seed)
        if mapping:
            from bakeoff.script.remap import Remapper

            remapper = Remapper(mapping, strict=strict)
        compile_target = _compile_target(compile) if compile else None
    except Exception as exc:
        error = _script_error(exc, "remap" if isinstance(exc, BakeoffError) else "launch")
        exit_code = 1
        print(f"{PROG}: {error.type}: {error.message}", file=sys.stderr)
    if error is None:
        saved_argv, saved_path0 = sys.argv, sys.path[0]
        sys.argv = [script, *args]
        sys.path[0] = os.path.dirname(os.path.realpath(script))
        try:
            with (
                recording(losses=losses) as recorded,
                remapped_children(mapping, strict=strict, out=out),
                kept_process_groups(),
            ):
                captures = recorded
                returns = Returns(capture, script, recorded) if capture else None
                modules = ModuleCalls(capture_modules, recorded) if set(capture_modules) - {NONE} else None
                from bakeoff.script.compiled import RootCompiler, ScriptCompiles

                if compile_target is not None:
                    compiler = RootCompiler(compile_target, modules)
                own_compiles = ScriptCompiles(compile_target)
                if remapper is not None:
                    remapper.install()
                try:
                    with around(out) if around is not None else nullcontext():
                        if returns is not None:
                            returns.install()
                        if modules is not None and compiler is None:  # compiled: root calls only
                            modules.install()
                        if compiler is not None:
                            compiler.install()
                        own_compiles.install()
                        weights = FinalWeights(recorded) if FinalWeights.wanted() else None
                        if weights is not None:
                            weights.install()
                        started = time.perf_counter()
                        startup_s = started - started_at
                        inputs.install()
                        try:
                            runpy.run_path(script, run_name="__main__")
                        finally:
                            wall_s = time.perf_counter() - started
                            if weights is not None:
                                weights.uninstall()
                            inputs.stop()
                            if returns is not None:
                                returns.uninstall()
                            if modules is not None:
                                modules.uninstall()
                            own_compiles.uninstall()
                            if compiler is not None:
                                compiler.uninstall()
                finally:
                    if remapper is not None:
                        try:
                            remapper.uninstall()
                        except RemapError as exc:  # the process ends anyway: the run's result stands
                            print(f"{PROG}: {exc.one_line()}", file=sys.stderr)
        except SystemExit as exc:
            exit_code = _exit_code(exc)
        except BaseException as exc:
            error = _script_error(exc, "remap" if isinstance(exc, RemapError) else "script")
            exit_code = 1
            _print_uncaught(exc)
        finally:
            sys.argv = saved_argv
            sys.path[0] = saved_path0
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    try:
        _write_atomically(out / CAPTURES, captures.to_safetensors)
    except Exception as exc:
        print(f"{PROG}: could not write {out / CAPTURES}: {exc}", file=sys.stderr)
        if error is None:
            error = _script_error(exc, "launch")
            exit_code = exit_code or 1
    ledger = remapper.ledger.rewrites if remapper is not None else ()
    ledger += compiler.recorder.ledger().rewrites if compiler is not None else ()
    ledger += own_compiles.recorder.ledger().rewrites if own_compiles is not None else ()
    counts = {name: len(captures[name]) for name in captures.names()}
    result = LaunchResult(
        format=FORMAT,
        exit_code=exit_code,
        error=error,
        wall_s=wall_s,
        startup_s=startup_s,
        ledger=ledger,
        numerics=tuple(r.api for r in ledger if r.numerics),
        captures=counts,
        captures_missing=tuple(s for s in capture if not counts.get(s)),
        capture_errors={**(returns.errors if returns else {}), **(modules.errors if modules else {})},
        strict=strict,
        mapping=mapping,
        seed=seed,
        losses=losses,
        argv=(script, *args),
        capture_modules=tuple(capture_modules),
        modules_unmatched=modules.unmatched if modules is not None else (),
        module_calls_capped=modules.capped if modules is not None else 0,
        compile=compile,
        capture_times={
            name: tuple(round(t - started, 6) for t in times)
            for name, times in captures.times().items()
            if started is not None
        },
        inputs_read=inputs.paths(),
        inputs_truncated=inputs.truncated,
        devices=captures.devices(),
    )
    _write_atomically(out / RESULT, lambda tmp: tmp.write_text(json.dumps(result.to_dict(), indent=1) + "\n"))
    return result


# -- the command line --------------------------------------------------------------------------


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, not argparse's usage block
        raise _UsageError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        usage=_USAGE,
        allow_abbrev=False,
        description="Run a script once, unchanged, remapped to another device; write what happened to OUTDIR.",
        epilog=f"example: {PROG} --out run1 --map cuda=cpu --capture train:evaluate -- train.py --epochs 1",
    )
    parser.add_argument("--out", required=True, metavar="OUTDIR", help="where result.json and captures go")
    parser.add_argument("--map", action="append", default=[], metavar="cuda=DEVICE", help="remap a device type")
    parser.add_argument("--strict", action="store_true", help="fail on a rewrite that may change numerics")
    parser.add_argument(
        "--capture", action="append", default=[], metavar="MODULE:FUNCTION", help="record a function's returns"
    )
    parser.add_argument(
        "--capture-modules", action="append", default=[], metavar="PATTERN", help="record matching modules' outputs"
    )
    parser.add_argument("--compile", default="", metavar="BACKEND[?OPTIONS]", help="compile root module calls")
    parser.add_argument("--seed", type=int, default=0, help="seed of random, torch and numpy (default 0)")
    parser.add_argument("--no-losses", action="store_true", help="do not capture every backward()'s loss")
    return parser


def _parse(argv: Sequence[str]) -> tuple[argparse.Namespace, str, list[str], dict[str, str]]:
    argv = list(argv)
    if "--" not in argv:
        if any(a in ("-h", "--help") for a in argv):
            _parser().parse_args(argv)  # prints the help and exits 0
        raise _UsageError("expected -- before the script: ... -- SCRIPT [ARGS...]")
    split = argv.index("--")
    options = _parser().parse_args(argv[:split])
    rest = argv[split + 1 :]
    if not rest:
        raise _UsageError("no script after --")
    script = rest[0]
    if not os.path.isfile(script):
        raise _UsageError(f"no such script: {script} (relative to {os.getcwd()})")
    mapping: dict[str, str] = {}
    for entry in options.map:
        source, sep, target = entry.partition("=")
        if not sep or not source or not target:
            raise _UsageError(f"malformed --map {entry!r}: expected SOURCE=DEVICE, e.g. cuda=cpu")
        if source in mapping and mapping[source] != target:
            raise _UsageError(f"--map {source} given twice: {mapping[source]} and {target}")
        try:
            DeviceMap({source: target})
        except RemapError as exc:
            raise _UsageError(f"malformed --map {entry!r}: {exc.one_line()}") from None
        mapping[source] = target
    for spec in options.capture:
        if not is_capture_name(spec):
            raise _UsageError(f"malformed --capture {spec!r}: expected MODULE:FUNCTION, e.g. infer:postprocess")
    problem = check_patterns(options.capture_modules)
    if problem is not None:
        raise _UsageError(f"malformed --capture-modules {problem[0]!r}: {problem[1]}")
    if options.compile:
        try:
            _compile_target(options.compile)
        except BakeoffError as exc:
            raise _UsageError(f"malformed --compile {options.compile!r}: {exc.one_line()}") from None
    if not 0 <= options.seed < 2**32:
        raise _UsageError(f"--seed {options.seed} is out of range: 0 to 2**32-1")
    return options, script, rest[1:], mapping


def main(
    argv: Sequence[str] | None = None, *, around: Callable[[Path], AbstractContextManager[Any]] | None = None
) -> int:
    """The command line: parse, :func:`launch` (with ``around``, see there), and return the
    script's exit code (2: bad arguments)."""
    try:
        options, script, args, mapping = _parse(sys.argv[1:] if argv is None else argv)
        Path(options.out).mkdir(parents=True, exist_ok=True)
    except _UsageError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"{PROG}: cannot create the output directory: {exc}", file=sys.stderr)
        return 2
    try:
        result = launch(
            script,
            args,
            out=options.out,
            mapping=mapping,
            strict=options.strict,
            capture=list(dict.fromkeys(options.capture)),
            seed=options.seed,
            losses=not options.no_losses,
            capture_modules=list(dict.fromkeys(options.capture_modules)),
            compile=options.compile,
            started_at=_STARTED,
            around=around,
        )
    except OSError as exc:  # the result could not be written
        print(f"{PROG}: could not write the result: {exc}", file=sys.stderr)
        return 1
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
