"""The emu test device's C++ extension (emu_device.cpp): built on first use with
``torch.utils.cpp_extension`` into a directory of its own per source, flags, torch build and
checkout (:func:`cache_dir`), one process at a time (:func:`load_extension`).

Once a build there is finished (a stamp of the library it linked, written after torch's loader
returned it), every later process loads that library directly: torch's loader imports
``setuptools`` and asks ``ninja`` whether the build is current, 0.2 s of CPU in each process that
enables the device (a trial's workers, each run of an exec, each rank), for an answer the
directory's name already gives."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bakeoff.errors import BakeoffError

__all__ = ["SOURCE", "cache_dir", "load_extension"]

#: The extension's source.
SOURCE = Path(__file__).with_name("emu_device.cpp")
#: The module torch's loader builds, and the flags it builds it with.
MODULE = "bakeoff_emu"
CFLAGS = ("-O1",)
#: Written beside a finished build: the stamp of the library it linked.
BUILT = "bakeoff-built"
#: The file every loader here holds a ``flock`` on while it loads (and maybe builds).
BUILDER_LOCK = "bakeoff-build.lock"


def cache_dir() -> Path:
    """The extension's build directory: one per source, torch build *and checkout*. torch's
    loader rebuilds whenever the source's path or the include paths (torch's location) differ
    from the last build's, so two checkouts sharing one directory rebuilt it in turns (an exec
    of three targets took minutes instead of seconds while another checkout's tests ran)."""
    import torch

    base = Path(
        os.environ.get("BAKEOFF_CACHE") or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "bakeoff"
    )
    where = f"{SOURCE.resolve()}\0{Path(torch.__file__).resolve()}".encode()
    flags = "\0".join(CFLAGS).encode()
    digest = hashlib.sha256(SOURCE.read_bytes() + torch.__version__.encode() + b"\0" + where + flags).hexdigest()[:12]
    path = base / f"emu-{digest}"
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def _builder_lock(cache: Path) -> Iterator[None]:
    """Be the only process here loading (and maybe building) the extension, and clear a baton
    left by one that was killed mid-build. torch marks a build with a ``lock`` file and makes
    every later load wait until the file is gone, for ever if its builder died; every loader
    here takes this ``flock`` first, and the kernel releases it when its holder dies, so a
    ``lock`` file seen while holding it belongs to nobody alive."""
    try:
        import fcntl
    except ImportError:  # no flock here: torch's own baton only
        yield
        return
    with open(cache / BUILDER_LOCK, "w", encoding="utf-8") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        (cache / "lock").unlink(missing_ok=True)
        yield


def _library(cache: Path) -> Path:
    return cache / f"{MODULE}{'.pyd' if sys.platform == 'win32' else '.so'}"


def _stamp(library: Path) -> str:
    found = library.stat()
    return f"{found.st_size} {found.st_mtime_ns}"


def _load_built(cache: Path) -> Any:
    """The module of a finished build in ``cache``, loaded as torch's loader loads it; None when
    there is none (never built, a build killed before its stamp, a library changed since)."""
    library = _library(cache)
    try:
        if (cache / BUILT).read_text(encoding="utf-8") != _stamp(library):
            return None
    except OSError:
        return None
    spec = importlib.util.spec_from_file_location(MODULE, library)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_extension() -> Any:
    cache = cache_dir()
    built = _load_built(cache)
    if built is not None:
        return built
    from torch.utils.cpp_extension import load

    try:
        with _builder_lock(cache):
            module = load(
                name=MODULE, sources=[str(SOURCE)], build_directory=str(cache), extra_cflags=list(CFLAGS), verbose=False
            )
            try:
                (cache / BUILT).write_text(_stamp(_library(cache)), encoding="utf-8")
            except OSError:  # not stamped: the next process asks torch's loader again
                pass
            return module
    except Exception as exc:  # no compiler, no ninja, headers missing
        raise BakeoffError(
            f"could not build the emu test device: {type(exc).__name__}: {str(exc)[:300]}",
            hint="it needs g++ and ninja (pip install ninja)",
        ) from exc
