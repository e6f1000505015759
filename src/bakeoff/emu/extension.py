"""The emu test device's C++ extension (emu_device.cpp): built on first use with
``torch.utils.cpp_extension`` into a directory of its own per source, torch build and checkout
(:func:`cache_dir`), one process at a time (:func:`load_extension`)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bakeoff.errors import BakeoffError

__all__ = ["SOURCE", "cache_dir", "load_extension"]

#: The extension's source.
SOURCE = Path(__file__).with_name("emu_device.cpp")


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
    digest = hashlib.sha256(SOURCE.read_bytes() + torch.__version__.encode() + b"\0" + where).hexdigest()[:12]
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
    with open(cache / "bakeoff-build.lock", "w", encoding="utf-8") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        (cache / "lock").unlink(missing_ok=True)
        yield


def load_extension() -> Any:
    from torch.utils.cpp_extension import load

    cache = cache_dir()
    try:
        with _builder_lock(cache):
            return load(
                name="bakeoff_emu",
                sources=[str(SOURCE)],
                build_directory=str(cache),
                extra_cflags=["-O1"],
                verbose=False,
            )
    except Exception as exc:  # no compiler, no ninja, headers missing
        raise BakeoffError(
            f"could not build the emu test device: {type(exc).__name__}: {str(exc)[:300]}",
            hint="it needs g++ and ninja (pip install ninja)",
        ) from exc
