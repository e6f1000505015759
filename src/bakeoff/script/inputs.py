"""The files a script reads from its working directory: part of what a script run is.

A script's result depends on its source, its arguments and the files it reads (a config, a
dataset, its own modules). :class:`InputFiles` records the files under a root (the run's copy of
the working directory) that the script opens for reading, through an audit hook
(:func:`sys.addaudithook`): Python raises an ``open`` event for every ``open()``, ``io.open``,
``pathlib`` read and ``io.open_code`` (how modules are imported), and so for the libraries that
read through them (``json``, ``numpy.load``, ``torch.load``, transformers' configs).

What it cannot see: files a library opens in native code (safetensors' reader, a C library's
``fopen``), files read before the hook is on or after it is off, and files opened by file
descriptor only. Opening for writing, appending or updating is not reading; caches
(``__pycache__``) are left out. At most :data:`MAX_INPUTS` paths are kept.

An audit hook cannot be removed: :meth:`InputFiles.stop` turns it into a no-op.
"""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["MAX_INPUTS", "InputFiles"]

#: The most paths kept (a script that reads a directory of thousands of files is summed up).
MAX_INPUTS = 1000
_WRITES = frozenset("wax+")


class InputFiles:
    """Records the files under ``root`` opened for reading while it is on."""

    def __init__(self, root: str | os.PathLike[str], leave_out: tuple[str, ...] = ()) -> None:
        self.root = os.path.join(os.path.realpath(root), "")
        self._leave_out = {os.path.realpath(p) for p in leave_out}
        self._paths: set[str] = set()
        self._on = False
        self._installed = False
        self.truncated = False

    def install(self) -> InputFiles:
        """Start recording (the hook is added once, for the life of the process)."""
        if not self._installed:
            sys.addaudithook(self._hook)
            self._installed = True
        self._on = True
        return self

    def stop(self) -> None:
        self._on = False

    def paths(self) -> tuple[str, ...]:
        """The files read, relative to the root, in order of their names."""
        return tuple(sorted(self._paths))

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if not self._on or event != "open":
            return
        path, mode, flags = (*tuple(args), None, None, None)[:3]
        if not isinstance(path, str | bytes | os.PathLike):
            return  # a file descriptor
        if isinstance(mode, str) and _WRITES.intersection(mode):
            return
        if mode is None and isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR):
            return
        try:
            full = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return
        if not full.startswith(self.root) or full in self._leave_out:
            return
        relative = full[len(self.root) :]
        if "__pycache__" in relative.split(os.sep) or relative in self._paths:
            return
        if len(self._paths) >= MAX_INPUTS:
            self.truncated = True
            return
        self._paths.add(relative.replace(os.sep, "/"))
