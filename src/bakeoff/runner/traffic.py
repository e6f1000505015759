"""What a target is timed on: the workload's own input, or the requests of an input profile.

A session asks its traffic for everything that differs between the two, so it never asks which
one it has: the first call and warm-up, a round of timed calls, the calls the server scenario
replays, the outputs the checks judge (by input tag: ``""`` for the workload's own input,
``@BxS`` per profile shape, padding removed), a way to call an input again, and the profile's
summary. :func:`traffic_for` picks one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from bakeoff.analysis.buckets import bucket_for, padding_waste
from bakeoff.checks.baseline import shape_tag
from bakeoff.checks.outputs import flatten_outputs
from bakeoff.measure.clock import Clock
from bakeoff.measure.timing import ROUNDS, ProfileRun, TimingSettings, first_call, time_block, time_pass, warm_up
from bakeoff.stats import percentile
from bakeoff.target.execute import place_inputs
from bakeoff.workload.padding import pad_inputs, unpad_outputs

__all__ = ["OneInput", "ProfileTraffic", "traffic_for"]


class OneInput:
    """The workload's own input, called again and again."""

    still_compiling = "still compiling after warm-up"

    def __init__(self, job: Any, prepared: Any) -> None:
        self.job, self.prepared = job, prepared
        self.output: Any = None
        self.unsteady: tuple[str, ...] = ()

    def start(self, sync: Callable[[], None], clock: Clock) -> tuple[float, int | None, bool]:
        """The first call and warm-up: ``(first call seconds, warm-up calls, settled)``."""
        seconds, self.output = first_call(self.prepared, sync, clock)
        warmups, settled = warm_up(self.prepared, self.job.timing, self.prepared.compile_events)
        return seconds, warmups, settled

    @property
    def first(self) -> Callable[[], Any]:
        return self.prepared

    @property
    def requests(self) -> list[Callable[[], Any]]:
        return [self.prepared]

    def round(self, sync: Callable[[], None], clock: Clock, settings: TimingSettings, timed_s: float) -> list[float]:
        cap = max(settings.max_seconds - timed_s, 0.0)
        count = math.ceil(settings.min_samples / ROUNDS)
        return time_block(self.prepared, sync, clock, count, settings.min_seconds / ROUNDS, cap)

    def outputs(self) -> dict[str, dict[str, Any]]:
        return {"": flatten_outputs(self.output)}

    def call(self, tag: str) -> dict[str, Any]:
        return flatten_outputs(self.prepared())

    def series(self) -> dict[str, tuple[float, ...]]:
        """Samples per profile shape in seconds: none for a single input."""
        return {}

    def summary(self, rounds: int) -> tuple[dict | None, tuple | None]:
        return None, None


