"""Remap every Python process a remapped script starts, and bring their ledgers home.

A script's child processes (``subprocess.run([sys.executable, "child.py"])``, ``multiprocessing``
with any start method, ``torch.multiprocessing``, DataLoader workers) are fresh interpreters, or
forks, that the launcher's :class:`~bakeoff.script.remap.Remapper` does not reach by itself.
While :func:`remapped_children` is entered (the launcher enters it around a remapped script;
never around the script as written), the environment the script's children inherit holds:

* ``PYTHONPATH`` with a directory of bakeoff's first (``OUT/child-site``), holding a
  ``sitecustomize.py`` that Python imports at every interpreter start. It calls
  :func:`arm_from_env`, then runs the ``sitecustomize`` it hides (the next one on ``sys.path``:
  a user's, a distribution's), as Python would have;
* :data:`ENV`: the mapping, ``--strict``, where ledgers go and the launcher's pid (the hook is a
  no-op in the launcher's own process; a child seeds itself, as the script does).

In a fresh interpreter :func:`arm_from_env` waits for ``import torch`` (a child that never
imports torch is left alone and costs nothing; one that sets ``CUDA_VISIBLE_DEVICES`` or thread
counts before importing torch still can) and, when torch has loaded, enables the ``emu`` test
device where it is a target (as the launcher does) and installs the same ``Remapper``. A *forked*
child (``multiprocessing``'s fork and forkserver, ``os.fork``) inherits the installed remap; at
the fork its ledger restarts from zero, so the parent's rewrites are never counted twice.

Each remapped child keeps ``OUT/children/<pid>.json``
(:class:`~bakeoff.script.child_reports.ChildReport`) current: a fresh child writes it when its
remap is installed, every child when it first makes a rewrite of an API and then at most every
quarter of a second while it makes more, and finally, marked ended, when it ends: at interpreter
exit (``atexit``) and in ``multiprocessing``'s own exit path (its forked children end in
``os._exit``, which skips ``atexit``). The runner merges the reports
(:mod:`bakeoff.script.child_reports`): each rewrite summed per API and call site, the site marked
with the child processes it came from; a note says how many child processes ran remapped. What
the run's supervisor (:mod:`bakeoff.runner.script_worker`) writes, the processes it killed when
the script ended and what the script's stdin was, joins the same summary and notes.

Children are remapped, **not audited**: the placement audit and ``--capture`` (losses and
``bakeoff.capture`` included) see the launcher's process only.

What is lost: a child that ends without unwinding (``SIGTERM``, which ``Pool.terminate()`` and
so leaving ``with Pool(...)`` send to workers still alive; ``SIGKILL``; ``os._exit`` outside
``multiprocessing``; a crash) reports every API it rewrote but its counts as of its last write
(up to a quarter of a second old), and is said not to have ended; a fork that dies so before its first
rewrite leaves nothing. (A ``SIGTERM`` handler could write the last counts, but a Python
handler can miss a signal that arrives as the process goes to sleep on a lock, and a worker
that ``terminate()`` could not stop would hang its pool.) Children not reached at all:
non-Python programs, an interpreter without bakeoff importable (it runs as written),
``python -E``, ``-I`` or ``-S`` (no ``PYTHONPATH`` or no ``site``), a subprocess given its own
environment without these variables, and a child whose first ``import torch`` happens outside
its main thread (the remap's function mode is that thread's).
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bakeoff.script.child_reports import FORMAT, LEDGERS, ChildReport
from bakeoff.script.ledger import relative_site

__all__ = [
    "ENV",
    "SITE",
    "arm_from_env",
    "remapped_children",
]

#: The environment variable that carries the remap to children (JSON).
ENV = "BAKEOFF_EXEC_CHILDREN"
#: Under the launcher's output directory: the ``sitecustomize.py`` directory (the ledgers are
#: under :data:`~bakeoff.script.child_reports.LEDGERS`).
SITE = "child-site"

_SHIM = '''\
"""Written by bakeoff exec: remap this Python process as the script that started it is remapped
(bakeoff.script.children), then run the sitecustomize this one hides, if there is one."""


def _bakeoff_child():
    import importlib.machinery
    import importlib.util
    import os
    import sys

    try:
        from bakeoff.script.children import arm_from_env
    except ImportError:  # an interpreter without bakeoff: it runs as written
        pass
    else:
        try:
            arm_from_env()
        except Exception as exc:
            print(f"bakeoff: this process runs unmapped: {type(exc).__name__}: {exc}", file=sys.stderr)
    here = os.path.dirname(os.path.abspath(__file__))
    paths = [os.path.abspath(p or os.curdir) for p in sys.path]
    rest = sys.path[paths.index(here) + 1 :] if here in paths else list(sys.path)
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module  # what "import sitecustomize" gives from here on
        spec.loader.exec_module(module)


_bakeoff_child()
del _bakeoff_child
'''


@dataclass(frozen=True)
class _State:
    config: dict[str, Any]
    pid: int
    parent: int
    forked: bool
    started: float
    error: str | None = None
    name: str | None = None


_state: _State | None = None
#: What has been set up once in this process (inherited by its forks).
_armed: set[str] = set()


# -- the launcher's side -----------------------------------------------------------------------


@contextmanager
def remapped_children(
    mapping: Mapping[str, str],
    *,
    strict: bool,
    out: str | Path,
    threads: bool = False,
    after: Mapping[str, Any] | None = None,
) -> Iterator[None]:
    """Make every Python process started inside the block remap as this one does (see the
    module's docstring); ``out`` is the launcher's output directory. An empty ``mapping`` (the
    script as written) sets nothing. The environment is restored when the block is left.

    ``threads``: the children's remaps reach the threads they start after it is installed (see
    :class:`~bakeoff.script.remap.Remapper`). ``after``: ``{"module:function": argument}``,
    each called with its (JSON) argument in the block's *direct* Python children once their
    remap is installed (a service's own process, not what it starts); one that fails says so on
    the child's stderr and the child runs on."""
    global _state
    if not mapping:
        yield
        return
    out = Path(out).resolve()
    site = out / SITE
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(_SHIM)
    (out / LEDGERS).mkdir(exist_ok=True)
    config = {
        "map": dict(mapping),
        "strict": strict,
        "out": str(out / LEDGERS),
        "launcher": os.getpid(),
        "cwd": os.getcwd(),
        "threads": threads,
        "after": dict(after or {}),
    }
    saved = {name: os.environ.get(name) for name in (ENV, "PYTHONPATH")}
    previous = os.environ.get("PYTHONPATH")
    os.environ[ENV] = json.dumps(config)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(site), *([previous] if previous else [])])
    saved_state = _state
    _state = _State(config, os.getpid(), os.getppid(), False, time.time())
    _arm_process()
    try:
        yield
    finally:
        _state = saved_state
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# -- the child's side --------------------------------------------------------------------------


