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

Every run of one ``bakeoff exec`` reads the same stdin (:func:`script_stdin`): bakeoff's own is
shared by all its runs, so piped input would be consumed by the first run and a terminal would
hold every run until its timeout. A terminal gives each run an empty stdin (``/dev/null``);
anything else is read once (up to :data:`STDIN_CAP` bytes; a stdin left open without a byte for
:data:`STDIN_IDLE_S` has said all it will), kept in a temporary directory named after the
bakeoff process, and each run reads that copy. A note on each run says which it was.

On POSIX the worker is two processes: this one forks the run and stays its supervisor, a child
subreaper on Linux (``PR_SET_CHILD_SUBREAPER``: what the script starts and leaves behind, a
process detached with ``setsid`` included, becomes its child when its own parent ends). When the
run ends, it gives what the script started a moment to end by itself, kills what is still
running, reaps it, and exits as the run did (its code, or the signal it died of). What it did
(:data:`PROCESSES`) becomes the run's notes (:func:`bakeoff.script.children.child_notes`).
What it cannot clean up: what left the process group when the whole group is killed (the
runner's kill on a timeout takes the supervisor too, so a process detached with ``setsid`` stays;
a SIGTERM to the supervisor ends the run and cleans up first), and, off Linux (no subreaper), a
detached process whose own parent had already ended.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import stat
import sys
import tempfile
import threading
import time
import weakref
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bakeoff.checks.compilation import Compilation
from bakeoff.checks.dispatch_audit import HOST_SYNC_OPS, PlacementRecorder, off_device_map_entries
from bakeoff.checks.placement import Placement, judge, top_counts
from bakeoff.script import launch as launcher
from bakeoff.script.children import PROCESSES
from bakeoff.script.ledger import call_site

__all__ = [
    "AUDIT",
    "MAX_AUDITED_OPS",
    "PARENT_ENV",
    "PROCESSES",
    "STDIN_CAP",
    "ScriptAudit",
    "main",
    "read_audit",
    "script_stdin",
]

#: The bakeoff process that started the worker: the worker dies with it (a ``kill -9`` included).
PARENT_ENV = "BAKEOFF_EXEC_PARENT"

AUDIT = "audit.json"
#: At most this much of bakeoff's stdin is given to the runs (the rest is not read; a note says so).
STDIN_CAP = 16 << 20
#: A stdin that stays open this long without a byte is taken to have said all it will (a pipe
#: that nobody writes to, left open by whatever started bakeoff).
STDIN_IDLE_S = 10.0
#: How long what the script started may take to end by itself once the script has ended.
_GRACE_S = 1.0
#: How long the supervisor keeps killing and reaping before it gives up on a process.
_REAP_S = 10.0
_PR_SET_CHILD_SUBREAPER = 36
#: The ops recorded over the whole run, past the window: copies between host and device (host
#: state sent again every step is the finding a window over the first steps misses) and syncs.
_WATCHED = frozenset({"aten::_to_copy", "aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize"}) | (
    HOST_SYNC_OPS
)
#: Op calls the audit records in full; past this it records only :data:`_WATCHED` ones and counts
#: the rest (see the module docstring).
MAX_AUDITED_OPS = 20_000
_READS_HOST = " (reads a host tensor)"
_COPY_DIRECTIONS = ("host_to_device", "device_to_host")


def read_audit(out: str | Path) -> dict[str, Any] | None:
    """``{"placement": Placement, "compilation": Compilation | None}`` from ``out``, or None
    where no audit ran (or it left nothing: the process was killed)."""
    path = Path(out) / AUDIT
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    placement = data.get("placement")
    compilation = data.get("compilation")
    return {
        "placement": Placement.from_dict(placement) if placement else None,
        "compilation": Compilation.from_dict(compilation) if compilation else None,
        "error": data.get("error"),
    }


