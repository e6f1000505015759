"""The audit of where a ``bakeoff exec`` run's work ran: :class:`ScriptAudit` and its file.

:class:`ScriptAudit` is entered around the script's run by the worker
(:mod:`bakeoff.runner.script_worker`, ``--audit DEVICE``, as the launcher's ``around`` hook) and
writes :data:`AUDIT` beside the run's result: a :class:`~bakeoff.checks.placement.Placement`
judged by the placement check's own :func:`~bakeoff.checks.placement.judge`, and a
:class:`~bakeoff.checks.compilation.Compilation` when the script called ``torch.compile``;
:func:`read_audit` reads it back in the runner. What it counts, what it cannot see and what it
costs are in the worker's module docstring.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time
import weakref
from collections import Counter
from pathlib import Path
from typing import Any

from bakeoff.checks.compilation import Compilation
from bakeoff.checks.dispatch_audit import HOST_SYNC_OPS, PlacementRecorder, off_device_map_entries
from bakeoff.checks.placement import Placement, judge, judge_host_work
from bakeoff.script.ledger import call_site
from bakeoff.script.threads import in_new_threads

__all__ = ["AUDIT", "MAX_AUDITED_OPS", "ScriptAudit", "host_placement", "read_audit"]

AUDIT = "audit.json"
#: The ops recorded over the whole run, past the window: copies between host and device (host
#: state sent again every step is the finding a window over the first steps misses) and syncs.
_WATCHED = frozenset({"aten::_to_copy", "aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize"}) | (
    HOST_SYNC_OPS
)
#: Op calls the audit records in full; past this it records only :data:`_WATCHED` ones and counts
#: the rest (see the worker's module docstring).
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
    when left. See :mod:`bakeoff.runner.script_worker` for what it counts and cannot see."""

    def __init__(self, device: str, out: Path, max_ops: int = MAX_AUDITED_OPS, what: str = "") -> None:
        self._device_spec = device
        #: what was audited, for the placement's scope (default: the whole script run)
        self._what = what
        self._written = False
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
        self.write()
        return False

    def write(self) -> None:
        """Judge what was seen so far and write :data:`AUDIT` (once: a second call does nothing;
        the recording goes on until the audit is left)."""
        if self._written:
            return
        self._written = True
        try:
            data = self._result()
        except Exception as exc:
            data = {"placement": None, "compilation": None, "error": f"{type(exc).__name__}: {exc}"}
        text = json.dumps(data, indent=1) + "\n"
        tmp = self._out / f".{AUDIT}.{os.getpid()}.tmp"
        tmp.write_text(text)
        os.replace(tmp, self._out / AUDIT)

    def follow_threads(self) -> None:
        """Record the ops of every thread started from now on too, each under a dispatch mode of
        its own (see :mod:`bakeoff.script.threads`); a server's handler threads, for one."""
        if self._mode is not None:
            self._undo.append(in_new_threads(self._new_mode))

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

        from bakeoff.target.lazy_dynamo import lazy_dynamo

        observe = self._observe

        @lazy_dynamo
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
            placement = host_placement("the whole script run (not audited)")
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
            sites=[],  # round trips are counted, not judged (see the worker's module docstring)
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
        if verdict == "on_device":  # the host's own work: the script's, or the work itself
            whose = "service" if self._what else "script"
            verdict, explanation = judge_host_work(recorder, host_only, fallback_ops, whose, explanation)
        scope = self._what or "every ATen op of the whole script run (its main thread and autograd's)"
        if self._past_window:
            scope = (
                f"every ATen op of the first {self._max_ops} op calls of the {'service' if self._what else 'script'} "
                "run; after them, over the whole "
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


def host_placement(scope: str) -> Placement:
    """The placement of work whose target is the host: nothing to place (``not_applicable``)."""
    verdict, explanation = judge(
        cpu_target=True, stray=[], off_map=[], host_ops={}, fallback_ops={}, transfers={}, sites=[]
    )
    return Placement(verdict=verdict, explanation=explanation, scope=scope)


def _nbytes(value: Any) -> int:
    try:
        return int(value.numel() * value.element_size())
    except Exception:
        return 0


def _dict(value: Any) -> dict[str, Any] | None:
    return value.to_dict() if value is not None else None