def arm_from_env() -> None:
    """In a fresh interpreter started under :func:`remapped_children` (the ``sitecustomize``
    calls it): install the remap when torch is imported. A no-op without :data:`ENV`, in the
    launcher's own process, and when already armed."""
    global _state
    raw = os.environ.get(ENV)
    if not raw or _state is not None:
        return
    config = json.loads(raw)
    if config.get("launcher") == os.getpid():
        return
    _state = _State(config, os.getpid(), os.getppid(), False, time.time())
    if "torch" in sys.modules:
        _torch_loaded()
    else:
        sys.meta_path.insert(0, _TorchWatch())


class _TorchWatch:
    """A meta-path finder that finds nothing itself: it lets the others find ``torch`` and calls
    :func:`_torch_loaded` once torch's ``__init__`` has run (the loader is left as it is)."""

    def __init__(self) -> None:
        self.done = False

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "torch" or self.done:
            return None
        self.done = True
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec

        def exec_then_remap(module: Any) -> None:
            exec_module(module)
            del loader.exec_module  # the loader's own method again
            _torch_loaded()

        loader.exec_module = exec_then_remap
        return spec


def _torch_loaded() -> None:
    """Install the remap in this fresh child (once torch is loaded) and arm its ledger's writers."""
    global _state
    state = _state
    assert state is not None
    error = None
    try:
        from bakeoff import emu
        from bakeoff.errors import BakeoffError
        from bakeoff.script.devices import DeviceMap
        from bakeoff.script.remap import Remapper, installed

        mapping = state.config["map"]
        try:
            if emu.NAME in {kind for kind, _ in DeviceMap(mapping).targets.values()}:
                emu.enable()  # only where it is a target: loading it costs every child a second or more
            if installed() is None:
                threads = bool(state.config.get("threads"))
                Remapper(mapping, strict=bool(state.config.get("strict")), threads=threads).install()
        except BakeoffError as exc:
            error = exc.one_line()
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    if error is not None:
        print(f"bakeoff: this child process runs unmapped: {error}", file=sys.stderr)
        _state = replace(state, error=error)
    _arm_process()
    remapper = _installed()
    if remapper is not None:
        _watch(remapper)
        if state.parent == state.config.get("launcher"):
            _after(state.config.get("after") or {})
    _write(ended=False)


def _after(hooks: Mapping[str, Any]) -> None:
    """Call the launcher's ``after`` hooks (see :func:`remapped_children`), never into the child."""
    import importlib

    for name, argument in hooks.items():
        module, _, function = name.partition(":")
        try:
            getattr(importlib.import_module(module), function)(argument)
        except Exception as exc:
            print(f"bakeoff: {name} did not start in this process: {type(exc).__name__}: {exc}", file=sys.stderr)


