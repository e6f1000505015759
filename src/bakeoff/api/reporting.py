"""Reports: :func:`report` builds the evidence for a selection of stored runs
(:mod:`bakeoff.report.evidence`) and writes it as HTML, Markdown and/or JSON.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from bakeoff.api.common import PathLike
from bakeoff.api.knowledge_base import select_runs
from bakeoff.store.db import Store

if TYPE_CHECKING:
    from bakeoff.report.evidence import Evidence
    from bakeoff.verdicts.regressions import Thresholds


def report(
    run_ids: Iterable[str] = (),
    *,
    workload: str | None = None,
    tag: str | None = None,
    db: PathLike | None = None,
    html: PathLike | None = None,
    markdown: PathLike | None = None,
    json: PathLike | None = None,
    thresholds: Thresholds | None = None,
    prices: Iterable[str] | None = None,
) -> Evidence:
    """Build the evidence for the selected runs and write it as HTML, Markdown and/or JSON;
    each run's decision is priced by ``prices`` (None: the prices each run was given).

    Raises:
        SpecError: no output was asked for.
        StoreError: nothing matches the selection.
    """
    from bakeoff.analysis.cost import parse_prices
    from bakeoff.errors import SpecError
    from bakeoff.outfiles import check_writable, write_text
    from bakeoff.report.evidence import build_evidence
    from bakeoff.report.formats import REPORT_FORMATS

    outputs = {"html": html, "markdown": markdown, "json": json}  # one keyword per format of the registry
    if all(v is None for v in outputs.values()):
        raise SpecError("no report format chosen", hint="add --html out.html, --markdown out.md or --json out.json")
    for path in outputs.values():
        if path is not None:
            check_writable(path)  # before minutes of rendering, not after
    store = Store.open(db, create=False)
    runs = select_runs(store, run_ids, workload=workload, tag=tag)
    selection = ", ".join(run_ids) or (f"workload {workload}" if workload else f"tag {tag}" if tag else "all runs")
    evidence = build_evidence(
        runs,
        notes={r.run_id: store.notes(r.run_id) for r in runs},
        tags={r.run_id: store.tags(r.run_id) for r in runs},
        selection=selection,
        database=store.display_url,
        thresholds=thresholds,
        prices=None if prices is None else parse_prices(list(prices)),
    )
    for kind, path in outputs.items():
        if path is not None:
            write_text(path, REPORT_FORMATS[kind].render(evidence))
    return evidence
