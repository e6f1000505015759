"""The knowledge base itself: a stored run and a selection of runs, the schema's status and
upgrade, export to and import from files, and the notes and tags people keep on runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from bakeoff.api.common import PathLike
from bakeoff.results.values import RunResult
from bakeoff.store.db import Store

if TYPE_CHECKING:
    from bakeoff.store.annotations import Note
    from bakeoff.store.transfer import ExportSummary, ImportSummary


def show(run_id: str, *, db: PathLike | None = None) -> RunResult:
    """A stored run by id (or unique id prefix)."""
    return Store.open(db, create=False).get_run(run_id)


def select_runs(
    store: Store, run_ids: Iterable[str] = (), *, workload: str | None = None, tag: str | None = None
) -> list[RunResult]:
    """Stored runs chosen by id prefixes, a workload or a tag (everything when none is given), oldest first."""
    from bakeoff.store.selection import no_runs, run_headers

    run_ids = list(run_ids)
    if run_ids:
        ids = list(dict.fromkeys(store.resolve_run_id(i) for i in run_ids))
    elif tag is not None:
        ids = list(store.run_ids_with_tag(tag))
    else:
        ids = [h.run_id for h in run_headers(store, workload=workload)]
    if not ids:
        raise no_runs(store, workload, tag)
    return sorted((store.get_run(i) for i in ids), key=lambda r: (r.created_at, r.run_id))


# -- sharing a knowledge base ---------------------------------------------------------------


def db_status(*, db: PathLike | None = None) -> dict[str, Any]:
    """The database's schema version, this release's, the migrations pending and the number of runs."""
    return Store.open(db, create=False, upgrade=False).schema_status()


def db_upgrade(*, db: PathLike | None = None) -> dict[str, Any]:
    """Apply pending migrations (safe while other clients open the database); what was done."""
    store = Store.open(db, create=False, upgrade=False)
    before = store.schema_status()
    if before["newer"]:
        from bakeoff.errors import StoreError

        raise StoreError(
            f"database {store.display_url} has schema version {before['schema_version']}, newer than this "
            f"bakeoff understands ({before['supported_version']})",
            hint="upgrade bakeoff to use it",
        )
    applied = store.upgrade()
    return {
        "database": store.display_url,
        "from_version": before["schema_version"],
        "schema_version": store.schema_status()["schema_version"],
        "applied": applied,
    }


def export_runs(
    path: PathLike,
    *,
    db: PathLike | None = None,
    format: str = "jsonl",
    workload: str | None = None,
    tag: str | None = None,
) -> ExportSummary:
    """Write the runs (all, one workload's or one tag's) to ``path`` as JSON lines or CSV.

    JSON lines carry each run's full document with its notes and tags, and the baselines and
    requirements of the workloads exported: :func:`import_runs` reads them into another
    database. CSV is a flat table (one row per run and target) for spreadsheets.
    """
    from bakeoff.store.transfer import export

    return export(Store.open(db, create=False), path, fmt=format, workload=workload, tag=tag)


def import_runs(path: PathLike, *, db: PathLike | None = None) -> ImportSummary:
    """Add what a JSON-lines export holds that the database lacks (importing twice adds nothing).
    Its runs are shown and reported once, unseen, before anything is written: a value of the
    wrong kind that would break ``show`` or a report refuses its line."""
    from bakeoff.store.connection import db_flag
    from bakeoff.store.transfer import import_

    return import_(lambda: Store.open(db), path, db_flag(db), check=shown_and_reported)  # opened once checked


def shown_and_reported(runs: list[RunResult]) -> None:
    """Show each of ``runs`` (verbose) and render their report in every format, for nobody:
    what raises here would raise in ``bakeoff show`` and ``bakeoff report``."""
    import io

    from rich.console import Console

    from bakeoff.report.evidence import build_evidence
    from bakeoff.report.formats import REPORT_FORMATS
    from bakeoff.report.terminal import run_view

    for run in runs:
        Console(file=io.StringIO(), width=120).print(run_view(run, width=120, verbose=True))
    evidence = build_evidence(runs, notes={r.run_id: [] for r in runs}, tags={r.run_id: [] for r in runs})
    for kind in REPORT_FORMATS.values():
        kind.render(evidence)


def note(run_id: str, text: str, *, db: PathLike | None = None, author: str | None = None) -> Note:
    """Keep a free-form note on a run (``run_id`` may be a unique prefix); ``author`` defaults to $USER."""
    return Store.open(db, create=False).add_note(run_id, text, author=author)


def tag(run_id: str, name: str, *, db: PathLike | None = None, remove: bool = False) -> list[str]:
    """Put a tag on a run, or take it off with ``remove``; returns the run's tags afterwards."""
    store = Store.open(db, create=False)
    if not remove:
        return store.add_tag(run_id, name)
    full = store.resolve_run_id(run_id)
    if not store.remove_tag(full, name):
        from bakeoff.errors import StoreError

        have = ", ".join(store.tags(full)) or "none"
        raise StoreError(f"run {full} has no tag {name!r}", hint=f"its tags: {have}")
    return store.tags(full)


def notes_and_tags(run_id: str, *, db: PathLike | None = None) -> dict[str, Any]:
    """``{"run_id", "notes": [Note, ...], "tags": [str, ...]}`` of a run (``run_id`` may be a prefix)."""
    store = Store.open(db, create=False)
    full = store.resolve_run_id(run_id)
    return {"run_id": full, "notes": store.notes(full), "tags": store.tags(full)}
