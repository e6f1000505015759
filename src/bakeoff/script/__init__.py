"""Whole scripts as written: the values they capture for comparison.

:func:`~bakeoff.script.capture.capture` records named values of a run for comparison (a no-op
outside bakeoff).
"""

from __future__ import annotations

from bakeoff.script.capture import Captures, capture, recording

__all__ = ["Captures", "capture", "recording"]
