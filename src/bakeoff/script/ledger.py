"""The ledger of a remapped script: every rewrite, how often, where the script first asked for it.

A rewrite is keyed by the API it touched (``torch.randn(device=)``, ``Tensor.cuda``,
``torch.cuda.synchronize``). Its call site is the first frame outside PyTorch, bakeoff and the
standard library: the line of the user's script (or of the third-party library) that made the
call, so a reader can find it without a traceback. Rewrites that may change what the script
computes are flagged ``numerics=True`` with the reason; :class:`Recorder` raises
:class:`~bakeoff.errors.RemapError` for them instead when it is strict.

What it cannot see: how many times a rewritten value was *used* (a ``torch.device`` made once
and passed a thousand times counts once), and call sites of rewrites made from threads or
processes the recorder does not run in.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import sysconfig
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from types import FrameType

from bakeoff.codec import Value
from bakeoff.errors import RemapError

__all__ = ["Ledger", "Recorder", "Rewrite", "call_site", "caller_kind", "relative_site"]


@dataclass(frozen=True)
class Rewrite(Value):
    """One API the remapper rewrote: ``count`` calls, the first from ``site`` (``file:line``).

    ``reason`` says what was done (``answered True``, ``cuda -> cpu``) and, when ``numerics``
    is set, why the script may compute something else than it would on the device it names.
    """

    api: str
    count: int
    site: str
    numerics: bool = False
    reason: str = ""


@dataclass(frozen=True)
class Ledger(Value):
    """The rewrites of one run, in the order they first happened."""

    rewrites: tuple[Rewrite, ...] = ()

    @property
    def numerics(self) -> tuple[Rewrite, ...]:
        """The rewrites that may change numerics."""
        return tuple(r for r in self.rewrites if r.numerics)

    def get(self, api: str) -> Rewrite | None:
        """The rewrite of ``api``, or None when the script never asked for it."""
        return next((r for r in self.rewrites if r.api == api), None)


@cache
def _torch_root() -> str:
    spec = importlib.util.find_spec("torch")
    return os.path.join(os.path.dirname(os.path.abspath(spec.origin)), "") if spec and spec.origin else "\0"


@cache
def _own_roots() -> tuple[str, ...]:
    """PyTorch's and bakeoff's directories, wherever they are installed."""
    bakeoff_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # src/bakeoff
    return (_torch_root(), os.path.join(bakeoff_root, ""))


@cache
def _stdlib_roots() -> tuple[str, ...]:
    roots = [sysconfig.get_paths().get(key) for key in ("stdlib", "platstdlib")]
    return tuple(os.path.join(os.path.abspath(r), "") for r in roots if r)


def _is_installed(path: str) -> bool:
    parts = path.split(os.sep)
    return "site-packages" in parts or "dist-packages" in parts


def _is_skipped(filename: str) -> bool:
    """Frames that are never a call site: PyTorch, bakeoff, the standard library. An installed
    package is never the standard library, even where a virtual environment's site-packages lies
    under what ``sysconfig`` calls its ``platstdlib`` (``.venv/lib/python3.11``)."""
    if filename.startswith("<frozen"):
        return True
    path = os.path.abspath(filename)
    if path.startswith(_own_roots()):
        return True
    return not _is_installed(path) and path.startswith(_stdlib_roots())


def _outside(frame: FrameType | None) -> FrameType | None:
    while frame is not None and _is_skipped(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


#: The directory the run started in: its copy of the working directory, a new temporary
#: directory each run, so call sites inside it are written relative to it.
_STARTED_IN = os.getcwd()


def relative_site(site: str, cwd: str) -> str:
    """``file:line`` with a file inside ``cwd`` written relative to it (``model.py:12`` rather
    than ``/tmp/bakeoff-exec-.../work/model.py:12``): a run and its rerun, each in its own copy,
    then name the same line alike."""
    path, sep, line = site.rpartition(":")
    if sep and os.path.isabs(path) and path.startswith(os.path.join(cwd, "")):
        return f"{os.path.relpath(path, cwd)}:{line}"
    return site


def call_site(depth: int = 1) -> str:
    """``file:line`` of the first frame of the user's code (outside PyTorch, bakeoff, the standard
    library and installed packages), looking up from ``depth`` frames above the caller; else of
    the first installed package's; ``?`` when there is none (an interactive prompt). A file in
    the directory the run started in is named relative to it (:func:`relative_site`)."""
    frame = _outside(sys._getframe(depth + 1))
    user = frame
    while user is not None and (_is_skipped(user.f_code.co_filename) or _is_installed(user.f_code.co_filename)):
        user = user.f_back  # a library's call is placed at the user's line that led to it
    frame = user or frame
    return relative_site(f"{frame.f_code.co_filename}:{frame.f_lineno}", _STARTED_IN) if frame is not None else "?"


def caller_kind(depth: int = 1) -> tuple[str, str]:
    """Who made the call ``depth`` frames above the caller: ``("torch", module)`` for PyTorch's
    own code, ``("library", module)`` for an installed package (site-packages or dist-packages),
    else ``("user", module)``. Frames of bakeoff and the standard library are looked through."""
    frame: FrameType | None = sys._getframe(depth + 1)
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        module = str(frame.f_globals.get("__name__", "?"))
        if filename.startswith(_torch_root()):
            return "torch", module
        if not _is_skipped(filename):
            return ("library" if _is_installed(filename) else "user"), module
        frame = frame.f_back
    return "user", "?"


def _not_compiling() -> bool:
    return False


class Recorder:
    """Counts rewrites by API, keeps the first call site of each, and refuses numerics-changing
    ones when ``strict``. Safe to call from several threads."""

    def __init__(self, strict: bool = False) -> None:
        self.strict = strict
        torch = sys.modules.get("torch")  # a recorder of a process without torch never sees a graph
        self._compiling: Callable[[], bool] = torch.compiler.is_compiling if torch is not None else _not_compiling
        self._lock = threading.Lock()
        self._entries: dict[str, list] = {}  # api -> [count, site, numerics, reason]
        #: Called after each counted call with whether its API is new to the ledger (a child
        #: process keeps its ledger's file current with it); None: nothing is called.
        self.on_change: Callable[[bool], None] | None = None

    def restart(self) -> None:
        """Forget every rewrite and start counting afresh, with a new lock: a forked child's
        ledger is its own (the parent's rewrites, and a lock another thread held at the fork,
        stay the parent's)."""
        self._lock = threading.Lock()
        self._entries = {}

    def record(self, api: str, reason: str = "", numerics: bool = False, depth: int = 1) -> None:
        """Count one call of ``api``; its site is looked up from ``depth`` frames above the caller.

        Raises:
            RemapError: ``numerics`` is set and the recorder is strict (the call is still counted,
                so the ledger shows what was refused).

        While dynamo traces a compiled graph, a call is not counted: its lock and frame lookup
        would break the graph at bakeoff's line (and dynamo offers no side effect that is neither
        a graph break nor a guard). The ledger's counts are the calls made outside compiled
        graphs, so a rewrite made only inside one is not listed; the same script's eager runs
        (the reference) list it. One that changes numerics under ``strict`` is still refused.
        """
        if self._compiling() and not (numerics and self.strict):
            return
        with self._lock:
            entry = self._entries.get(api)
            if entry is None:
                self._entries[api] = entry = [0, call_site(depth + 1), numerics, reason]
            elif numerics and not entry[2]:  # a later call changed numerics: the entry says so
                entry[2:] = [True, reason]
            new = entry[0] == 0
            entry[0] += 1
            site = entry[1]
        if self.on_change is not None:
            self.on_change(new)
        if numerics and self.strict:
            raise RemapError(
                f"{api} at {site} would change numerics: {reason}",
                hint="run without --strict to accept it (it is flagged in the ledger), or change the script",
            )

    def ledger(self) -> Ledger:
        with self._lock:
            return Ledger(tuple(Rewrite(api, *entry) for api, entry in self._entries.items()))
