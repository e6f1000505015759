"""Will it fit: the scenario ``bakeoff fit`` records (a trial has none).

``bakeoff fit`` predicts the peak memory of a grid of batch sizes and sequence lengths on the
host, calibrates and verifies it on the target (:mod:`bakeoff.fit`); its answer is stored as this
scenario's result so that ``show``, every report and ``regressions`` read it:

* ``options``: the ``grid``, ``training`` and ``optimizer``;
* ``facts``: the whole :class:`FitResult` as stored (every point's
  predicted, expected and measured peak, the edge per sequence length with its margin and what
  would move it, the capacity and where it came from, the calibration and the verification).

Its ``--require 'fits batch=B&seq=S'`` verdicts are the target's requirements (metric
``fits``: the point's peak, measured where a probe ran, against the capacity), so the decision
reads them as it reads a trial's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bakeoff.codec import Value
from bakeoff.scenarios.base import Scenario, ScenarioContext, ScenarioResult
from bakeoff.units import human_bytes

__all__ = ["Fit", "FitEdge", "FitPoint", "FitRequirement", "FitResult", "edge_words", "fit_of"]


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
    """``fits batch=B&seq=S``: ``verdict`` met (the target ran it within the capacity), not met
    (it did not fit: refused or failed on the target, or measured or predicted over the capacity)
    or not conclusive (predicted to fit, never run on the target: the CPU, ``--predict-only``);
    ``peak`` measured on the target (``measured``) or else predicted and calibrated."""

    text: str
    verdict: str
    peak: int
    measured: bool


@dataclass(frozen=True)
class FitResult(Value):
    """``bakeoff fit``'s answer for one workload on one target (``run_id``: the run it is stored as)."""

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
    run_id: str = ""


def fit_of(scenario: ScenarioResult | None) -> FitResult | None:
    """The fit answer a stored ``fit`` scenario holds (None: not one, or not readable)."""
    if scenario is None or scenario.name != "fit" or not scenario.facts:
        return None
    try:
        found = FitResult.from_dict(scenario.facts)
    except (KeyError, TypeError, ValueError):
        return None
    return found if found.capacity > 0 else None  # every share is of the capacity


def edge_words(edge: FitEdge) -> str:
    """One row's edge in words: the largest batch that fits, how it is known, its margin, what
    dominates its peak and the first batch that does not."""
    where = "" if edge.seq is None else f"seq {edge.seq}: "
    if edge.batch is None:
        return f"{where}no batch of the grid fits (the smallest does not)"
    beyond = f"; batch {edge.beyond} does not" if edge.beyond is not None else "; every batch of the grid fits"
    how = "measured on the target" if edge.verified else "predicted, not verified on the target"
    margin = f", {edge.margin:.0%} of the capacity left" if edge.margin is not None else ""
    dominates = edge.dominates or "nothing"
    return f"{where}largest batch that fits {edge.batch} ({how}){margin}, {dominates} dominate its peak{beyond}"


class Fit(Scenario):
    """See the module docstring."""

    name = "fit"
    recorded_by = "bakeoff fit"

    def not_applicable(self, context: ScenarioContext) -> str | None:
        return "the memory fit map is made by bakeoff fit, not in a trial"

    def run(self, context: ScenarioContext, options: dict) -> tuple[dict, dict]:
        raise NotImplementedError("bakeoff fit predicts and probes the fit map")

    def figures(self, result: Any, scenario: ScenarioResult, estimate: Callable[..., str | None]) -> list[str]:
        fit = fit_of(scenario)
        if fit is None:
            return ["the fit map could not be read back"]
        what = f"a training step ({fit.optimizer})" if fit.training else "inference"
        lines = [f"{what} over {fit.grid}: capacity {human_bytes(fit.capacity)} ({fit.capacity_from})"]
        lines += [edge_words(edge) for edge in fit.edges]
        lines += [f"calibration: {fit.calibration}", f"verification: {fit.verification}"]
        return lines
