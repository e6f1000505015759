"""Which target to pick for a workload, and why: the decision a trial ends with.

Each measured target gets a :class:`Standing`: what rules it out (``misses``: conclusive) and
what leaves it undecided (``doubts``), with its speed against the reference and, with prices,
its cost (read from its result in :mod:`bakeoff.verdicts.standing`, whose names are re-exported
here). :func:`decide` applies :data:`RULE` to the standings; it is pure, so every outcome is
tested on cases with known answers.

A cost states its basis (:attr:`~bakeoff.analysis.cost.Cost.basis_text`): one stream's rate,
single-stream or the server scenario's, times the streams the price's instance holds, assumed to
scale. A target with no cost where prices were given says why (:attr:`Standing.cost_note`).

The bundled test device's (``emu``) speed is never ranked: it emulates an accelerator on the
host, so its timings say nothing about a real one. Priced, it gets a *rehearsal* cost, computed
the same way from its measured rate, so that a team can rehearse the accelerator's cost path;
it is marked as such wherever it is shown and is never recommended on cost.

What the decision cannot see: anything the checks and requirements did not measure (a target's
behaviour on inputs outside the trial's, at a load no scenario ran, or over longer than the
trial), and targets that could not run on this machine (they are named, not judged).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from bakeoff.analysis.cost import Cost, Price, price_for
from bakeoff.codec import Value
from bakeoff.emu import NAME as TEST_DEVICE
from bakeoff.results.values import RunResult
from bakeoff.units import figure
from bakeoff.verdicts.standing import (
    Standing,
    cost_in_run,
    label_of,
    price_in_run,
    reference_rate_of,
    standing_of,
    stored_prices,
    tokens_per_request,
)
from bakeoff.verdicts.timing import busy_flags

__all__ = [
    "REHEARSAL",
    "RULE",
    "RULE_BRIEF",
    "Decision",
    "Standing",
    "cost_in_run",
    "decide",
    "decide_run",
    "decide_runs",
    "label_of",
    "price_in_run",
    "reference_rate_of",
    "standing_of",
    "stored_prices",
    "tokens_per_request",
]

#: The decision rule, printed with every decision and written in docs/performance.md.
RULE = (
    "A target qualifies when it ran, its outputs passed the correctness check (and stay finite where "
    "the workload's own dtype does), its work stayed on its "
    "device (or it runs on the CPU), no other check it ran failed (training parity, when asked for), "
    "and every requirement was met with its whole interval on the right "
    "side. Of those, the cheapest (when every one has a price) or else the fastest is recommended; when "
    "its interval overlaps the next one's, no winner is claimed. Evidence that cannot decide (an "
    "interval straddling a requirement, too few samples, a requirement not measured, outputs not "
    "comparable) never qualifies a target and never counts as a win. A ranking timed while the machine was busy "
    "(a load above its cores, more threads than cores), without replicates whose intervals include the spread "
    "between processes, is inconclusive."
)

#: The rule in one line, for the terminal's summary (the full rule is printed with ``--verbose``).
RULE_BRIEF = (
    "the fastest (with prices, the cheapest) target that is correct, stays on its device and meets every "
    "requirement with its whole interval; overlapping intervals are no win; inconclusive evidence never qualifies"
)

#: Said beside every rehearsal cost (the bundled test device's).
REHEARSAL = (
    f"rehearsal: {TEST_DEVICE} emulates a device on the CPU; its speed and so its cost say nothing of a real device"
)

_ALSO = " qualifies too: "
_NOT_RANKED = " (not ranked): "


@dataclass(frozen=True)
class Decision(Value):
    """The outcome for one workload.

    ``outcome`` is ``recommended`` (``target`` qualifies and beats every other that does),
    ``tie`` (``target`` is the best estimate, but ``tied`` qualify too and cannot be told
    apart), ``inconclusive`` (none qualifies for sure; ``target`` is the best of those whose
    evidence cannot decide) or ``none`` (every target misses something; ``target`` is the
    closest). ``basis`` is ``cost``, ``speed``, or ``qualification`` when nothing in the running
    has a cost or a speed to rank by (never timed, or only the test device's speed, which says
    nothing of a real device): qualifying is then all a recommendation rests on, and two that
    qualify are a tie. ``lines`` say why, each with its figure;
    ``unmeasured`` names the targets that could not run here; ``cost_basis`` says what the
    costs shown assume (every distinct basis among them, "" without costs).
    """

    outcome: str
    target: str | None
    basis: str
    lines: tuple[str, ...] = ()
    tied: tuple[str, ...] = ()
    standings: tuple[Standing, ...] = ()
    unmeasured: tuple[str, ...] = ()
    rule: str = RULE
    cost_basis: str = ""

    @property
    def said(self) -> str:
        """The outcome a report heads the decision with: ``nothing`` where there was no target
        to decide on (outcome ``none`` with no closest target: the reference alone, or nothing
        measured), else :attr:`outcome`."""
        return "nothing" if self.outcome == "none" and self.target is None else self.outcome

    def brief_lines(self) -> tuple[str, ...]:
        """:attr:`lines` with the targets that qualify too but lost (their figures are in the
        table above the decision) said in one line."""
        also = [line.split(_ALSO)[0] for line in self.lines if _ALSO in line]
        if len(also) < 2:
            return self.lines
        kept = [line for line in self.lines if _ALSO not in line]
        first = next(i for i, line in enumerate(self.lines) if _ALSO in line)
        return (
            *kept[:first],
            f"{', '.join(also)} qualify too, " + ("at a higher cost" if self.basis == "cost" else "slower"),
            *kept[first:],
        )


def _rehearsed(s: Standing) -> bool:
    """Whether ``s`` carries a rehearsal cost (the bundled test device's, priced)."""
    return s.cost is not None and s.cost.rehearsal


def _ranked_cost(s: Standing) -> Cost | None:
    """The cost ``s`` may be ranked by: none for a rehearsal."""
    return None if _rehearsed(s) else s.cost


def _key(s: Standing, basis: str) -> float:
    """Lower is better."""
    if basis == "cost":
        cost = _ranked_cost(s)
        return cost.value if cost is not None else math.inf
    return -s.speed[0] if s.speed is not None else math.inf


def _overlap(a: Standing, b: Standing, basis: str) -> bool:
    """Whether the data can tell ``a`` and ``b`` apart on ``basis`` (intervals that overlap, or
    a figure without an interval, cannot)."""
    if basis == "cost":
        if a.cost is None or b.cost is None or not (a.cost.has_interval and b.cost.has_interval):
            return True
        return a.cost.low <= b.cost.high and b.cost.low <= a.cost.high  # type: ignore[operator]
    if a.speed is None or b.speed is None:
        return True
    return a.speed[1] <= b.speed[2] and b.speed[1] <= a.speed[2]


def _cost_figure(s: Standing, reference: Standing | None = None) -> str:
    """``s``'s cost with its interval, per million tokens, against the reference's, at what rate
    on what basis; a rehearsal says so."""
    c = s.cost
    assert c is not None
    unit = c.price.currency
    span = " (one reading)" if not c.has_interval else ""
    if c.has_interval and c.low != c.high:
        span = f" ({unit}{c.low:.3g}-{unit}{c.high:.3g})"
    tokens = f", {unit}{c.per_million_tokens:.3g} per million tokens" if c.per_million_tokens else ""
    versus = ""
    if reference is not None and reference is not s and reference.cost is not None:
        versus = f", {c.value / reference.cost.value:.2f}x the reference's cost"
    said = f"{unit}{c.value:.3g} per million requests{span}{tokens}{versus} at {figure(c.rate, '/s')} ({c.basis_brief})"
    return f"rehearsal cost {said} ({REHEARSAL})" if c.rehearsal else said


def _figure_of(s: Standing, basis: str, reference: Standing | None = None) -> str:
    if (basis == "cost" and _ranked_cost(s) is not None) or _rehearsed(s):
        return _cost_figure(s, reference)  # a rehearsal says what its speed cannot
    if s.speed is not None:
        value, low, high = s.speed
        said = "the reference (1.00x)" if s.is_reference else f"{value:.2f}x the reference ({low:.2f}-{high:.2f}x)"
    elif s.target.split("?")[0].split("+")[0] == TEST_DEVICE:
        said = "speed not transferable (the bundled test device emulates a device on the CPU)"
    else:
        said = "not timed"
    if s.cost is not None:  # shown beside the speed it was not ranked by
        return f"{said}; {_cost_figure(s, reference)}"
    return f"{said} (no cost: {s.cost_note})" if s.cost_note else said


def _not_by_cost(pool: Sequence[Standing], standings: Sequence[Standing], basis: str) -> list[str]:
    """Why a decision with prices ranks ``pool`` by speed, or not at all: who has no cost to rank by."""
    if basis == "cost" or not any(s.cost is not None or s.cost_note for s in standings):
        return []  # by cost, or no prices: nothing to explain
    missing = [f"{s.target} ({s.cost_note})" for s in pool if s.cost is None]
    if not missing:  # every cost in the running is a rehearsal
        missing = [f"{s.target} (a rehearsal)" for s in pool]
    if basis != "speed":
        return [f"not ranked: no speed to rank by, and no cost for {', '.join(missing)}"]
    return [f"ranked by speed, not cost: no cost to rank for {', '.join(missing)}"]


def _cost_basis(standings: Sequence[Standing]) -> str:
    """What the costs among ``standings`` assume, each distinct basis once (with its targets
    when they differ)."""
    bases: dict[str, list[str]] = {}
    for s in standings:
        if s.cost is not None:
            bases.setdefault(s.cost.basis_text, []).append(s.target)
    if len(bases) < 2:
        return next(iter(bases), "")
    return "; ".join(f"{', '.join(targets)}: {text}" for text, targets in bases.items())


def _ruled_out(standings: Iterable[Standing]) -> list[str]:
    return [f"{s.target} ruled out by {'; '.join(s.misses)}" for s in standings if s.misses]


def decide(standings: Sequence[Standing], unmeasured: Iterable[str] = (), busy: str = "") -> Decision:
    """The decision over ``standings`` by :data:`RULE` (see :class:`Decision` for outcomes);
    targets that are not candidates are listed after the rest, for comparison.

    ``busy`` says the machine moved the timings (a load above the cores, more threads than
    cores: :func:`~bakeoff.verdicts.timing.busy_flags`) where the intervals do not include the
    spread between processes: a ranking of two or more qualifying targets is then
    ``inconclusive`` (the best estimate named), since a second run may rank them otherwise.
    A single qualifying target needs no ranking and is still recommended."""
    decision = replace(_decide(standings, unmeasured), cost_basis=_cost_basis(standings))
    if busy and decision.outcome in ("recommended", "tie") and sum(s.qualifies for s in standings) > 1:
        why = (
            f"inconclusive: the machine was busy while timing ({busy}), so a second run may rank them "
            "otherwise; rerun on a quiet machine, or with --replicates 3 (its intervals include the spread "
            "between processes)"
        )
        decision = replace(decision, outcome="inconclusive", lines=(why, *decision.lines), tied=())
    basis = decision.basis
    extra = tuple(
        f"{s.target} (for comparison, not a candidate): {_figure_of(s, basis)}" for s in standings if not s.candidate
    )
    return replace(decision, lines=decision.lines + extra, standings=tuple(standings)) if extra else decision


def _decide(standings: Sequence[Standing], unmeasured: Iterable[str] = ()) -> Decision:
    unmeasured = tuple(unmeasured)
    ref = next((s for s in standings if s.is_reference), None)
    shown = standings
    standings = [s for s in standings if s.candidate]
    qualified = [s for s in standings if s.qualifies]
    undecided = [s for s in standings if not s.misses and s.doubts]
    pool = qualified or undecided
    # a rehearsal cost is shown in its place, never ranked: a pool with only rehearsals ranks by speed
    costed = pool and all(s.cost is not None for s in pool) and any(_ranked_cost(s) is not None for s in pool)
    # with no cost and no speed in the running (never timed, or speeds that say nothing of a real
    # device), nothing ranks them: a recommendation then rests on qualifying alone, and says so
    timed = any(s.speed is not None for s in pool)
    basis = "cost" if costed else "speed" if timed or not pool else "qualification"
    lines: list[str] = []
    if qualified:
        ranked = sorted(qualified, key=lambda s: _key(s, basis))
        best = ranked[0]
        # a rehearsal is shown with its figure, never compared: neither a tie nor a loss
        tied = tuple(s.target for s in ranked[1:] if not _rehearsed(s) and _overlap(best, s, basis))
        lines.append(f"{best.target}: {_figure_of(best, basis, ref)}")
        for s in ranked[1:]:
            how = _NOT_RANKED if _rehearsed(s) else " indistinguishable: " if s.target in tied else _ALSO
            lines.append(f"{s.target}{how}{_figure_of(s, basis, ref)}")
        for s in sorted(undecided, key=lambda s: _key(s, basis)):
            if _key(s, basis) < _key(best, basis):
                lines.append(f"{s.target} might do better, but its evidence is inconclusive: {'; '.join(s.doubts)}")
            else:
                lines.append(f"{s.target} ({_figure_of(s, basis, ref)}) is undecided: {'; '.join(s.doubts)}")
        lines += _not_by_cost(pool, shown, basis) + _ruled_out(standings)
        return Decision("tie" if tied else "recommended", best.target, basis, tuple(lines), tied,
                        tuple(standings), unmeasured)  # fmt: skip
    if undecided:
        best = sorted(undecided, key=lambda s: _key(s, basis))[0]
        for s in sorted(undecided, key=lambda s: _key(s, basis)):
            lines.append(f"{s.target} ({_figure_of(s, basis, ref)}) is undecided: {'; '.join(s.doubts)}")
        lines += _not_by_cost(pool, shown, basis) + _ruled_out(standings)
        return Decision("inconclusive", best.target, basis, tuple(lines), (), tuple(standings), unmeasured)
    if not standings:  # the reference alone (exec --on cpu: the target is the reference), or nothing measured
        said = "no target was measured"
        if ref is not None:
            said = (f"no target was run but the reference ({ref.target}), which targets are compared with: name one "
                    "with --on")  # fmt: skip
        return Decision("none", None, basis, (said,), (), (), unmeasured)
    closest = sorted(standings, key=lambda s: (len(s.misses), len(s.doubts), _key(s, "speed")))[0]
    lines.append(f"closest: {closest.target}, ruled out by {'; '.join(closest.misses)}")
    lines += _ruled_out(s for s in standings if s is not closest)
    return Decision("none", closest.target, "speed", tuple(lines), (), tuple(standings), unmeasured)


def decide_run(run: RunResult, prices: Iterable[Price] | None = None) -> Decision:
    """The decision for a stored run: its targets' results, priced by ``prices`` (None: the
    prices the run was given). A reference the trial added (the user did not list it) is shown
    for comparison, never chosen."""
    return decide_runs([run], prices, reference_candidate=not run.settings.get("reference_added", False))


def decide_runs(
    runs: Sequence[RunResult], prices: Iterable[Price] | None = None, reference_candidate: bool = True
) -> Decision:
    """One decision over several runs of one workload (a plan's stages): every target of the
    first run, then each later run's targets not seen before (its own reference left out); each
    target's speed is against its own run's reference. ``prices`` None: the first run's. With
    ``reference_candidate`` False the reference is shown for comparison, never chosen."""
    prices = stored_prices(runs[0]) if prices is None and runs else tuple(prices or ())
    standings: list[Standing] = []
    unmeasured: list[str] = []
    busy: list[str] = []
    seen: set[str] = set()
    for index, run in enumerate(runs):
        rate = reference_rate_of(run)
        tokens = tokens_per_request(run)
        # replicates measured the spread between processes: their intervals include the machine's
        replicated = isinstance(run.settings.get("replicates"), int) and run.settings["replicates"] > 1
        for r in run.results:
            if label_of(r) in seen or (index and r.is_reference):
                continue
            seen.add(label_of(r))
            if r.status == "skipped":
                unmeasured.append(f"{label_of(r)} ({r.reason})")
                continue
            price = price_for(r.target.spec, r.target.device, prices)
            standing = standing_of(r, price, rate, tokens, priced=bool(prices))
            standings.append(
                standing if reference_candidate or not r.is_reference else replace(standing, candidate=False)
            )
            if r.status == "ok" and r.latency is not None and not replicated:
                busy.extend(busy_flags(r, run.environment))
    return decide(standings, unmeasured, busy=max(busy, key=_load, default=""))


def _load(flag: str) -> float:
    """The figure a busy flag names first (the load, or the threads), to show the worst one."""
    numbers = re.findall(r"\d+(?:\.\d+)?", flag)
    return float(numbers[0]) if numbers else 0.0