def _installed() -> Any:
    remap = sys.modules.get("bakeoff.script.remap")
    return remap.installed() if remap is not None else None


def _arm_process() -> None:
    """Once per process lineage: the writers at exit and the restart at a fork (both inherited
    by forks, so a fork never registers them twice)."""
    if "exit" in _armed:
        return
    _armed.add("exit")
    atexit.register(_flush)
    os.register_at_fork(after_in_child=_after_fork)
    import multiprocessing.util

    multiprocessing.util.register_after_fork(_KEEP, _after_mp_fork)


class _Keep:
    """A long-lived object for ``multiprocessing.util.register_after_fork`` (it holds a weakref)."""


_KEEP = _Keep()


def _after_fork() -> None:
    """In a forked child: a ledger of its own (the parent's rewrites stay the parent's)."""
    global _state, _writing
    state = _state
    if state is None:
        return
    _state = _State(state.config, os.getpid(), os.getppid(), True, time.time(), state.error)
    _writing = threading.Lock()  # another thread may have held it at the fork
    remapper = _installed()
    if remapper is not None:
        remapper.recorder.restart()
        _watch(remapper)


def _after_mp_fork(_keep: Any) -> None:
    """In a ``multiprocessing`` child, before its target runs: write the ledger in its exit
    path (a forked one ends in ``os._exit``)."""
    import multiprocessing.util

    multiprocessing.util.Finalize(None, _flush, exitpriority=0)


#: Seconds between two writes of a child's ledger while its counts change.
WRITE_EVERY_S = 0.25
_writing = threading.Lock()
_last_write = [0.0]


def _watch(remapper: Any) -> None:
    remapper.recorder.on_change = _changed


def _changed(new: bool) -> None:
    """After each rewrite in a child: write the ledger for a new API, else every :data:`WRITE_EVERY_S`."""
    if not new and time.monotonic() - _last_write[0] < WRITE_EVERY_S:
        return
    try:
        _write(ended=False, wait=False)
    except Exception:  # never into the script; the final write says what it can
        pass


def _flush() -> None:
    """Write this child's final ledger (nothing in the launcher, or where nothing was remapped)."""
    state = _state
    if state is None or state.pid != os.getpid() or state.config.get("launcher") == os.getpid():
        return
    if _installed() is None and state.error is None:
        return
    try:
        _write(ended=True)
    except Exception as exc:  # at exit: say so, never raise
        print(f"bakeoff: could not write this child's ledger: {exc}", file=sys.stderr)


def _label(state: _State) -> str:
    process = sys.modules.get("multiprocessing.process")
    name = process.current_process().name if process is not None else "MainProcess"
    if name != "MainProcess":
        return name
    if state.forked:
        return f"a fork of pid {state.parent}"
    words = ["python", *[str(a) for a in sys.argv]]
    text = " ".join(words)
    return text if len(text) <= 80 else text[:77] + "..."


def _write(ended: bool, wait: bool = True) -> None:
    """Write this child's report; without ``wait``, not at all while another write is under way
    (a rewrite made by a signal handler that interrupted a write must not wait for it)."""
    lock = _writing
    acquired = lock.acquire(timeout=5.0) if wait else lock.acquire(blocking=False)
    if not acquired:
        return
    try:
        _write_locked(ended)
        _last_write[0] = time.monotonic()
    finally:
        lock.release()


def _write_locked(ended: bool) -> None:
    global _state
    state = _state
    if state is None or state.pid != os.getpid():  # a fork Python was not told of: not its file
        return
    folder = Path(state.config["out"])
    if state.name is None:  # a pid the system reused within the run gets a file of its own
        names = [f"{state.pid}.json", *(f"{state.pid}.{n}.json" for n in range(1, 100))]
        name = next((n for n in names if not (folder / n).exists()), names[-1])
        _state = state = replace(state, name=name)
    remapper = _installed()
    rows = remapper.ledger.rewrites if remapper is not None else ()
    cwd = str(state.config.get("cwd") or os.getcwd())
    report = ChildReport(
        format=FORMAT,
        pid=state.pid,
        parent=state.parent,
        label=_label(state),
        forked=state.forked,
        ended=ended,
        started=state.started,
        error=state.error,
        ledger=tuple(replace(r, site=relative_site(r.site, cwd)) for r in rows),
    )
    assert state.name is not None
    tmp = folder / f".{state.name}.tmp"
    tmp.write_text(json.dumps(report.to_dict()) + "\n")
    os.replace(tmp, folder / state.name)