class ProfileTraffic:
    """The requests of an input profile, one timed pass over them per round, each padded to its
    bucket when the job pads."""

    still_compiling = "still compiling: some profile shapes recompiled after warm-up"

    def __init__(
        self,
        job: Any,
        prepared: Any,
        calls: dict[tuple[int, int], Callable[[], Any]],
        padded_to: dict[tuple[int, int], int],
    ) -> None:
        self.job, self.prepared, self.calls, self.padded_to = job, prepared, calls, padded_to
        self.order = [(r.batch, r.seq) for r in job.profile.requests]
        self.per_shape: dict[tuple[int, int], list[float]] = {s: [] for s in dict.fromkeys(self.order)}
        self.raw: dict[tuple[int, int], Any] = {}
        self.first_pass: list[tuple[tuple[int, int], float, bool]] = []
        self.unsteady_keys: tuple[tuple[int, int], ...] = ()

    @classmethod
    def build(cls, job: Any, workload: Any, prepared: Any) -> ProfileTraffic:
        """Per request shape, a call of the prepared model on its inputs, padded to its bucket."""

        calls, padded_to = {}, {}
        for request in job.profile.shapes:
            key = (request.batch, request.seq)
            args, kwargs = workload.inputs_for(request.batch, request.seq)
            to = bucket_for(request.seq, job.buckets) if job.buckets else request.seq
            args, kwargs = place_inputs(workload, job.target, *pad_inputs(args, kwargs, request.seq, to))
            padded_to[key] = to
            calls[key] = lambda a=args, k=kwargs: prepared.model(*a, **k)
        return cls(job, prepared, calls, padded_to)

    @property
    def unsteady(self) -> tuple[str, ...]:
        return tuple(f"{b}x{s}" for b, s in self.unsteady_keys)

    def start(self, sync: Callable[[], None], clock: Clock) -> tuple[float, int | None, bool]:
        """A first timed pass over the profile (compiling each new shape), then a check that
        every shape runs without compiling again."""
        events = self.prepared.compile_events
        self.first_pass = [
            (shape, seconds, compiled)
            for shape, seconds, _, compiled in time_pass(self.calls, self.order, sync, clock, events)
        ]
        if self.job.target.is_compiled:
            self.unsteady_keys = tuple(s for s in dict.fromkeys(self.order) if not self._steady(s))
        return self.first_pass[0][1], None, not self.unsteady_keys

    def _steady(self, shape: tuple[int, int]) -> bool:
        """Whether a shape runs without compiling again (dynamo's fail_on_recompile stance)."""
        import torch

        events = self.prepared.compile_events
        before = events() if events else 0
        try:
            if self.prepared.uses_dynamo:
                with torch.compiler.set_stance("fail_on_recompile"):
                    self.calls[shape]()
            else:
                self.calls[shape]()
        except Exception:
            return False
        return not events or events() == before

    @property
    def first(self) -> Callable[[], Any]:
        return self.calls[self.order[0]]

    @property
    def requests(self) -> list[Callable[[], Any]]:
        return [self.calls[s] for s in self.order]

    def round(self, sync: Callable[[], None], clock: Clock, settings: TimingSettings, timed_s: float) -> list[float]:
        block = []
        for shape, seconds, out, _compiled in time_pass(self.calls, self.order, sync, clock):
            self.raw.setdefault(shape, out)
            self.per_shape[shape].append(seconds)
            block.append(seconds)
        return block

    def _flat(self, key: tuple[int, int], output: Any) -> dict[str, Any]:

        return unpad_outputs(flatten_outputs(output), key[1], self.padded_to[key])

    def outputs(self) -> dict[str, dict[str, Any]]:
        return {shape_tag(*key): self._flat(key, out) for key, out in self.raw.items()}

    def call(self, tag: str) -> dict[str, Any]:
        key = next(k for k in self.raw if shape_tag(*k) == tag)
        return self._flat(key, self.calls[key]())

    def series(self) -> dict[str, tuple[float, ...]]:
        return {f"{b}x{s}": tuple(v) for (b, s), v in self.per_shape.items()}

    def summary(self, rounds: int) -> tuple[dict | None, tuple | None]:
        """The profile's run-level summary and its per-shape figures."""

        job = self.job
        run = ProfileRun(
            tuple(self.first_pass),
            {k: tuple(v) for k, v in self.per_shape.items()},
            self.raw,
            self.unsteady_keys,
            rounds,
        )
        per_shape = []
        for key, samples in run.steady.items():
            first = next(seconds for shape, seconds, _ in run.first_pass if shape == key)
            per_shape.append(
                {
                    "shape": f"{key[0]}x{key[1]}",
                    "requests": sum(1 for s, _, _ in run.first_pass if s == key),
                    "padded_to": self.padded_to[key],
                    "first_call_ms": first * 1e3,
                    "steady_p50_ms": percentile(samples, 50) * 1e3 if samples else None,
                }
            )
        lengths = [r.seq for r in job.profile.requests]
        batches = [r.batch for r in job.profile.requests]
        summary = {
            "source": job.profile.source,
            "requests": len(job.profile.requests),
            "shapes": len(job.profile.shapes),
            "first_pass_ms": sum(s for _, s, _ in run.first_pass) * 1e3,
            "first_pass_compiles": sum(1 for _, _, compiled in run.first_pass if compiled),
            "steady_passes": run.passes,
            "buckets": list(job.buckets) if job.buckets else None,
            "padding_waste": padding_waste(lengths, job.buckets, batches) if job.buckets else 0.0,
        }
        return summary, tuple(per_shape)


def traffic_for(job: Any, workload: Any, prepared: Any) -> OneInput | ProfileTraffic:
    """The traffic a job is timed on."""
    return OneInput(job, prepared) if job.profile is None else ProfileTraffic.build(job, workload, prepared)
