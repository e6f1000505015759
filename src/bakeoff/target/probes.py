"""Backend-specific placement signals, for work a dispatch-level audit cannot see.

A probe brackets one forward pass on the target (``begin``/``end``) and reports the ops its
backend ran on the host (``fallback_ops``) plus anything else it knows (``signals``). Each
engine adapter (:mod:`bakeoff.target.engines`) offers the probe of its device; the placement
check itself does not change.
"""

from __future__ import annotations

from bakeoff.target.engines import Probe, probe_for

__all__ = ["Probe", "probe_for"]
