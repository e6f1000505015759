"""The return values of the functions ``--capture MODULE:FUNCTION`` names, recorded call by call.

``--capture MODULE:FUNCTION`` records each return value of a function under that name, call by
call. MODULE is a module's ``__name__`` or the script's file stem (``infer:postprocess`` for
``infer.py``); FUNCTION is a qualified name (``Model.forward``, ``main.<locals>.step``). It watches
*code objects* with :func:`sys.settrace` (and :func:`threading.settrace` for threads started by the
script), so a call is seen however the function was reached: an alias, a decorator, a callback
registered at import time, another thread. A call that raises records nothing.

What ``--capture`` cannot see: calls in processes the script starts; a function that
``torch.compile`` traced into a graph (its Python code does not run); yielded values (a
generator's or coroutine's ``return`` value is recorded when it ends). While it is on, every
Python call passes through a small Python check and the interpreter runs in its tracing mode,
which slows Python-bound code (measured: a tiny model's training loop took 1.3 to 1.6 times as
long on Python 3.11): compare timings only between runs with the same ``--capture``. A script
that sets its own trace function (a debugger, coverage) replaces it, and the launcher's replaces
one already set.
"""

from __future__ import annotations

import dis
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from bakeoff.script.capture import Captures

__all__ = ["Returns"]

_RETURNS = frozenset(dis.opmap[name] for name in ("RETURN_VALUE", "RETURN_CONST") if name in dis.opmap)


class Returns:
    """Records the return values of the ``MODULE:FUNCTION`` functions in ``captures``, by watching
    the calls of their code objects (see the module's docstring)."""

    def __init__(self, specs: Sequence[str], script: str, captures: Captures) -> None:
        self._wanted: dict[str, list[tuple[str, str, str]]] = {}  # co_name -> [(module, qualname, spec)]
        for spec in specs:
            module, _, qualname = spec.partition(":")
            self._wanted.setdefault(qualname.rpartition(".")[2], []).append((module, qualname, spec))
        self._stem = Path(script).stem
        self._script = os.path.abspath(script)
        self._captures = captures
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {spec: 0 for spec in specs}
        self.errors: dict[str, str] = {}
        self._previous: tuple[Any, Any] = (None, None)

    def install(self) -> None:
        self._previous = (sys.gettrace(), threading.gettrace())
        call = self._tracer()
        threading.settrace(call)
        sys.settrace(call)

    def uninstall(self) -> None:
        sys.settrace(self._previous[0])
        threading.settrace(self._previous[1])  # type: ignore[arg-type]

    def _match(self, frame: FrameType) -> str | None:
        code = frame.f_code
        for module, qualname, spec in self._wanted[code.co_name]:
            if code.co_qualname != qualname:
                continue
            if frame.f_globals.get("__name__") == module or (
                module == self._stem and os.path.abspath(code.co_filename) == self._script
            ):
                return spec
        return None

    def _tracer(self) -> Any:
        """The global trace function. Python calls it once per Python call (only ``call`` events
        reach it), so it does the least it can for every other function: one set lookup."""
        wanted, match, record = self._wanted, self._match, self._record

        def call(frame: FrameType, event: str, arg: Any) -> Any:
            if frame.f_code.co_name not in wanted:
                return None
            spec = match(frame)
            if spec is None:
                return None
            frame.f_trace_lines = False

            def local(frame: FrameType, event: str, arg: Any) -> Any:
                # ``return`` also ends a frame that raises (arg None) or yields: only a return
                # instruction is a return value.
                if event == "return" and frame.f_code.co_code[frame.f_lasti] in _RETURNS:
                    record(spec, arg)
                return local

            return local

        return call

    def _record(self, spec: str, value: Any) -> None:
        try:
            self._captures.add(spec, value)
        except Exception as exc:  # never into the script: the run goes on, the result says so
            with self._lock:
                self.errors.setdefault(spec, f"{type(exc).__name__}: {exc}")
            return
        with self._lock:
            self.counts[spec] += 1
