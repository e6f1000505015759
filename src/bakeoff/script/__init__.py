"""Whole scripts as written: remap their device, keep a ledger of the rewrites, capture values.

:class:`~bakeoff.script.remap.Remapper` makes a CUDA-style script run on another device without
editing it and records every rewrite (:class:`~bakeoff.script.ledger.Ledger`);
:func:`~bakeoff.script.capture.capture` records named values of a run for comparison (a no-op
outside bakeoff). ``Remapper`` imports torch, so it is loaded on first use.
"""

from __future__ import annotations

from typing import Any

from bakeoff.script.capture import Captures, capture, recording
from bakeoff.script.ledger import Ledger, Rewrite

__all__ = ["Captures", "Ledger", "Remapper", "Rewrite", "capture", "recording"]


def __getattr__(name: str) -> Any:
    if name == "Remapper":
        from bakeoff.script.remap import Remapper

        return Remapper
    raise AttributeError(f"module 'bakeoff.script' has no attribute {name!r}")
