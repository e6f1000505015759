"""The stored value of a localisation: where the target's divergence starts, and the record of it.

:class:`Localization` is what the check (:mod:`bakeoff.checks.localization`) returns and the
store keeps: its verdict, the method that found it, the origins (:class:`Origin`, each with its
replay's confirmation) and a summary of every compared module call (:class:`CallSummary`, for
the chart of error by depth). A rerun never replaces an earlier record: :func:`kept_with` puts
the stored one behind the latest.
"""

from __future__ import annotations

from dataclasses import dataclass

from bakeoff.codec import Value

__all__ = ["CallSummary", "Localization", "Origin", "kept_with"]


@dataclass(frozen=True)
class Origin:
    """A module call where the divergence starts: its qualified name, class, call index and
    depth; its output's error (``target_err`` and ``reference_err``, RMS relative to the
    golden's RMS) and ``ratio`` to the allowed error (``tolerance`` = m); how many failing calls
    came after it (``downstream``); ``replay`` its confirmation: ``confirmed`` (alone on the
    reference's inputs it is still wrong), ``accumulated`` (alone it is right), ``walked_up``
    (its parent, replayed, is wrong: the parent is named in ``walked_to``). Inside a confirmed
    origin of an eager target the module's ops are compared one by one: ``op_suspect`` names the
    first op whose output breaks the three-way rule, when the target ran the same op sequence as
    the reference; ``ops`` says what was found (or the two op lists where they differ)."""

    module: str
    cls: str
    call: int
    depth: int
    target_err: float
    reference_err: float
    ratio: float
    tolerance: float
    downstream: int = 0
    replay: str = ""
    walked_to: str = ""
    op_suspect: str = ""
    ops: str = ""


@dataclass(frozen=True)
class CallSummary:
    """One compared module call: name, call index, depth, worst output error ratio, failed."""

    module: str
    call: int
    depth: int
    ratio: float
    failed: bool


@dataclass(frozen=True)
class Localization(Value):
    """Where the target's divergence starts (see the module docstring).

    ``verdict``: ``localized`` (origins found), ``not_found`` (no module call diverged: the
    reason says what that leaves), ``not_comparable`` (the runs could not be compared).
    ``rung`` names the ladder's rung that failed first for a compiled target: ``device kernels``,
    ``decomposition`` or ``backend compiler``.

    Each localisation is a record of its own, dated ``at`` (UTC, ISO 8601; empty when stored
    by a bakeoff that did not date them): a later one never replaces an earlier, which stays in
    ``earlier`` (latest first, each without earlier records of its own). A rerun that times out
    or no longer finds the fault is the latest record, and the origin found before is still
    there (see :func:`kept_with`).
    """

    verdict: str
    method: str = ""
    reason: str = ""
    rung: str = ""
    origins: tuple[Origin, ...] = ()
    calls_compared: int = 0
    calls_failed: int = 0
    calls: tuple[CallSummary, ...] = ()
    seconds: float = 0.0
    at: str = ""
    earlier: tuple[Localization, ...] = ()

    @property
    def first(self) -> Origin | None:
        return self.origins[0] if self.origins else None


def kept_with(latest: Localization, stored: Localization | None, stored_at: str = "") -> Localization:
    """``latest`` with the ``stored`` value and its earlier records behind it (latest first);
    ``stored_at`` dates a stored record that has no date of its own."""
    if stored is None:
        return latest
    from dataclasses import replace

    before = replace(stored, earlier=(), at=stored.at or stored_at)
    return replace(latest, earlier=(before, *stored.earlier, *latest.earlier))
