"""The advice blocks of the terminal: the decision, a plan's stages, and what each target would take.

:func:`decision_view` prints a :class:`~bakeoff.verdicts.decision.Decision` (its outcome, the
lines that say why and its rule), :func:`plan_view` a plan's stages with the decision over all of
them, and :func:`remedies_view` the remedies found from a run's evidence. The run view
(:mod:`.run`) ends with the first and the last.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group

from bakeoff.report.printable import Shown as Text  # every line shows the control characters of stored text
from bakeoff.units import duration
from bakeoff.verdicts.decision import RULE_BRIEF, Decision
from bakeoff.verdicts.plan import Plan
from bakeoff.verdicts.remedies import Remedy

__all__ = ["decision_view", "plan_view", "remedies_view"]

_OUTCOME = {
    "recommended": ("recommended: ", "bold green"),
    "tie": ("no clear winner, best estimate: ", "bold yellow"),
    "inconclusive": ("inconclusive, best candidate: ", "bold yellow"),
    "none": ("no target qualifies; closest: ", "bold red"),
    "nothing": ("nothing to decide", "bold"),
}


def decision_view(decision: Decision, verbose: bool = True) -> Group:
    """The decision block: the outcome, the lines that say why, what could not run, the rule
    (in one line unless ``verbose``)."""
    said, style = _OUTCOME[decision.said]
    if decision.said == "nothing":
        head = Text.assemble(("decision: ", "bold"), (said, style))
    else:
        head = Text.assemble(("decision ", "bold"), f"(by {decision.basis}) ", (said, style), decision.target or "-")
    lines = [Text(f"  {line}") for line in (decision.lines if verbose else decision.brief_lines())]
    if decision.cost_basis:
        lines.insert(0, Text(f"  cost basis: {decision.cost_basis}"))
    if decision.unmeasured:
        lines.append(Text(f"  not measured here: {'; '.join(decision.unmeasured)}", style="dim"))
    rule = decision.rule if verbose else f"{RULE_BRIEF} (the full rule: --verbose)"
    return Group(head, *lines, Text(f"rule: {rule}", style="dim"))


def plan_view(plan: Plan) -> Group:
    """A plan: what each stage tried and where its evidence is (or why it has none), what the
    budget left untried, the decision over all of them, and what the recommended variant
    changed."""
    over = plan.seconds - plan.budget_s
    lines = [
        Text.assemble(
            ("plan ", "bold"),
            f"{plan.workload}: {duration(plan.seconds * 1e3)} of a {duration(plan.budget_s * 1e3)} budget"
            + (f" (over by {duration(over * 1e3)}, ending a stage stopped at its end)" if over >= 1 else ""),
        )
    ]
    for stage in plan.stages:
        tried = ", ".join(stage.targets) + (f" (buckets {stage.buckets})" if stage.buckets else "")
        if stage.untried:  # why, under "left untried"
            where = "skipped" if stage.skipped else f"stopped after {duration(stage.seconds * 1e3)}"
        else:
            where = f"run {stage.run_id}, {duration(stage.seconds * 1e3)}"
            if stage.estimate_s is not None:
                floor = "at least " if stage is plan.stages[0] else ""  # the first's: its timing alone
                where += f" (estimated {floor}{duration(stage.estimate_s * 1e3)})"
        lines.append(Text(f"  {stage.name}: {tried} [{where}]"))
    lines += [Text(f"  left untried: {line}", style="bold yellow") for line in plan.untried]
    lines += [Text(f"  {note}", style="dim") for note in plan.notes]
    parts: list[Any] = [*lines, decision_view(plan.decision)]
    if plan.decision.outcome in ("recommended", "tie") and plan.decision.target:
        changed = ", ".join(f"{a['name']}={a['value']}" for a in plan.ledger) or "nothing"
        parts.append(Text(f"{plan.decision.target} changes: {changed}"))
    if not any(stage.run_id for stage in plan.stages):
        parts.append(Text("no stage finished: nothing of this plan is stored", style="dim"))
    else:
        shown = f"`bakeoff report --tag {plan.tag} --html plan.html`" if plan.tag else "`bakeoff show RUN_ID`"
        parts.append(Text(f"every finished stage's evidence is stored: {shown}", style="dim"))
    return Group(*parts)


def remedies_view(found: dict[str, list[Remedy]], verbose: bool = True) -> Group:
    """What each target would take, most effect first; a measured remedy says what it did.
    Unless ``verbose``, only each target's first item (the one with most effect)."""
    lines = [Text("what it would take (from this run's evidence)", style="bold")]
    for target, items in found.items():
        shown = items if verbose else items[:1]
        more = f" (+{len(items) - 1} more: --verbose)" if len(items) > len(shown) else ""
        lines.append(Text(f"  {target}:{more}"))
        for item in shown:
            measured = f" [measured: {item.measured}]" if item.measured else " [not measured]"
            lines.append(Text(f"    - {item.kind}: {item.finding} -> {item.change}{measured}"))
    return Group(*lines)
