"""Keep what libraries say while a target runs off the terminal, and in the target's log.

Three ways a library talks, each caught while a :class:`Capture` is active:

- Python ``warnings``: ``warnings.showwarning`` is replaced, so a warning that the filters let
  through (once per place, by default) is counted instead of printed. The filters are left
  alone: what is ignored stays ignored.
- ``logging``: every ``StreamHandler`` that writes to the terminal's stdout or stderr (torch's
  own handlers, ``logging.lastResort``) has its records counted instead, whatever logger they
  come from and whenever the handler was made; handlers writing to files are left alone.
- Raw output: file descriptors 1 and 2 are pointed at two files (``os.dup2``), so text written
  from C++ (ONNX Runtime's logger, OpenVINO, a ``printf``) lands there, and is read back and
  counted line by line at each change of phase and when the capture ends. The files are
  written as the text comes, so a worker that crashes or hangs leaves them readable: the
  parent reads them with :func:`read_output`.

Nothing else changes: bakeoff's worker protocol is a pipe, faulthandler writes to its own file,
and a step's exception is a value; the descriptors are restored before anything is reported.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bakeoff.results.librarylog import LibraryLog

__all__ = ["Capture", "read_output"]

_SOURCES = {1: "stdout", 2: "stderr"}
_LONGEST = 64 * 1024  # a "line" longer than this is cut (it is cut to 500 characters anyway)


def _flush() -> None:
    """Write out what Python and C buffered for stdout and stderr, before a descriptor moves."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):
            if stream is not None:
                stream.flush()
    if sys.platform != "win32":
        with contextlib.suppress(Exception):
            import ctypes

            ctypes.CDLL(None).fflush(None)


def _on_terminal(stream: Any) -> bool:
    if stream is None:
        return False
    if stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        return True
    try:
        return stream.fileno() in (1, 2)
    except Exception:
        return False


def _output_files(directory: Path) -> dict[int, Path]:
    return {fd: directory / f"{name}.txt" for fd, name in _SOURCES.items()}


def _read_lines(path: Path, offset: int, complete: bool) -> tuple[list[str], int]:
    """The lines of ``path`` from ``offset``, and the offset after them; without ``complete``
    a last line that has no line end yet is left for the next read."""
    if not path.exists():
        return [], offset
    lines: list[str] = []
    with open(path, "rb") as f:
        f.seek(offset)
        rest = b""
        while chunk := f.read(1 << 20):
            parts = (rest + chunk).split(b"\n")
            rest = parts.pop()
            if len(rest) > _LONGEST:
                parts.append(rest[:_LONGEST])
                rest = b""
            lines.extend(p.decode("utf-8", errors="replace") for p in parts)
        end = f.tell()
    if complete and rest:
        lines.append(rest.decode("utf-8", errors="replace"))
        rest = b""
    return lines, end - len(rest)


def read_output(directory: str | Path, log: LibraryLog, phase: str) -> None:
    """Count into ``log``, under ``phase``, the raw output a capture in ``directory`` left
    unread (a worker that died while capturing)."""
    for fd, path in _output_files(Path(directory)).items():
        lines, _ = _read_lines(path, 0, complete=True)
        for line in lines:
            log.add(_SOURCES[fd], phase, line)


class Capture:
    """Catches warnings, log records and raw output into ``log`` while :meth:`active`.

    ``phase`` names the part of the run a line belongs to when it comes; call :meth:`fold`
    before the phase changes, so raw output is counted under the phase that wrote it.
    ``directory`` holds the two output files (it must exist; the caller removes it).
    """

    def __init__(self, log: LibraryLog, phase: Callable[[], str], directory: str | Path) -> None:
        self.log, self.phase = log, phase
        self.files = _output_files(Path(directory))
        self.offsets = dict.fromkeys(self.files, 0)
        self.saved: dict[int, int] = {}

    @property
    def is_active(self) -> bool:
        return bool(self.saved)

    # -- hooks ---------------------------------------------------------------------------------
    def _warning(
        self, message: Any, category: type, filename: str, lineno: int, file: Any = None, line: Any = None
    ) -> None:
        if file is not None and not _on_terminal(file):  # someone asked for a file of their own
            warnings._showwarning_orig(message, category, filename, lineno, file, line)  # type: ignore[attr-defined]
            return
        self.log.add("warnings", self.phase(), f"{category.__name__}: {message}")

    def _record(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # a record whose arguments do not fit its message
            text = str(record.msg)
        if record.exc_info and record.exc_info[1] is not None:
            text += f" ({type(record.exc_info[1]).__name__}: {record.exc_info[1]})"
        self.log.add("logging", self.phase(), f"{record.levelname} {record.name}: {text}")

    # -- the capture ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def active(self, replay_on_error: bool = False) -> Iterator[None]:
        """Catch everything while the block runs (a nested use is the same capture).

        With ``replay_on_error``, an exception leaving the block first writes what was caught
        to stderr: where no result will keep it (the workload could not be built), it may
        explain the error.
        """
        if self.is_active:
            yield
            return
        before = len(self.log)
        saved_warning = warnings.showwarning
        emit = logging.StreamHandler.emit
        capture = self

        def quiet_emit(handler: logging.StreamHandler, record: logging.LogRecord) -> None:
            if _on_terminal(getattr(handler, "stream", None)):
                capture._record(record)
            else:
                emit(handler, record)

        self._redirect()
        warnings.showwarning = self._warning
        logging.StreamHandler.emit = quiet_emit  # type: ignore[method-assign]
        try:
            yield
        except Exception:
            self._restore(saved_warning, emit)
            if replay_on_error:
                for line in self.log.entries()[before:]:
                    times = f" [x{line['count']}]" if line["count"] > 1 else ""
                    print(f"{line['text']}{times}", file=sys.stderr)
            raise
        finally:
            self._restore(saved_warning, emit)

    @contextlib.contextmanager
    def suspended(self) -> Iterator[None]:
        """Let bakeoff's own output (a progress line) through while the capture is active."""
        if not self.is_active:
            yield
            return
        _flush()
        moved = {fd: os.dup(fd) for fd in self.saved}
        for fd, original in self.saved.items():
            os.dup2(original, fd)
        try:
            yield
        finally:
            _flush()
            for fd, target in moved.items():
                os.dup2(target, fd)
                os.close(target)

    def _redirect(self) -> None:
        _flush()
        for fd, path in self.files.items():
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            self.saved[fd] = os.dup(fd)
            os.dup2(target, fd)
            os.close(target)

    def _restore(self, saved_warning: Any, emit: Any) -> None:
        if not self.is_active:
            return
        _flush()
        for fd, original in self.saved.items():
            os.dup2(original, fd)
            os.close(original)
        self.saved = {}
        warnings.showwarning = saved_warning
        logging.StreamHandler.emit = emit  # type: ignore[method-assign]
        self.fold(self.phase(), complete=True)
        for path in self.files.values():  # read: start the files again, so they stay small
            with contextlib.suppress(OSError):
                os.truncate(path, 0)
        self.offsets = dict.fromkeys(self.files, 0)

    def fold(self, phase: str, complete: bool = False) -> None:
        """Count the raw output written since the last fold as ``phase``'s."""
        if complete is False:
            _flush()
        for fd, path in self.files.items():
            lines, self.offsets[fd] = _read_lines(path, self.offsets[fd], complete)
            for line in lines:
                self.log.add(_SOURCES[fd], phase, line)
