"""``bakeoff fit`` from grid to answer: predict every point on the host, calibrate with at most
two real probes on the target, find the edge per sequence length, measure every edge on the
target, and say what would move the longest sequence's edge.

Calibration: the smallest point, and the largest one predicted at most half the capacity, are
measured on the target (each in a fresh process); the expected peak of every point is then the
straight line through the two (measured = offset + slope x predicted), or the one offset with a
single probe. Every row's edge is then measured on the target (a point a calibration probe
measured counts): one that does not fit (the device refused, the step failed there, or its peak
exceeds the capacity) moves down and the new edge is measured, up to three times per row; an edge
shown is one a probe confirmed, or is marked unverified. The CPU reports no allocator peak:
there the answer is the prediction alone, and says so.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from bakeoff.errors import SpecError, WorkloadError
from bakeoff.scenarios.fit import FitEdge, FitPoint, FitResult, judge_point
from bakeoff.settings.fit import fits_text, parse_fits
from bakeoff.settings.grid import parse_grid
from bakeoff.units import clip, human_bytes

__all__ = ["Predict", "fit_workload"]

#: Verification probes at most (the first edge, and those below it while one does not fit).
VERIFICATIONS = 3


@dataclass(frozen=True)
class Predict:
    """A job for a fresh process: :func:`bakeoff.fit.predict.predict_points`, as plain dicts."""

    workload_spec: str
    points: tuple[tuple[int, int | None], ...]
    device: str
    dtype: str | None
    training: bool
    optimizer: str
    checkpointing: bool = False
    amp: str | None = None
    phase: str = "memory prediction"

    def run(self) -> list[dict[str, Any]]:
        from bakeoff.fit.predict import predict_points
        from bakeoff.target.plugins import load_plugins

        load_plugins()
        found = predict_points(
            self.workload_spec,
            self.points,
            dtype=self.dtype,
            device=self.device,
            training=self.training,
            optimizer=self.optimizer,
            checkpointing=self.checkpointing,
            amp=self.amp,
        )
        return [asdict(p) for p in found]


@dataclass(frozen=True)
class PredictEach:
    """Several :class:`Predict` jobs in one fresh process (the what-ifs of one edge): each
    answers its points, or ``{"error": ...}`` when it cannot be predicted."""

    jobs: tuple[Predict, ...]
    phase: str = "memory prediction"

    def run(self) -> list[Any]:
        answers: list[Any] = []
        for job in self.jobs:
            try:
                answers.append(job.run())
            except Exception as exc:  # one what-if the workload cannot take (no checkpointing) leaves the others
                answers.append({"error": f"{type(exc).__name__}: {exc}"})
        return answers


def _forked_from(workload_spec: str) -> Any:
    """This process's warm server for a fit of ``workload_spec`` (each prediction and probe is a
    fresh process forked from it: :mod:`bakeoff.launch.warm`), or None where processes are spawned."""
    from bakeoff.launch.warm import shared_server
    from bakeoff.workload.base import parse_workload, preload_for

    return shared_server((*preload_for(parse_workload(workload_spec)), *_FIT_MODULES))


#: What a fit's fork server imports beside the workload's libraries.
_FIT_MODULES = ("bakeoff.fit.predict", "bakeoff.fit.probe")


def _predict(job: Predict | PredictEach, timeout_s: float) -> list[Any]:
    from bakeoff.launch.launchers import FreshProcess

    spec = job.workload_spec if isinstance(job, Predict) else job.jobs[0].workload_spec
    outcome = FreshProcess(preload=("torch",), who="the prediction process", server=_forked_from(spec)).run(
        job, timeout_s
    )
    if not outcome.ok:
        raise WorkloadError(
            f"predicting the peaks of {spec} failed: {clip(outcome.reason(), 400)}",
            hint="the workload must build and run under fake tensors, and vary its batch (and seq)",
        )
    return outcome.value


def _probe(workload_spec: str, target: Any, point: tuple[int, int | None], training: bool, optimizer: str,
           timeout_s: float) -> dict[str, Any]:  # fmt: skip
    from bakeoff.fit.probe import Probe
    from bakeoff.launch.launchers import FreshProcess

    job = Probe(workload_spec, target, point[0], point[1], training, optimizer)
    outcome = FreshProcess(preload=("torch",), who="the memory probe", server=_forked_from(workload_spec)).run(
        job, timeout_s
    )
    if outcome.ok:
        return outcome.value
    if outcome.error is not None and outcome.error.category == "out_of_memory":
        return {"out_of_memory": outcome.reason()}
    if outcome.error is not None and outcome.error.category in ("timeout", "hang"):
        return {"timeout": clip(outcome.reason(), 300)}
    return {"error": clip(outcome.reason(), 300)}


def _where(point: tuple[int, int | None]) -> str:
    """A point as the answer names it: ``batch 8 x seq 64`` (``batch 8`` without a length)."""
    return f"batch {point[0]}" + (f" x seq {point[1]}" if point[1] else "")


def _edges(points: Sequence[FitPoint], capacity: int) -> list[FitEdge]:
    edges = []
    points = [p for p in points if p.grid]  # a required point off the grid is in no row
    for seq in dict.fromkeys(p.seq for p in points):
        row = sorted((p for p in points if p.seq == seq), key=lambda p: p.batch)
        fitting = []
        for point in row:
            if not point.fits:
                break
            fitting.append(point)
        beyond = row[len(fitting)].batch if len(fitting) < len(row) else None
        if not fitting:
            edges.append(FitEdge(seq, None, beyond=beyond))
            continue
        edge = fitting[-1]
        parts = edge.parts or {}
        dominates = max(parts, key=parts.get) if parts else ""
        edges.append(FitEdge(seq, edge.batch, (capacity - edge.peak) / capacity, dominates, beyond))
    return edges


def fit_workload(
    workload_spec: str,
    target: Any,
    settings: dict[str, Any],
    progress: Callable[[str], None] | None = None,
) -> FitResult:
    """The fit map of ``workload_spec`` on ``target`` (see the module docstring).

    Raises:
        SpecError: no capacity known (a device that does not report one, and no ``memory``).
        WorkloadError: the prediction failed (the workload does not build or run under fake
            tensors, or cannot vary its input shape).
    """
    from bakeoff.env import host_memory

    say = progress or (lambda message: None)
    grid = parse_grid(settings["grid"])
    required = [parse_fits(text) for text in settings.get("requirements", ())]
    training, optimizer, timeout = settings["training"], settings["optimizer"], settings["timeout_s"]
    dtype = target.dtype
    wanted = list(dict.fromkeys([*grid.points, *required]))
    say(f"predicting {len(wanted)} point(s) on the host")
    started = time.monotonic()
    job = Predict(workload_spec, tuple(wanted), target.torch_device, dtype, training, optimizer, amp=target.amp)
    predicted = _predict(job, timeout)
    predict_s = time.monotonic() - started
    planned = settings["probes"] and target.device != "cpu"  # the CPU reports no allocator peak
    probing = planned
    capacity, capacity_from = settings["memory"], "--memory"
    if capacity is None and target.device in ("cpu", "emu"):
        total = host_memory()
        capacity, capacity_from = (total[1], "the host's memory (MemTotal)") if total else (None, "")
    measured: dict[tuple[int, int | None], dict[str, Any]] = {}
    notes: list[str] = []

    def probe(point: tuple[int, int | None], why: str) -> dict[str, Any]:
        say(f"probing {_where(point)} on {target.spec} ({why})")
        got = _probe(workload_spec, target, point, training, optimizer, timeout)
        measured[point] = {**got, "why": why}
        return got

    on_grid = set(grid.points)
    ordered = sorted((p for p in predicted if (p["batch"], p["seq"]) in on_grid), key=lambda p: p["peak"])
    offset, slope = 0.0, 1.0
    calibration = "none: predicted only (--predict-only)" if not settings["probes"] else (
        "none: the CPU reports no allocator peak; predicted only")  # fmt: skip
    if probing:
        first = (ordered[0]["batch"], ordered[0]["seq"])
        got = probe(first, "calibration")
        if "error" in got or "timeout" in got or (got.get("peak") is None and "out_of_memory" not in got):
            calibration = f"none: the probe failed ({got.get('error') or got.get('timeout') or 'no peak reported'})"
            probing = False
        if capacity is None:
            capacity, capacity_from = got.get("capacity"), f"{target.device}'s reported total memory"
        if probing and "peak" in got and capacity:
            p1, m1 = ordered[0]["peak"], got["peak"]
            second = [p for p in ordered[1:] if p["peak"] <= capacity / 2]
            offset = m1 - p1
            calibration = f"one probe: measured {human_bytes(m1)} where {human_bytes(p1)} was predicted (offset added)"
            if second:
                point = (second[-1]["batch"], second[-1]["seq"])
                got2 = probe(point, "calibration")
                p2, m2 = second[-1]["peak"], got2.get("peak")
                trusted = m2 is not None and p2 != p1 and m2 <= capacity and 0.5 <= (m2 - m1) / (p2 - p1) <= 2
                if m2 is None:
                    failed = got2.get("error") or got2.get("timeout") or "the device ran out of memory"
                    notes.append(f"the second calibration probe ({_where(point)}) did not measure a peak "
                                 f"({clip(failed, 160)}): the points are expected from the first probe "
                                 "alone")  # fmt: skip
                if m2 is not None and p2 != p1 and not trusted:  # something the prediction cannot see grew
                    notes.append(
                        f"the second calibration probe ({_where(point)}) measured {human_bytes(m2)} where "
                        f"{human_bytes(p2)} was predicted: not used to calibrate (memory the prediction cannot see, "
                        "or over the capacity); the points are expected from the first probe alone"
                    )
                if trusted:
                    slope = (m2 - m1) / (p2 - p1)
                    offset = m1 - slope * p1
                    shown = ("- " if offset < 0 else "+ ") + human_bytes(int(abs(offset)))
                    calibration = (
                        f"two probes: measured = {slope:.4f} x predicted {shown} "
                        f"({human_bytes(m1)} for {human_bytes(p1)}, {human_bytes(m2)} for {human_bytes(p2)})"
                    )
    if not capacity:
        raise SpecError(f"{target.device} reports no capacity", hint="give the device's memory, e.g. --memory 16GiB")

    def points_now() -> list[FitPoint]:
        found = []
        for p in predicted:
            key = (p["batch"], p["seq"])
            expected = max(0, int(offset + slope * p["peak"]))
            seen = measured.get(key, {})
            real, oom, error = seen.get("peak"), "out_of_memory" in seen, seen.get("error", "")
            fits = not oom and not error and (real if real is not None else expected) <= capacity
            why = seen.get("why", "")
            found.append(FitPoint(p["batch"], p["seq"], p["peak"], expected, fits, p["parts"], real, why, oom, error,
                                  "timeout" in seen, key in on_grid))  # fmt: skip
        return found

    if probing:  # a required point is measured before the edges are drawn: a prediction alone is no verdict
        for point in required:
            if point not in measured:
                probe(point, "requirement")
    verified: dict[int | None, str] = {}
    if probing:  # every row's edge is measured; one that does not fit moves down and is measured again
        for seq in dict.fromkeys(seq for _, seq in grid.points):
            for _ in range(VERIFICATIONS):
                edge = next(e for e in _edges(points_now(), capacity) if e.seq == seq)
                if edge.batch is None:
                    break
                key = (edge.batch, seq)
                if key not in measured:
                    probe(key, "verification")
                point = next(p for p in points_now() if (p.batch, p.seq) == key)
                if point.timed_out:
                    notes.append(
                        f"the probe of {_where(key)} did not end within {timeout:g} s: that edge is not verified"
                    )
                    break
                if point.fits:
                    verified[seq] = f"{_where(key)} {human_bytes(point.measured)}"
                    break
                what = point.error or (
                    "out of memory" if point.out_of_memory else f"measured {human_bytes(point.measured)}"
                )
                notes.append(f"{_where(key)} did not fit on {target.spec} ({clip(what, 160)}): the edge moved down")
    points = points_now()
    edges = [replace(e, verified=e.seq in verified) for e in _edges(points, capacity)]
    if not probing:
        verification = "not verified: " + ("the first probe failed, so no edge was measured" if planned else
                                           "predicted only")  # fmt: skip
    else:
        unverified = [e for e in edges if e.batch is not None and not e.verified]
        verification = f"measured on {target.spec} at each edge: " + ("; ".join(verified.values()) or "none")
        if unverified:
            rows = ", ".join(f"seq {e.seq}" if e.seq else "its row" for e in unverified)
            verification += f"; not verified ({VERIFICATIONS} tries spent): {rows}"
    edges = _moves(edges, points, notes, workload_spec, target, settings, offset, slope, capacity, timeout, say)
    at = {(p.batch, p.seq): p for p in points}
    judged = [judge_point(fits_text(point), at[point], int(capacity)) for point in dict.fromkeys(required)]
    return FitResult(
        workload_spec, target.spec, training, optimizer, grid.text, int(capacity), capacity_from, calibration,
        verification, tuple(points), tuple(edges), predict_s, tuple(notes), tuple(judged),
    )  # fmt: skip


def _moves(
    edges: list[FitEdge],
    points: list[FitPoint],
    notes: list[str],
    workload_spec: str,
    target: Any,
    settings: dict[str, Any],
    offset: float,
    slope: float,
    capacity: int,
    timeout: float,
    say: Callable[[str], None],
) -> list[FitEdge]:
    """What would let the first batch beyond the longest sequence's edge fit: a lower dtype, and
    for training activation checkpointing and an optimiser without state, each predicted there
    (nothing when that batch failed for another reason than memory; a note in ``notes`` when the
    target measured it far above its prediction)."""
    beyond = [e for e in edges if e.beyond is not None]
    if not beyond:
        return edges
    edge = max(beyond, key=lambda e: e.seq or 0)  # the longest sequence's edge
    point = (edge.beyond, edge.seq)
    there = next(p for p in points if (p.batch, p.seq) == point)
    if there.error and not there.out_of_memory:  # it failed for another reason than memory: nothing to move
        return edges
    variants: list[tuple[str, dict[str, Any]]] = []
    if target.dtype not in ("bfloat16", "float16") and not target.amp:
        variants.append(("bfloat16 weights and activations", {"dtype": "bfloat16"}))
    if settings["training"]:
        variants.append(("activation checkpointing", {"checkpointing": True}))
        if settings["optimizer"] != "sgd":
            variants.append(("an optimiser without state (SGD)", {"optimizer": "sgd"}))
    if not variants:
        return edges
    say(f"predicting batch {point[0]} with " + ", ".join(what for what, _ in variants))
    job = Predict(workload_spec, (point,), target.torch_device, target.dtype, settings["training"],
                  settings["optimizer"], amp=target.amp)  # fmt: skip
    try:
        answers = _predict(PredictEach(tuple(replace(job, **change) for _, change in variants)), timeout)
    except WorkloadError as exc:
        answers = [{"error": exc.message}] * len(variants)
    # memory the target showed at that batch and the prediction did not (a workspace, a hidden
    # buffer) is added to every what-if as it is: none of them is known to move it
    unseen = 0
    if there.measured is not None and there.measured > 1.5 * max(there.expected, 1):
        unseen = there.measured - there.expected
        notes.append(
            f"batch {point[0]} measured {human_bytes(there.measured)} on the target where "
            f"{human_bytes(there.expected)} was expected: each what-if adds the {human_bytes(unseen)} the prediction "
            "cannot see"
        )
    moves = []
    for (what, _), answer in zip(variants, answers, strict=True):
        if isinstance(answer, dict):
            moves.append(f"{what}: not predicted ({clip(answer['error'], 120)})")
            continue
        expected = int(offset + slope * answer[0]["peak"]) + unseen
        verdict = "would fit" if expected <= capacity else "still would not fit"
        moves.append(f"{what}: {human_bytes(expected)} expected at batch {point[0]} ({verdict}; predicted, not probed)")
    return [replace(e, moves=tuple(moves)) if e is edge else e for e in edges]