class ScriptAudit:
    """Entered around a script's run (the launcher's ``around``); writes :data:`AUDIT` to ``out``
    when left. See the module docstring for what it counts and cannot see."""

    def __init__(self, device: str, out: Path, max_ops: int = MAX_AUDITED_OPS) -> None:
        self._device_spec = device
        self._out = Path(out)
        self._max_ops = max_ops
        self._undo: list[Any] = []
        self._error: str | None = None
        self._paused = 0
        self._thread = threading.get_ident()
        self._names: dict[Any, str] = {}
        self._copied: dict[int, list[Any]] = {}  # id(host tensor) -> [copies, weakref]
        self._sites: Counter = Counter()  # (site, kind) -> count
        self._site_bytes: Counter = Counter()
        self._first: dict[str, str] = {}  # kind -> first site
        self._host_state: Counter = Counter()  # site -> copies
        self._host_state_bytes: Counter = Counter()
        self._stray: dict[str, list[str]] = {}  # module name -> its own parameters/buffers on the host
        self._checked: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # module -> clean
        self._module_names: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._stack: list[Any] = []
        self._device_maps: dict[str, Any] = {}
        self._off_map: list[str] = []
        self._seen_ops = 0
        self._past_window = 0
        self._mode: Any = None
        self._mode_on = False
        self._modules_seen = 0
        self._audit_s = 0.0
        self._watch: Any = None
        self._emu = False
        self.recorder: PlacementRecorder | None = None
        self._compiling: Any = lambda: False

    # -- setup and teardown -----------------------------------------------------------------

    def __enter__(self) -> ScriptAudit:
        try:
            self._install()
        except Exception as exc:  # the script runs anyway; the audit says why it saw nothing
            self._error = f"the audit could not start: {type(exc).__name__}: {exc}"
            self._uninstall()
        return self

    def __exit__(self, *exc_info: Any) -> bool:
        self._uninstall()
        try:
            data = self._result()
        except Exception as exc:
            data = {"placement": None, "compilation": None, "error": f"{type(exc).__name__}: {exc}"}
        text = json.dumps(data, indent=1) + "\n"
        tmp = self._out / f".{AUDIT}.{os.getpid()}.tmp"
        tmp.write_text(text)
        os.replace(tmp, self._out / AUDIT)
        return False

    def _install(self) -> None:
        import torch

        from bakeoff.script.capture import Captures

        self.target = torch.device(self._device_spec)
        self.host = self.target.type == "cpu"
        target = self.target

        def is_target(device: Any) -> bool:
            return device.type == target.type and (target.index is None or device.index in (None, target.index))

        self.is_target = is_target
        self.recorder = PlacementRecorder(is_target=is_target)
        original_compile = torch.compile

        @functools.wraps(original_compile)
        def compile(*args: Any, **kwargs: Any) -> Any:
            if self._watch is None:
                from bakeoff.target.dynamo import CompileWatch

                self._watch = CompileWatch()
            return original_compile(*args, **kwargs)

        torch.compile = compile
        self._undo.append(lambda: setattr(torch, "compile", original_compile))
        if self.host:  # the host is the device: nothing to place; compilations are still watched
            return
        if self.target.type == "emu":
            from bakeoff import emu

            if emu.enabled():
                emu.reset_counters()
                self._emu = True

        original_add = Captures.add

        @functools.wraps(original_add)
        def add(captures: Any, name: str, value: Any) -> None:  # bakeoff's copies are not the script's
            self._paused += 1
            try:
                original_add(captures, name, value)
            finally:
                self._paused -= 1

        Captures.add = add  # type: ignore[method-assign]
        self._undo.append(lambda: setattr(Captures, "add", original_add))
        self._compiling = torch.compiler.is_compiling
        hooks = torch.nn.modules.module
        pre = hooks.register_module_forward_pre_hook(self._entered)
        post = hooks.register_module_forward_hook(self._left, always_call=True)
        self._undo += [pre.remove, post.remove]
        self._mode = self._new_mode()
        self._mode.__enter__()
        self._mode_on = True
        self._undo.append(self._stop_mode)

    def _uninstall(self) -> None:
        while self._undo:
            undo = self._undo.pop()
            try:
                undo()
            except Exception as exc:
                self._error = self._error or f"the audit could not stop cleanly: {type(exc).__name__}: {exc}"

    def _stop_mode(self) -> None:
        """Leave the dispatch mode, as its ``with`` block would; only where it is the innermost
        mode (the script may have entered its own since), else it stays to the end."""
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        if self._mode_on and _get_current_dispatch_mode() is self._mode:
            self._mode_on = False
            self._mode.__exit__(None, None, None)

    def _new_mode(self) -> Any:
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils.flop_counter import flop_registry

        observe = self._observe

        class ScriptMode(TorchDispatchMode):
            @classmethod
            def ignore_compile_internals(cls) -> bool:
                # dynamo compiles under it as it would without it (a mode that does not say so
                # makes dynamo run every frame eagerly); the compiled graph's ops are still seen
                return True

            def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                observe(func, args, kwargs, out, flop_registry)
                return out

        return ScriptMode()

    # -- what the hooks and the dispatch mode see -------------------------------------------

    def _entered(self, module: Any, _inputs: Any) -> None:
        if self._compiling():  # dynamo traces it into a graph: its Python would be a graph break
            return
        if threading.get_ident() != self._thread:
            self._check_module(module, None)
            return
        parent = self._stack[-1] if self._stack else None
        self._stack.append(module)
        self._check_module(module, parent)
        if self.recorder is not None:
            self.recorder.module_stack.append(self._module_names.get(module, type(module).__name__))

    def _left(self, module: Any, _inputs: Any, _output: Any) -> None:
        if self._compiling():
            return
        if threading.get_ident() != self._thread:
            return
        if self._stack and self._stack[-1] is module:
            self._stack.pop()
            if self.recorder is not None and self.recorder.module_stack:
                self.recorder.module_stack.pop()

    def _check_module(self, module: Any, parent: Any) -> None:
        """The module's own parameters and buffers on the host, each time it runs until it is
        clean (a module moved after its first run is judged by where it ran last)."""
        if self._checked.get(module, False):
            return
        if module not in self._checked:
            self._modules_seen += 1
        name = self._module_names.get(module)
        if name is None and parent is None:  # a model's root: its whole tree is named by path once
            name = type(getattr(module, "_orig_mod", module)).__name__  # a compiled wrapper: its model's
            for path, inner in module.named_modules():
                self._module_names.setdefault(inner, f"{name}.{path}" if path else name)
        elif name is None:
            parent_name = self._module_names.get(parent, type(parent).__name__)
            child = next((n for n, m in parent._modules.items() if m is module), None)
            name = f"{parent_name}.{child}" if child is not None else type(module).__name__
            self._module_names[module] = name
        import torch

        inner = getattr(module, "_orig_mod", None)
        if isinstance(inner, torch.nn.Module):  # a compiled wrapper: the modules in its graph run no hooks
            tensors = [*inner.named_parameters(), *inner.named_buffers()]
        else:
            tensors = [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]
        stray = [
            f"{name}.{n} ({t.device})"
            for n, t in tensors
            if t is not None and not self.is_target(t.device) and t.device.type != "meta"
        ]
        self._stray[name] = stray
        self._checked[module] = not stray
        device_map = getattr(module, "hf_device_map", None)
        if device_map and name not in self._device_maps:
            self._device_maps[name] = {str(k): str(v) for k, v in device_map.items()}
            self._off_map += off_device_map_entries(device_map, self.is_target)

    def _site(self, kind: str, size: int = 0) -> str:
        site = call_site(1)  # the first frame outside PyTorch and bakeoff
        self._sites[(site, kind)] += 1
        self._site_bytes[(site, kind)] += size
        self._first.setdefault(kind, site)
        return site

    def _observe(self, func: Any, args: tuple, kwargs: dict, out: Any, flop_registry: Any) -> None:
        self._seen_ops += 1
        recorder = self.recorder
        # not only the script's thread: autograd runs a device's backward in its own thread,
        # with the dispatch modes of the thread that called backward()
        if self._paused or recorder is None:
            return
        name = self._names.get(func)
        if name is None:
            name = self._names[func] = f"aten::{func._schema.name.split('::')[-1]}"
        if recorder.ops_total >= self._max_ops and name not in _WATCHED:
            self._past_window += 1  # past the window, only copies and syncs are recorded
            return
        started = time.perf_counter()
        transfers = recorder.transfers
        h2d, d2h = transfers["host_to_device"]["count"], transfers["device_to_host"]["count"]
        syncs = recorder.host_syncs.get(name, 0)
        mixed = recorder.host_ops.get(name + _READS_HOST, 0)
        flops = 0
        counter = flop_registry.get(func._overloadpacket)
        if counter is not None:
            try:
                flops = int(counter(*args, **kwargs, out_val=out))
            except Exception:  # an op variant the flop formula does not cover
                flops = 0
        recorder.record(name, args, kwargs, out, flops)
        if transfers["host_to_device"]["count"] != h2d:
            source = args[1] if name == "aten::copy_" and len(args) > 1 else args[0]
            site = self._site("host_to_device", _nbytes(source))
            if self._copied_before(source):
                self._host_state[site] += 1
                self._host_state_bytes[site] += _nbytes(source)
        elif transfers["device_to_host"]["count"] != d2h:
            self._site("device_to_host", _nbytes(args[1] if name == "aten::copy_" and len(args) > 1 else args[0]))
        # a sync's or a host op's first site only: a stack walk per call costs too much
        if name in HOST_SYNC_OPS and recorder.host_syncs.get(name, 0) != syncs and not syncs:
            self._first.setdefault(f"sync {name}", call_site(1))
        if recorder.host_ops.get(name + _READS_HOST, 0) != mixed and not mixed:
            self._first.setdefault(f"host op {name}", call_site(1))
        self._audit_s += time.perf_counter() - started

    def _copied_before(self, tensor: Any) -> bool:
        """Whether this host tensor (the same object) was copied to the device before."""
        key = id(tensor)
        entry = self._copied.get(key)
        if entry is not None and entry[1]() is tensor:
            entry[0] += 1
            return True
        copied = self._copied

        def forget(_ref: Any, key: int = key) -> None:
            copied.pop(key, None)

        try:
            self._copied[key] = [1, weakref.ref(tensor, forget)]
        except TypeError:  # not weakly referenceable: never matched again
            pass
        return False

    # -- the result -------------------------------------------------------------------------

    def _compilation(self) -> Compilation | None:
        if self._watch is None:
            return None
        try:
            summary = self._watch.summary()
        finally:
            self._watch.close()
        return Compilation(**summary)

    def _result(self) -> dict[str, Any]:
        compilation = self._compilation()
        if self._error is not None:
            return {"placement": None, "compilation": _dict(compilation), "error": self._error}
        if self.host:
            verdict, explanation = judge(
                cpu_target=True, stray=[], off_map=[], host_ops={}, fallback_ops={}, transfers={}, sites=[]
            )
            placement = Placement(verdict=verdict, explanation=explanation, scope="the whole script run (not audited)")
            return {"placement": placement.to_dict(), "compilation": _dict(compilation), "error": None}
        recorder = self.recorder
        assert recorder is not None
        fallback_ops: dict[str, int] = {}
        signals: dict[str, Any] = {}
        if self._emu:
            from bakeoff.target.engines.emu import EmuProbe

            fallback_ops, signals = EmuProbe().end()
        mixed = {name: n for name, n in recorder.host_ops.items() if name.endswith(_READS_HOST)}
        host_only = {name: n for name, n in recorder.host_ops.items() if not name.endswith(_READS_HOST)}
        stray = [entry for entries in self._stray.values() for entry in entries]
        host_state = [
            {"module": site, "count": count, "bytes": self._host_state_bytes[site]}
            for site, count in sorted(self._host_state.items())
        ]
        verdict, explanation = judge(
            cpu_target=False,
            stray=stray,
            off_map=self._off_map,
            host_ops=mixed,
            fallback_ops=fallback_ops,
            transfers=recorder.transfers,
            sites=[],  # round trips are counted, not judged (see the module docstring)
            host_state=host_state,
        )
        if verdict == "left_on_host" and host_state and not (stray or self._off_map):
            count = sum(s["count"] for s in host_state)
            size = sum(s["bytes"] for s in host_state)
            where = ", ".join(f"{s['module']} ({s['count']} copies, {s['bytes']} B)" for s in host_state[:3])
            fallback_total = sum(fallback_ops.values()) + sum(mixed.values())
            also = f"; also {fallback_total} op call(s) ran on the host" if fallback_total else ""
            explanation = (
                f"host tensors copied to the device again and again: {count} repeated copies, {size} B, at {where}; "
                "create them on the device, or move them there once" + also
            )
        if verdict == "on_device" and host_only:  # say what the host did, so the words match the counts
            on_device = recorder.device_counts(fallback_ops)[0]
            copies = recorder.ops_total - on_device - sum(host_only.values())
            explanation = (
                f"every op on the device's data ran on the device ({on_device} op calls); "
                f"{sum(host_only.values())} op call(s) ran on host data only (the script's own host work: "
                f"{top_counts(host_only)})"
                + (f"; {copies} op call(s) copied data between the host and the device" if copies > 0 else "")
                + "; nothing left on the host"
            )
        scope = "every ATen op of the whole script run (its main thread and autograd's)"
        if self._past_window:
            scope = (
                f"every ATen op of the first {self._max_ops} op calls of the script run; after them, over the whole "
                f"run, every copy between the host and the device and every host sync (the other "
                f"{self._past_window} op calls counted, not recorded); parameters, the device's own fallback "
                "counter and compilations over the whole run"
            )
        signals["script"] = {
            "ops_seen": self._seen_ops,
            "host_only_ops": sum(host_only.values()),
            "host_only_top": dict(Counter(host_only).most_common(5)),
            "first_sites": dict(self._first),
            "audit_s": round(self._audit_s, 6),
            "modules": self._modules_seen,
        }
        op_share, flop_share = recorder.shares(fallback_ops)
        device_map = next(iter(self._device_maps.values())) if self._device_maps else None
        placement = Placement(
            verdict=verdict,
            explanation=explanation,
            scope=scope,
            ops_total=recorder.ops_total,
            ops_on_device=recorder.device_counts(fallback_ops)[0],
            device_op_share=op_share,
            device_flop_share=flop_share,
            host_ops=mixed,
            fallback_ops=fallback_ops,
            transfers=recorder.transfers,
            transfer_sites=tuple(
                {"module": site, "direction": kind, "count": count, "bytes": self._site_bytes[(site, kind)]}
                for (site, kind), count in sorted(self._sites.items())
                if kind in _COPY_DIRECTIONS
            ),
            host_syncs=dict(recorder.host_syncs),
            stray_parameters=tuple(stray),
            device_map=device_map,
            signals=signals,
            host_state_copies=tuple(host_state),
        )
        return {"placement": placement.to_dict(), "compilation": _dict(compilation), "error": None}


