"""Enter a context in every thread started from now on.

PyTorch keeps its torch-function and dispatch mode stacks per thread: a mode entered in a
process's main thread does not reach the threads a server starts later to run its handlers
(FastAPI runs a plain ``def`` endpoint in a worker thread; an executor's workers; a streaming
response's producer). :func:`in_new_threads` wraps ``threading.Thread._bootstrap_inner``, the
method every ``threading.Thread`` runs first in its new thread (a subclass that overrides
``run``, as anyio's worker threads do, still goes through it), so that each thread started after
the call runs inside a context of its own (a new mode instance per thread), left when the
thread's work ends.

What it cannot reach: threads started before the call, threads started with ``_thread``
directly (not through ``threading``), and threads that C++ starts (autograd's device threads
take the modes of the thread that called ``backward()``, as PyTorch arranges).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

__all__ = ["in_new_threads"]


def in_new_threads(enter: Callable[[], AbstractContextManager[Any]]) -> Callable[[], None]:
    """Run every ``threading.Thread`` started after this call inside ``enter()`` (called in the
    new thread); return the undo, which stops it for threads started later. A context that
    cannot be entered or left is skipped: the thread runs anyway."""
    original = threading.Thread._bootstrap_inner  # type: ignore[attr-defined]
    active = [True]

    def bootstrap_inner(thread: threading.Thread) -> None:
        context = None
        if active[0]:
            try:
                context = enter()
                context.__enter__()
            except Exception:
                context = None
        try:
            original(thread)
        finally:
            if context is not None:
                try:
                    context.__exit__(None, None, None)
                except Exception:  # the thread left other modes above it: they end with it
                    pass

    threading.Thread._bootstrap_inner = bootstrap_inner  # type: ignore[attr-defined]

    def undo() -> None:
        active[0] = False
        if threading.Thread._bootstrap_inner is bootstrap_inner:  # type: ignore[attr-defined]
            threading.Thread._bootstrap_inner = original  # type: ignore[attr-defined]

    return undo
