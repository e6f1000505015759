"""The answer of ``bakeoff fit``: every grid point's peak (predicted, calibrated, measured where
probed), the edge per sequence length, and what would move it."""

from __future__ import annotations

from dataclasses import dataclass, field

from bakeoff.codec import Value

__all__ = ["FitEdge", "FitPoint", "FitRequirement", "FitResult"]


@dataclass(frozen=True)
class FitPoint(Value):
    """One point: ``predicted`` on the host (bytes; ``parts`` at its peak), ``expected`` after
    calibration, whether that ``fits`` the capacity; ``measured`` on the target where a probe ran
    (``probe`` says why: calibration, requirement or verification; ``out_of_memory`` when the
    device refused; ``error`` when the step failed there: it does not fit either)."""

    batch: int
    seq: int | None
    predicted: int
    expected: int
    fits: bool
    parts: dict[str, int] = field(default_factory=dict)
    measured: int | None = None
    probe: str = ""
    out_of_memory: bool = False
    error: str = ""


@dataclass(frozen=True)
class FitEdge(Value):
    """The largest ``batch`` that fits at ``seq`` with every smaller batch of the grid (None: not
    even the smallest), its ``margin`` (share of the capacity left), the part that ``dominates``
    its peak, the first batch ``beyond`` it, and ``moves``: what would let ``beyond`` fit;
    ``verified``: the edge was measured on the target and fits."""

    seq: int | None
    batch: int | None
    margin: float | None = None
    dominates: str = ""
    beyond: int | None = None
    moves: tuple[str, ...] = ()
    verified: bool = False


@dataclass(frozen=True)
class FitRequirement(Value):
    """``fits batch=B&seq=S``: ``verdict`` met or not met, from the ``peak`` measured on the
    target (``measured``) or, without probes, predicted and calibrated."""

    text: str
    verdict: str
    peak: int
    measured: bool


@dataclass(frozen=True)
class FitResult(Value):
    """``bakeoff fit``'s answer for one workload on one target."""

    workload: str
    target: str
    training: bool
    optimizer: str
    grid: str
    capacity: int
    capacity_from: str
    calibration: str
    verification: str
    points: tuple[FitPoint, ...] = ()
    edges: tuple[FitEdge, ...] = ()
    predict_s: float = 0.0
    notes: tuple[str, ...] = ()
    requirements: tuple[FitRequirement, ...] = ()