def _nbytes(value: Any) -> int:
    try:
        return int(value.numel() * value.element_size())
    except Exception:
        return 0


def _dict(value: Any) -> dict[str, Any] | None:
    return value.to_dict() if value is not None else None


def _read_stdin() -> tuple[bytes, str]:
    """Bakeoff's stdin up to :data:`STDIN_CAP` bytes, and how the reading ended: ``end``,
    ``cap`` (more was there) or ``idle`` (open, and silent for :data:`STDIN_IDLE_S`)."""
    import select

    chunks, size = [], 0
    while size <= STDIN_CAP:
        ready, _, _ = select.select([0], [], [], STDIN_IDLE_S)
        if not ready:
            return b"".join(chunks), "idle"
        chunk = os.read(0, min(1 << 16, STDIN_CAP + 1 - size))
        if not chunk:
            return b"".join(chunks), "end"
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)[:STDIN_CAP], "cap"


def _shared_stdin(parent: str) -> tuple[bytes, str]:
    """:func:`_read_stdin` once per bakeoff process ``parent``: the first run reads it and keeps
    it for the others in a directory named after that process (removed once it has ended, as
    :mod:`bakeoff.runner.tempdirs` removes the directories of a process killed before it could)."""
    import fcntl

    from bakeoff.runner.tempdirs import host_tag

    if not parent.isdigit():
        return _read_stdin()
    folder = Path(tempfile.gettempdir()) / f"bakeoff-exec-{parent}-{host_tag()}-stdinbuf"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        found = folder.lstat()
        if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid():
            return _read_stdin()
    except OSError:
        return _read_stdin()
    with open(folder / "lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        kept, how = folder / "stdin", folder / "stdin.how"
        if how.exists():
            return kept.read_bytes(), how.read_text()
        data, ended = _read_stdin()
        kept.write_bytes(data)
        how.write_text(ended)  # last: a run that finds it finds the bytes too
        return data, ended


def script_stdin(parent: str) -> str | None:
    """Point this process's stdin (fd 0) at what every run of the ``bakeoff exec`` whose process
    is ``parent`` reads (see the module docstring), and say what that was (None: bakeoff's stdin
    is ``/dev/null`` or closed, left as it is)."""
    try:
        found = os.fstat(0)
    except OSError:
        return None
    if os.isatty(0):
        empty = os.open(os.devnull, os.O_RDONLY)
        os.dup2(empty, 0)
        os.close(empty)
        return (
            "the script's stdin was empty (/dev/null): bakeoff's is a terminal, and every run must read "
            "the same input (pipe it to bakeoff to give the script input)"
        )
    if stat.S_ISCHR(found.st_mode) and found.st_rdev == os.stat(os.devnull).st_rdev:
        return None
    data, ended = _shared_stdin(parent)
    copy = tempfile.TemporaryFile()
    copy.write(data)
    copy.flush()
    os.lseek(copy.fileno(), 0, os.SEEK_SET)
    os.dup2(copy.fileno(), 0)
    copy.close()
    said = f"every run of the script read the same stdin: the {len(data)} bytes bakeoff was given"
    if ended == "cap":
        said = f"every run of the script read the same stdin: the first {len(data)} bytes bakeoff was given (no more)"
    elif ended == "idle":
        said += f" before its stdin stayed open and silent for {STDIN_IDLE_S:g} s"
    return said


def _subreaper() -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        except (OSError, AttributeError):
            pass


def _reap() -> None:
    """Collect every child that has ended (a subreaper's orphans too), without waiting."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _end_descendants() -> list[str]:
    """Kill what the script started that is still running (after :data:`_GRACE_S` to end by
    itself) and reap it: ``name (pid N)`` of each one killed."""
    import psutil

    me, killed, seen = psutil.Process(), [], set()
    grace, deadline = time.monotonic() + _GRACE_S, time.monotonic() + _GRACE_S + _REAP_S
    while time.monotonic() < deadline:
        _reap()
        running = [p for p in me.children(recursive=True) if _running(p)]
        if not running:
            break
        if time.monotonic() >= grace:
            for process in running:
                try:
                    label = f"{process.name()} (pid {process.pid})"
                    process.kill()
                except psutil.Error:
                    continue
                if process.pid not in seen:
                    seen.add(process.pid)
                    killed.append(label)
        time.sleep(0.02)
    _reap()
    return killed


def _running(process: Any) -> bool:
    import psutil

    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


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

    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, forward)
    _, status = os.waitpid(run, 0)
    code = os.waitstatus_to_exitcode(status)
    killed = _end_descendants()
    if out is not None and out.is_dir():
        try:
            (out / PROCESSES).write_text(json.dumps({"stdin": stdin_note, "killed": killed}) + "\n")
        except OSError:
            pass
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        code = 128 - code
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: ``[--audit DEVICE | --rounding-noise SEED]`` then the launcher's own
    arguments; ``--rounding-noise`` runs the script under
    :class:`bakeoff.checks.rounding.RoundingNoise` (the honest reference of ``bakeoff exec``).
    On POSIX the script runs in a forked child of this process, which supervises it (see the
    module docstring)."""
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
    from bakeoff.runner.isolation import die_with_parent

    if os.name == "posix":
        stdin_note = script_stdin(parent)
        _subreaper()
        supervisor = os.getpid()
        run = os.fork()
        if run:
            if parent.isdigit():  # a kill -9 of bakeoff takes the supervisor, and so the run, with it
                die_with_parent(int(parent))
            return _supervise(run, _out_dir(argv), stdin_note)
        die_with_parent(supervisor)
    elif parent.isdigit():  # a kill -9 of bakeoff takes the script with it
        die_with_parent(int(parent))
    return launcher.main(argv, around=around)


if __name__ == "__main__":
    sys.exit(main())
