"""Does the target give the same outputs twice? The determinism check.

After timing, the target runs each input ``repeats`` more times (option, default 2:
``--check determinism?repeats=5``), and each output are compared bit for bit
with the output a timed call produced. Verdicts:
    deterministic     every output tensor of every input was bit-identical in every call
    nondeterministic  some output differed between calls (``differing`` names them, with the
                      largest absolute difference seen)

A nondeterministic target is not wrong (atomics in reductions, autotuning, dropout left on),
but its correctness verdict is then one draw of several, and a bit-exact regression test of
its outputs cannot pass. What the check cannot see: differences between processes or
machines (each trial's calls share one process, one compiled graph and one autotuning choice),
differences that need other inputs, differences rarer than the calls made (more repeats
see more), and randomness whose seed is reset before every call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from bakeoff.checks.base import Check, CheckContext, Metric
from bakeoff.checks.outputs import max_abs_difference, same_tensor
from bakeoff.codec import Value
from bakeoff.specsyntax import Option

__all__ = ["RANK", "Determinism", "DeterminismCheck"]

#: Determinism verdicts for regressions, better higher.
RANK = {"deterministic": 1, "nondeterministic": 0}


@dataclass(frozen=True)
class Determinism(Value):
    """``calls`` compared per input (the timed call's output and ``calls - 1`` more);
    ``differing`` the outputs that were not bit-identical (``input:output`` for a profile
    shape), ``max_abs_diff`` the largest absolute difference among them (0.0 when none)."""

    verdict: str
    calls: int
    inputs: int
    differing: tuple[str, ...] = ()
    max_abs_diff: float = 0.0


def compare_repeats(runs: dict[str, list[dict[str, Any]]]) -> Determinism:
    """The verdict over ``runs``: per input tag, the flattened outputs of each call in order."""
    differing, worst = [], 0.0
    for tag, calls in runs.items():
        first = calls[0]
        for name, tensor in first.items():
            others = [call.get(name) for call in calls[1:]]
            if all(other is not None and same_tensor(tensor, other) for other in others):
                continue
            label = f"{tag.removeprefix('@')}:{name}" if tag else name
            differing.append(label)
            for other in others:
                if other is not None and other.shape == tensor.shape:
                    worst = max(worst, max_abs_difference(tensor, other))
                else:
                    worst = float("inf")
        differing += [f"{tag.removeprefix('@')}:{n}" if tag else n for c in calls[1:] for n in c if n not in first]
    calls = min((len(c) for c in runs.values()), default=0)
    verdict = "nondeterministic" if differing else "deterministic"
    return Determinism(verdict, calls, len(runs), tuple(dict.fromkeys(differing)), worst)


class DeterminismCheck(Check):
    """The target's outputs over repeated calls on the same input (see the module docstring)."""

    name = "determinism"
    title = "determinism"
    value_type = Determinism
    phase = "determinism check"
    options: ClassVar[Mapping[str, Option]] = {
        "repeats": Option(int, 2, minimum=1, help="calls per input after the timed one")
    }

    def run(self, context: CheckContext) -> Determinism:
        repeats = context.options["repeats"]
        runs = {tag: [flat, *(context.call(tag) for _ in range(repeats))] for tag, flat in context.outputs.items()}
        return compare_repeats(runs)

    def metrics(self, value: Determinism | None) -> list[Metric]:
        return [] if value is None else [Metric("determinism", value.verdict, "verdict", RANK)]

    def headline(self, value: Determinism, result: Any) -> list[str]:
        return self.facts(value, result)

    def facts(self, value: Determinism, result: Any) -> list[str]:
        if value.verdict == "deterministic":
            return []
        more = len(value.differing) - 3
        shown = ", ".join(value.differing[:3]) + (f" and {more} more" if more > 0 else "")
        return [
            f"nondeterministic: {shown} differed between {value.calls} calls on the same input "
            f"(max abs {value.max_abs_diff:.3g})"
        ]
