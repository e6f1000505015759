"""Does it run the same across devices: the scenario ``bakeoff dist`` records (a trial has none).

``bakeoff dist`` starts the ranks of a job on the target's process-group backend
(:mod:`bakeoff.distributed`) once per world size of its ladder; its answer is stored as this
scenario's result so that ``show``, the reports and ``rerun`` read it:

* ``options``: the ``mode``, ``ranks``, ``sizes``, ``dtypes`` and ``iterations``;
* ``facts``: the whole :class:`DistResult` (per world size: how it ended, every collective's
  verdict against its analytic value with its latency percentiles and bus bandwidth, each
  rank's start-up, and for a hang the collective, its sequence number and the ranks that did not
  arrive).

A verdict is judged again from the stored figures when it is read back (:func:`dist_of`): a
crafted document's "pass" beside a wrong value is not believed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from bakeoff.analysis.requirements import Requirement, RequirementCheck
from bakeoff.codec import Value
from bakeoff.scenarios.base import Scenario, ScenarioContext, ScenarioResult
from bakeoff.units import human_bytes

__all__ = ["CollectiveCell", "Dist", "DistResult", "Divergence", "Hang", "TrainingStep", "WorldRun", "busbw_factor",
           "cell_words", "dist_of", "divergence_words", "steps_words", "world_requirements", "world_words"]  # fmt: skip

#: The collectives checked, in the order each rank runs them.
OPS = ("all_reduce_sum", "all_reduce_avg", "all_reduce_max", "all_gather", "reduce_scatter", "broadcast",
       "all_to_all", "barrier")  # fmt: skip
#: How a world size ended, worst first.
WORST_FIRST = ("hang", "error", "fail", "not_comparable", "drift", "pass")


#: Significant bits of each dtype (the implicit bit included).
_SIGNIFICAND = {"float32": 24, "float16": 11, "bfloat16": 8}


def tolerance(op: str, world: int, dtype: str = "float32") -> float:
    """Units in the last place a result may be off by (see the module docstring): 0 for what only
    moves data or picks, and for a sum whose every partial sum the dtype holds exactly (the ramps'
    seven fraction bits and the integer part of up to ``2 * world``: float32 always here, float16
    up to 8 ranks); otherwise ``world / 2`` for a sum, half a unit more for an average."""
    if op not in ("all_reduce_sum", "all_reduce_avg", "reduce_scatter"):
        return 0.0
    exact = 7 + math.ceil(math.log2(2 * world)) <= _SIGNIFICAND.get(dtype, 24)
    if op == "all_reduce_avg" and world & (world - 1):
        # dividing by a world that is not a power of two rounds (before the sum, as NCCL's
        # average does, or after it): the sum is then inexact too
        return world / 2 + 0.5
    return 0.0 if exact else world / 2


def busbw_factor(op: str, world: int) -> float | None:
    """nccl-tests' bus-bandwidth factor: what each rank's link carries per byte of the message
    (all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast 1); None for a
    barrier, which carries no message."""
    if op.startswith("all_reduce"):
        return 2 * (world - 1) / world
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (world - 1) / world
    return 1.0 if op == "broadcast" else None


@dataclass(frozen=True)
class CollectiveCell(Value):
    """One collective at one dtype and message ``size`` (bytes, as nccl-tests counts it: the
    buffer of an all_reduce or broadcast, the gathered output of an all_gather, the input of a
    reduce_scatter or all_to_all) over ``iterations`` timed calls after a warm one.

    ``verdict``: **pass** (every rank's result within ``tolerance`` of its analytic value, in
    units of the dtype's spacing at the result: 0 for a collective that moves data and does no
    arithmetic), **fail** (``detail`` names the rank, the element, the value and the expected
    one), **error** (the collective raised on a rank: ``detail``). ``max_error``: the worst
    rank's largest error in the same units. Each call's latency is the time of the rank that
    entered it last (the others' time holds their wait for it); ``busbw_gbs`` from the median
    by :func:`busbw_factor`."""

    op: str
    dtype: str
    size: int
    verdict: str
    max_error: float | None = None
    tolerance: float = 0.0
    worst_rank: int | None = None
    detail: str = ""
    p50_us: float | None = None
    p99_us: float | None = None
    algbw_gbs: float | None = None
    busbw_gbs: float | None = None
    iterations: int = 0

    DERIVED = ("tail",)

    @property
    def tail(self) -> float | None:
        """p99 over p50: how long the slowest calls take against the typical one."""
        if self.p50_us is None or self.p99_us is None or self.p50_us <= 0:
            return None
        return self.p99_us / self.p50_us


@dataclass(frozen=True)
class Hang(Value):
    """A collective that did not complete: the lowest-numbered ``collective`` (its ``seq``, 1-based
    per rank) some rank was waiting in, the ranks ``waiting`` in it, those that did not arrive
    (``missing``), and where each rank was (``where``: rank -> what it last entered)."""

    collective: str
    seq: int
    waiting: tuple[int, ...]
    missing: tuple[int, ...]
    where: dict[str, str] = field(default_factory=dict)
    after_s: float = 0.0


@dataclass(frozen=True)
class TrainingStep(Value):
    """One optimiser step of a DDP job: ``loss`` (the ranks' mean), ``grad_norm`` (after the
    all-reduce) and ``update_norm`` as (golden, reference, target) values, and ``weights`` the
    relative RMS distances after the step: reference from golden, target from golden, target
    from reference (rank 0's weights; the golden is one float64 process on the global batch)."""

    step: int
    loss: tuple[float, float, float]
    grad_norm: tuple[float, float, float]
    update_norm: tuple[float, float, float]
    weights: tuple[float, float, float]
    furthest: str = ""  # the parameter furthest from the golden's against the reference's distance


@dataclass(frozen=True)
class Divergence(Value):
    """Where a DDP job first went wrong: at ``step`` (1-based), on ``rank``, in ``parameter``;
    ``against`` says what it was compared with: ``rank 0`` (the replicas, which DDP keeps
    identical, disagree) or ``the golden`` (the trajectory left its band: ``figure``, its
    ``error`` and the ``allowed`` band)."""

    step: int
    rank: int
    parameter: str
    against: str
    figure: str = ""
    error: float | None = None
    allowed: float | None = None


@dataclass(frozen=True)
class WorldRun(Value):
    """One world size of the ladder: ``verdict`` **pass**, **fail** (a collective gave a wrong
    value), **hang** (``hang`` says where; every rank was stopped) or **error** (a rank raised or
    died: ``reason``); ``backend`` the process-group backend the ranks ran, ``devices`` each
    rank's device, ``startup_s`` each rank's start (to ready, torch imported: forked from the check's warm
    process, whose own import the first world waits for, or spawned)."""

    world: int
    verdict: str
    reason: str = ""
    backend: str = ""
    devices: tuple[str, ...] = ()
    cells: tuple[CollectiveCell, ...] = ()
    startup_s: tuple[float, ...] = ()
    seconds: float = 0.0
    hang: Hang | None = None
    mode: str = "collectives"
    dtype: str = ""
    training: tuple[TrainingStep, ...] = ()
    divergence: Divergence | None = None


@dataclass(frozen=True)
class DistResult(Value):
    """``bakeoff dist``'s answer for one target (``run_id``: the run it is stored as)."""

    workload: str
    target: str
    mode: str
    worlds: tuple[WorldRun, ...] = ()
    notes: tuple[str, ...] = ()
    run_id: str = ""

    DERIVED = ("verdict",)

    @property
    def verdict(self) -> str:
        """The worst world size's verdict ("not run" when there is none)."""
        found = {w.verdict for w in self.worlds}
        return next((v for v in WORST_FIRST if v in found), "not run")


def judged(cell: CollectiveCell, world: int) -> CollectiveCell:
    """``cell`` with its verdict following from its figures: an error stays an error; a cell
    with no figure, a negative one or no timed call is an error; otherwise pass exactly when its
    largest error is within the tolerance of its collective, dtype and world size (the rule's,
    whatever a stored document says it was)."""
    if cell.verdict == "error" or cell.max_error is None:
        return cell if cell.verdict == "error" else replace(cell, verdict="error", detail=cell.detail or "no result")
    if not (math.isfinite(cell.max_error) and cell.max_error >= 0) or cell.iterations < 1:
        return replace(cell, verdict="error", detail="no valid figure (a negative or missing error, or no timed call)")
    allowed = tolerance(cell.op, world, cell.dtype)
    return replace(cell, tolerance=allowed, verdict="pass" if cell.max_error <= allowed else "fail")


def world_verdict(world: WorldRun) -> WorldRun:
    """``world`` with its verdict following from its cells (or its training steps) where it ran
    to the end."""
    if world.verdict in ("hang", "error"):
        return world
    if world.mode != "collectives":
        return _training_verdict(world)
    cells = tuple(judged(c, world.world) for c in world.cells)
    if not cells:
        return replace(world, cells=cells, verdict="error", reason=world.reason or "no collective was measured")
    bad = [c for c in cells if c.verdict != "pass"]
    reason = "; ".join(cell_words(c) for c in bad[:3]) + (f"; {len(bad) - 3} more" if len(bad) > 3 else "")
    return replace(world, cells=cells, verdict="fail" if bad else "pass", reason=reason)


def _training_verdict(world: WorldRun) -> WorldRun:
    """A DDP job's verdict: **fail** when the replicas disagree (``divergence`` against rank 0)
    or a step's figure left the band of :func:`~bakeoff.analysis.trajectory.judge_trajectory`;
    else its **pass** or **drift**; **not_comparable** when the golden diverged."""
    from bakeoff.analysis.trajectory import StepFigures, judge_trajectory

    if not world.training:
        return replace(world, verdict="error", reason=world.reason or "no training step was measured")
    if world.divergence is not None and world.divergence.against == "rank 0":
        return replace(world, verdict="fail", reason=divergence_words(world.divergence))
    steps = [StepFigures(s.loss, s.grad_norm, s.update_norm, s.weights) for s in world.training]
    judged = judge_trajectory(steps, world.dtype or "float32")
    if judged.verdict != "fail":
        reason = {"pass": "every step within the step-1 noise of the CPU's gloo job",
                  "drift": "drifted from the CPU's gloo job no faster than the dtype's own error grows",
                  "not_comparable": "the float64 golden itself diverged"}[judged.verdict]  # fmt: skip
        return replace(world, verdict=judged.verdict, reason=reason, divergence=None)
    step = judged.first_step or 1
    named = world.training[step - 1].furthest if step <= len(world.training) else ""
    found = Divergence(step, 0, named, "the golden", judged.figure or "", judged.error, judged.band)
    return replace(world, verdict="fail", reason=divergence_words(found), divergence=found)


def divergence_words(found: Divergence) -> str:
    """Where a DDP job went wrong, in words."""
    where = f" in {found.parameter}" if found.parameter else ""
    if found.against == "rank 0":
        step = found.step
        return f"rank {found.rank}'s weights differ from rank 0's after step {step}{where} (DDP keeps replicas equal)"
    said = {"loss": "the loss", "grad_norm": "the gradient norm", "update_norm": "the update norm",
            "weights": "the weights"}.get(found.figure, found.figure)  # fmt: skip
    figure = (
        f"{said} {found.error:.3g} off the golden, {found.allowed:.3g} allowed" if found.error is not None else said
    )
    return f"step {found.step} diverged ({figure}; furthest off{where or ': no parameter named'})"


def dist_of(scenario: ScenarioResult | None) -> DistResult | None:
    """The answer a stored ``dist`` scenario holds, its verdicts judged again from its figures
    (None: not one, or not readable)."""
    if scenario is None or scenario.name != "dist" or not scenario.facts:
        return None
    try:
        found = DistResult.from_dict(scenario.facts)
    except (KeyError, TypeError, ValueError):
        return None
    if any(not 2 <= w.world <= 64 or (w.devices and len(w.devices) != w.world) for w in found.worlds):
        return None  # not a world size bakeoff starts, or not one device per rank
    asked = _asked_counts(scenario.options)
    return replace(found, worlds=tuple(world_verdict(_complete(w, asked)) for w in found.worlds))


def _asked_counts(options: dict[str, Any]) -> dict[str, int] | None:
    """How many cells of each collective the stored options asked for (None: not known)."""
    sizes, dtypes = options.get("sizes"), options.get("dtypes")
    if not isinstance(sizes, list | tuple) or not isinstance(dtypes, list | tuple) or not sizes or not dtypes:
        return None
    return {op: 1 if op == "barrier" else len(sizes) * len(dtypes) for op in OPS}


def _complete(world: WorldRun, asked: dict[str, int] | None) -> WorldRun:
    """A collectives world whose cells are not the ones asked for is an error, not a pass."""
    if world.mode != "collectives" or world.verdict not in ("pass", "fail") or asked is None:
        return world
    counted: dict[str, int] = {}
    for cell in world.cells:
        counted[cell.op] = counted.get(cell.op, 0) + 1
    if counted == asked:
        return world
    return replace(world, verdict="error", reason="the stored answer does not hold every collective it asked for")


def _requirement(world: WorldRun) -> dict[str, Any]:
    """A world size as a stored requirement: every collective right (the count of wrong ones is
    its value), or, for DDP, the steps trained as the golden and the CPU's gloo job do (pass or
    drift: the value is 0, and 1 when not)."""
    if world.mode != "collectives":
        rule = Requirement(f"{world.mode.upper()} steps at {world.world} ranks", "diverged", "<=", 0.0, "", "dist")
        met = world.verdict in ("pass", "drift")
        value = None if world.verdict in ("hang", "error", "not_comparable") else float(not met)
        verdict = "not_measured" if world.verdict == "not_comparable" else "met" if met else "not_met"
        return RequirementCheck(rule, verdict, value, samples=len(world.training), confident=verdict != "not_measured",
                                reason=world_words(world)).to_dict()  # fmt: skip
    wrong = sum(1 for c in world.cells if c.verdict != "pass")
    ran = world.verdict in ("pass", "fail")
    rule = Requirement(f"collectives at {world.world} ranks", "wrong_collectives", "<=", 0.0, "", "dist")
    return RequirementCheck(rule, "met" if world.verdict == "pass" else "not_met", float(wrong) if ran else None,
                            samples=len(world.cells), confident=True, reason=world_words(world)).to_dict()  # fmt: skip


def world_requirements(found: DistResult) -> tuple[dict[str, Any], ...]:
    """Each world size as a stored requirement, in the words every report reads."""
    return tuple(_requirement(w) for w in found.worlds)


def cell_words(cell: CollectiveCell) -> str:
    """One collective's verdict in words, with the figure it rests on."""
    what = cell.op if not cell.size else f"{cell.op} {cell.dtype} {human_bytes(cell.size)}"
    if cell.verdict == "error":
        return f"{what}: error: {cell.detail}"
    if cell.verdict == "fail" and cell.op == "barrier":
        return f"{what}: did not wait for every rank ({cell.detail})"
    if cell.verdict == "fail":
        return f"{what}: wrong ({cell.detail}; {cell.max_error:.3g} ulp against {cell.tolerance:g} allowed)"
    return f"{what}: {'exact' if not cell.max_error else f'within {cell.max_error:.3g} ulp'}"


def steps_words(count: Any, kind: str) -> str:
    """``3 DDP steps``, ``1 DDP step``."""
    return f"{count} {kind} step{'' if count == 1 else 's'}"


def world_words(world: WorldRun) -> str:
    """One world size in a line: how it ended and why."""
    head = f"{world.world} ranks ({world.backend or 'no backend'}): {world.verdict}"
    if world.verdict == "hang" and world.hang is not None:
        h = world.hang
        waiting = ", ".join(map(str, h.waiting)) or "none"
        missing = ", ".join(f"{r} ({h.where.get(str(r), 'no record')})" for r in h.missing) or "none"
        return (f"{head}: {h.collective} #{h.seq} did not complete within {h.after_s:g} s; waiting in it: "
                f"rank {waiting}; did not arrive: rank {missing}; every rank was stopped")  # fmt: skip
    if world.mode != "collectives":
        return f"{head}: {steps_words(len(world.training), world.mode.upper())}: {world.reason}"
    if world.verdict == "pass":
        exact = sum(1 for c in world.cells if not c.max_error)
        rounded = len(world.cells) - exact
        how = f"{exact} exact, {rounded} within the dtype's rounding" if rounded else "every one exact"
        return f"{head}: {len(world.cells)} collectives right ({how})"
    return f"{head}: {world.reason}"


class Dist(Scenario):
    """See the module docstring."""

    name = "dist"
    recorded_by = "bakeoff dist"
    state_rank: ClassVar[Mapping[str, int]] = {"pass": 2, "drift": 1, "fail": 0, "hang": 0, "error": 0}

    def not_applicable(self, context: ScenarioContext) -> str | None:
        return "distributed parity is checked by bakeoff dist, not in a trial"

    def run(self, context: ScenarioContext, options: dict) -> tuple[dict, dict]:
        raise NotImplementedError("bakeoff dist starts the ranks")

    def states(self, scenario: ScenarioResult) -> dict[str, str]:
        """Each world size's verdict, and each collective's within it: a regression names the
        collective that went wrong. Bandwidth and latency are not compared between runs (on a
        shared machine's loopback they moved 0.3-2.8x between runs minutes apart)."""
        found = dist_of(scenario)
        if found is None:
            return {}
        states = {}
        for world in found.worlds:
            head = f"{world.mode} at {world.world} ranks"
            states[head] = world.verdict
            for cell in world.cells:
                what = cell.op if not cell.size else f"{cell.op} {cell.dtype} {human_bytes(cell.size)}"
                states[f"{head}: {what}"] = cell.verdict
        return states

    def figures(self, result: Any, scenario: ScenarioResult, estimate: Callable[..., str | None]) -> list[str]:
        found = dist_of(scenario)
        if found is None:
            return ["the distributed answer could not be read back"]
        return [world_words(w) for w in found.worlds]
