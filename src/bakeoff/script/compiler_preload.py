"""PyTorch's compiler imported ahead of a script's run, and the one way that could show.

A script's first optimizer (``torch.optim``) or ``torch.compile`` imports ``torch._dynamo``, and
with it inductor and their configs: about 800 modules, 2-3 s of every run on a loaded machine.
A fork server of ``bakeoff exec`` (:mod:`bakeoff.launch.forkserver`) imports this module so
that each forked run starts with them imported.

What that changes for a script: those configs read about 300 environment variables when
imported (``TORCHINDUCTOR_CACHE_DIR``, ``TORCHDYNAMO_VERBOSE``, ...). In a fresh interpreter a
script that sets one of them itself, before its first optimizer or compile, is heard; in a run
forked from here it would not be. :func:`guard` watches for exactly that (an audit hook on
``os.putenv`` and ``os.unsetenv``, which ``os.environ`` calls): a run whose own code (not
PyTorch's: inductor names its cache directory in ``TORCHINDUCTOR_CACHE_DIR`` when first asked)
changes a variable read by this import leaves a file naming it and ends at once, and bakeoff
runs it again in a fresh interpreter (:func:`bakeoff.runner.script_run.run_script`).

Also settled before the run: that import sets ``TORCHINDUCTOR_CACHE_DIR`` in the server's own
environment, which a run does not inherit (it gets its own); PyTorch sets it again, to the same
directory, when the run next asks for it.

What it cannot see: a variable read from native code at import (C++'s ``getenv``), and one
changed through ``ctypes``' ``setenv``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["READ", "guard"]


def _import_recording_reads() -> frozenset[str]:
    """Import ``torch._dynamo`` (and what it imports), returning the environment variables read
    through ``os.environ`` meanwhile (``get``, ``in`` and ``os.getenv`` all read an item)."""
    environ = type(os.environ)
    original = environ.__getitem__
    read: set[str] = set()

    def getitem(self: Any, key: str) -> str:
        read.add(key)
        return original(self, key)

    environ.__getitem__ = getitem  # type: ignore[method-assign]
    try:
        import torch._dynamo  # noqa: F401
    finally:
        environ.__getitem__ = original  # type: ignore[method-assign]
    return frozenset(read)


#: The environment variables importing the compiler read.
READ = _import_recording_reads()


def guard(marker: Path, exit_code: int) -> None:
    """From now on in this process (and its forked children), a change made outside PyTorch to a
    variable in :data:`READ` writes its name to ``marker`` and ends the process with ``exit_code``."""
    import torch

    ours = os.path.join(os.path.dirname(torch.__file__), "")

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event not in ("os.putenv", "os.unsetenv"):
            return
        name = os.fsdecode(args[0])
        if name not in READ:
            return
        now = os.environ.get(name)
        if (event == "os.putenv" and now == os.fsdecode(args[1])) or (event == "os.unsetenv" and now is None):
            return  # no change
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename in (os.__file__, "<frozen os>"):
            frame = frame.f_back  # os.environ's own frames
        if frame is not None and frame.f_code.co_filename.startswith(ours):
            return  # PyTorch's own (inductor's cache directory)
        try:
            marker.write_text(name)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(exit_code)

    sys.addaudithook(hook)
