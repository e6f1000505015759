"""The reports a remapped script's child processes leave behind, and the runner's reading of them.

Each remapped child (:mod:`bakeoff.script.children`) keeps ``OUT/children/<pid>.json`` current: a
:class:`ChildReport` with who it was, whether it ended and its rewrites. The runner reads them
with :func:`read_children` and merges them with :func:`with_children`: each rewrite summed per
API and call site, the site marked with the child processes it came from
(:func:`merge_ledgers`). What the run's supervisor (:mod:`bakeoff.runner.script_worker`) writes
to :data:`PROCESSES` (:func:`read_processes`), the processes it killed when the script ended and
what the script's stdin was, joins the same summary; :func:`child_notes` turns the summary into
the run's notes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bakeoff.codec import Value
from bakeoff.script.ledger import Rewrite

__all__ = [
    "FORMAT",
    "LEDGERS",
    "PROCESSES",
    "ChildReport",
    "child_notes",
    "merge_ledgers",
    "read_children",
    "read_processes",
    "with_children",
]

#: Under the launcher's output directory: the children's reports.
LEDGERS = "children"
#: What a run's supervisor writes under the output directory (:func:`read_processes`).
PROCESSES = "processes.json"
FORMAT = 1


@dataclass(frozen=True)
class ChildReport(Value):
    """What one child process wrote: who it was, whether it ended (wrote its final ledger) and
    its rewrites (call sites relative to the run's working directory). ``error``: why it could
    not be remapped (it ran as written)."""

    format: int
    pid: int
    parent: int
    label: str
    forked: bool
    ended: bool
    started: float
    error: str | None = None
    ledger: tuple[Rewrite, ...] = ()


def read_children(out: str | Path) -> list[ChildReport]:
    """The reports the children of a launch wrote under ``out`` (its output directory), in the
    order they started; unreadable ones are skipped."""
    folder = Path(out) / LEDGERS
    reports = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        try:
            reports.append(ChildReport.from_dict(json.loads(path.read_text())))
        except (OSError, ValueError, TypeError, KeyError):
            continue
    return sorted(reports, key=lambda r: (r.started, r.pid))


def _who(labels: Sequence[str]) -> str:
    if len(labels) == 1:
        return f"in child process {labels[0]}"
    shown = ", ".join(labels[:3])
    return f"in {len(labels)} child processes: {shown}" + (", ..." if len(labels) > 3 else "")


def merge_ledgers(rows: Sequence[Mapping[str, Any]], children: Sequence[ChildReport]) -> list[dict[str, Any]]:
    """The launcher's ledger ``rows`` (rewrites as dicts) followed by the children's rewrites,
    summed per API and call site; each child row's site says which child processes made it."""
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    labels: dict[tuple[str, str], list[str]] = {}
    for child in children:
        for rewrite in child.ledger:
            key = (rewrite.api, rewrite.site)
            entry = merged.get(key)
            if entry is None:
                merged[key] = rewrite.to_dict()
                labels[key] = []
            else:
                entry["count"] += rewrite.count
                if rewrite.numerics and not entry["numerics"]:
                    entry["numerics"], entry["reason"] = True, rewrite.reason
            if child.label not in labels[key]:
                labels[key].append(child.label)
    for key, entry in merged.items():
        entry["site"] = f"{entry['site']} ({_who(labels[key])})"
    return [dict(r) for r in rows] + list(merged.values())


def read_processes(out: str | Path) -> dict[str, Any]:
    """What the run's supervisor wrote to :data:`PROCESSES` under ``out``: the note on the
    script's stdin (``stdin``) and the processes it killed when the script ended (``killed``);
    empty when it wrote nothing (a run without one, or a supervisor that was killed)."""
    try:
        found = json.loads((Path(out) / PROCESSES).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(found, dict):
        return {}
    killed = found.get("killed")
    return {
        "stdin": found["stdin"] if isinstance(found.get("stdin"), str) else None,
        "killed": [str(k) for k in killed] if isinstance(killed, list) else [],
    }


def with_children(result: Mapping[str, Any], out: str | Path) -> dict[str, Any]:
    """A launch's ``result.json`` data with its children's rewrites merged into ``ledger`` and
    ``children`` summarising them and what the run's supervisor did (:func:`read_processes`);
    absent when no child was remapped and the supervisor has nothing to say."""
    children = read_children(out)
    processes = {key: value for key, value in read_processes(out).items() if value}
    if not children and not processes:
        return dict(result)
    summary = {
        "remapped": sum(1 for c in children if c.error is None),
        "not_ended": [c.label for c in children if not c.ended and c.error is None],
        "errors": [f"{c.label}: {c.error}" for c in children if c.error is not None],
        **processes,
    }
    return {**result, "ledger": merge_ledgers(result.get("ledger") or (), children), "children": summary}


def child_notes(summary: Mapping[str, Any] | None) -> list[str]:
    """The run's notes about its remapped children (see :func:`with_children`)."""
    if not summary:
        return []
    notes = []
    count = summary.get("remapped", 0)
    if count:
        notes.append(f"{count} child process{'es' if count != 1 else ''} ran remapped, not audited")
    unended = summary.get("not_ended") or []
    if unended:
        notes.append(
            f"{len(unended)} of them did not end normally (SIGTERM, as Pool.terminate() sends; a kill, "
            f"os._exit or a crash): their rewrites are listed, their counts may fall short: {', '.join(unended[:3])}"
            + (", ..." if len(unended) > 3 else "")
        )
    for error in (summary.get("errors") or [])[:3]:
        notes.append(f"a child process ran unmapped: {error}")
    killed = summary.get("killed") or []
    if killed:
        many = len(killed) != 1
        notes.append(
            f"{len(killed)} process{'es' if many else ''} the script started {'were' if many else 'was'} still running "
            f"when the script ended: killed {', '.join(killed[:5])}" + (", ..." if len(killed) > 5 else "")
        )
    if summary.get("stdin"):
        notes.append(summary["stdin"])
    return notes
