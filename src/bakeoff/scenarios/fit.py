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

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from bakeoff.codec import Value
from bakeoff.scenarios.base import Scenario, ScenarioContext, ScenarioResult
from bakeoff.units import human_bytes

__all__ = ["Fit", "FitEdge", "FitPoint", "FitRequirement", "FitResult", "edge_words", "fit_of", "judge_point",
           "map_rows", "requirement_words"]  # fmt: skip


@dataclass(frozen=True)
class FitPoint(Value):
    """One point: ``predicted`` on the host (bytes; ``parts`` at its peak), ``expected`` after
    calibration, whether it ``fits`` the capacity; ``measured`` on the target where a probe ran
    (``probe`` says why: calibration, requirement or verification; ``out_of_memory`` when the
    device refused; ``error`` when the step failed there: it does not fit either; ``timed_out``
    when the probe did not end in time: its fit is the prediction's, unverified). ``grid``: the
    point is one of the grid's (False: a required point off the grid, in no row's edge)."""

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
    timed_out: bool = False
    grid: bool = True

    @property
    def peak(self) -> int:
        """The point's peak as the answer shows it: measured on the target, else expected."""
        return self.measured if self.measured is not None else self.expected

    def word(self) -> str:
        """The point in a cell of the map: how it ended on the target, else its peak."""
        if self.out_of_memory:
            return "out of memory"
        if self.error:
            return "failed"
        return human_bytes(self.peak) + (" (timed out)" if self.timed_out else "")


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
    """``fits batch=B&seq=S``: ``verdict`` **met** (the target ran it within the capacity), **not
    met** (the device refused it, the step failed there, or its peak was measured over the
    capacity) or **not measured** (never run to the end on the target: the CPU,
    ``--predict-only``, a probe that timed out; a prediction alone, either side of the capacity,
    is no verdict). ``how`` the verdict is known:
    measured, predicted, out of memory, failed or timed out (``why``: the failure); ``peak`` the
    measured peak, else the expected one; ``measured`` whether a peak was measured."""

    text: str
    verdict: str
    peak: int
    measured: bool
    how: str = "measured"
    why: str = ""


def map_rows(found: FitResult) -> tuple[list[int], list[tuple[int | None, list[FitPoint | None]]]]:
    """The map every view draws: its batches (the columns), then per sequence length its grid
    points in that order (None where the grid has none). A required point off the grid is in no
    row."""
    on_grid = [p for p in found.points if p.grid]
    batches = sorted({p.batch for p in on_grid})
    at = {(p.batch, p.seq): p for p in on_grid}
    return batches, [(seq, [at.get((b, seq)) for b in batches]) for seq in dict.fromkeys(p.seq for p in on_grid)]


def judge_point(text: str, point: FitPoint, capacity: int) -> FitRequirement:
    """The verdict on a required point, from the point alone (see :class:`FitRequirement`)."""
    peak = point.peak
    if point.out_of_memory:
        return FitRequirement(text, "not met", peak, False, "out of memory", point.error)
    if point.error:
        return FitRequirement(text, "not met", peak, False, "failed", point.error)
    if point.measured is not None:
        return FitRequirement(text, "met" if point.measured <= capacity else "not met", peak, True)
    return FitRequirement(text, "not measured", peak, False, "timed out" if point.timed_out else "predicted")


def requirement_words(req: FitRequirement, capacity: int) -> str:
    """Why a required point's verdict is what it is, with its figure said as what it is."""
    shown, of = human_bytes(req.peak), f"of {human_bytes(capacity)}"
    if shown == human_bytes(capacity) and req.peak != capacity:  # rounded alike, on two sides of the limit
        shown, of = f"{req.peak:,} B", f"of {capacity:,} B"
    if req.how == "out of memory":
        return f"the device ran out of memory running it{': ' + req.why[:160] if req.why else ''}"
    if req.how == "failed":
        return f"the step failed on the target: {req.why[:200]}"
    if req.how == "timed out":
        return f"its probe did not end in time ({shown} predicted, {of}): not run to the end"
    if req.how == "predicted":
        return f"{shown} predicted, {of}: never run on the target"
    return f"{shown} measured on the target, {of}"


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
    return _checked(found)


_FITS = re.compile(r"fits batch=([1-9][0-9]*)(?:&seq=([1-9][0-9]*))?")


def _checked(found: FitResult) -> FitResult | None:
    """``found`` with every required point's verdict judged again from its point (what a stored
    document says of it is not taken on trust), or None when it cannot be a fit map: no
    capacity, a point that is not a size, a margin that is not a share, a requirement whose
    point is missing."""
    if found.capacity <= 0 or not found.points:
        return None
    for point in found.points:
        sizes = (point.predicted, point.expected, point.peak)
        if point.batch < 1 or (point.seq is not None and point.seq < 1) or min(sizes) < 0:
            return None
    if any(e.margin is not None and not (math.isfinite(e.margin) and e.margin <= 1) for e in found.edges):
        return None
    at = {(p.batch, p.seq): p for p in found.points}
    judged = []
    for req in found.requirements:
        matched = _FITS.fullmatch(req.text)
        point = None if matched is None else at.get((int(matched[1]), int(matched[2]) if matched[2] else None))
        if point is None:
            return None
        judged.append(judge_point(req.text, point, found.capacity))
    return replace(found, requirements=tuple(judged))


def edge_words(edge: FitEdge) -> str:
    """One row's edge in words: the largest batch that fits, how it is known, its margin, what
    dominates its peak and the first batch that does not."""
    where = "" if edge.seq is None else f"seq {edge.seq}: "
    if edge.batch is None:
        return f"{where}no batch of the grid fits (the smallest does not)"
    beyond = f"; batch {edge.beyond} does not" if edge.beyond is not None else "; every batch of the grid fits"
    how = "measured on the target" if edge.verified else "predicted, not verified on the target"
    margin = f", {edge.margin:.0%} of the capacity left" if edge.margin is not None else ""
    dominated = f", its peak dominated by {edge.dominates}" if edge.dominates else ""
    return f"{where}largest batch that fits {edge.batch} ({how}){margin}{dominated}{beyond}"


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
