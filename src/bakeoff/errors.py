"""Typed exceptions: the library raises these, the CLI turns them into one line.

Every error carries a ``hint`` saying how to fix the problem, so the single error
boundary in :mod:`bakeoff.cli.main` can print "what was wrong" and "what to do"
without knowing where the error came from.
"""

from __future__ import annotations

__all__ = [
    "BakeoffError",
    "RemapError",
    "SpecError",
    "StoreError",
    "WorkloadError",
]


class BakeoffError(Exception):
    """Base class for problems caused by input or environment, not by a bug."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        """The message and the hint on one line, as the CLI prints it."""
        return f"{self.message} ({self.hint})" if self.hint else self.message


class SpecError(BakeoffError):
    """A workload or target spec that cannot be parsed or names nothing valid."""


class WorkloadError(BakeoffError):
    """A workload that parsed but could not be built (missing file, bad factory)."""


class StoreError(BakeoffError):
    """The knowledge base cannot be opened, read or written."""


class RemapError(BakeoffError):
    """A script's device cannot be remapped to the target, or a strict remap met a rewrite that
    would change numerics."""
