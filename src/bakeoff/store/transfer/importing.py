"""Import: an export's records added to a knowledge base, and the guard on rerunning what came in.

:func:`import_` adds, in one transaction taken one importer at a time, the runs, baselines,
requirements, notes and tags that the store lacks (the file checked whole first, by
:func:`~bakeoff.store.transfer.reading.read`), and records where each run added came from
(:func:`imported_from`). :func:`check_rerunnable` refuses to repeat an imported run whose workload
names code to run (:data:`RERUNNABLE_WHEN_IMPORTED`: the kinds bakeoff builds from its own code).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.exc import DBAPIError

from bakeoff.codec import Value
from bakeoff.errors import SpecError, StoreError
from bakeoff.results.values import RunResult
from bakeoff.store import schema
from bakeoff.store.db import Store
from bakeoff.store.schema import utc_now
from bakeoff.store.transfer.reading import RunCheck, present, read
from bakeoff.version import __version__

__all__ = ["RERUNNABLE_WHEN_IMPORTED", "ImportSummary", "check_rerunnable", "import_", "imported_from"]

# pg_advisory_xact_lock key held while importing, so concurrent imports cannot both add a note
_IMPORT_LOCK = int.from_bytes(b"bkimport", "big")
#: Workload kinds bakeoff builds from its own code: the only imported runs ``rerun`` repeats.
RERUNNABLE_WHEN_IMPORTED = frozenset({"arch", "dist"})
# the meta row that records where an imported run came from: its key is this and the run id
_IMPORTED_KEY = "imported:"


@dataclass(frozen=True)
class ImportSummary(Value):
    """What an import added; ``*_present`` counts what the database already had, and
    ``not_rerunnable`` lists the runs added whose workload names code, which ``rerun`` refuses
    (:func:`check_rerunnable`)."""

    path: str
    runs: int
    runs_present: int
    baselines: int
    baselines_present: int
    requirements: int
    notes: int
    tags: int
    not_rerunnable: tuple[str, ...] = ()


def _raced(path: Path, noun: str, key: str) -> StoreError:
    return StoreError(
        f"{noun} {key} was stored by another writer while {path} was imported",
        hint="import the file again (nothing from it was imported)",
    )


def _mark_imported(conn: Any, run_id: str, path: Path) -> None:
    key = _IMPORTED_KEY + run_id
    origin = {"file": str(path), "imported_at": utc_now(), "bakeoff_version": __version__}
    conn.execute(schema.meta.delete().where(schema.meta.c.key == key))
    conn.execute(insert(schema.meta).values(key=key, value=json.dumps(origin, sort_keys=True)))


def _names_code(run: RunResult) -> str | None:
    """The kind of ``run``'s workload when it names code bakeoff does not ship (its recorded kind
    or its spec's, whichever is not one :data:`RERUNNABLE_WHEN_IMPORTED` allows); None otherwise."""
    spec_kind = str(run.workload.get("spec", "")).partition(":")[0]
    recorded = run.workload.get("kind")
    if recorded == "fit":  # a fit map of a workload: its spec says what would be built
        recorded = spec_kind
    if recorded == "dist":  # dist:collectives is bakeoff's own; dist:<workload> builds that workload
        inner = str(run.workload.get("spec", "")).removeprefix("dist:")
        recorded = spec_kind = "dist" if inner == "collectives" else inner.partition(":")[0]
    for kind in (recorded, spec_kind):
        if kind not in RERUNNABLE_WHEN_IMPORTED:
            return str(kind)
    return None


def imported_from(store: Store, run_id: str) -> dict[str, str] | None:
    """Where run ``run_id`` (an exact id) came from if an import added it: ``{"file",
    "imported_at", "bakeoff_version"}``; None for a run made in this database, or one it held
    before an import brought the same run."""
    table = schema.meta
    with store.engine.connect() as conn:
        value = conn.execute(select(table.c.value).where(table.c.key == _IMPORTED_KEY + run_id)).scalar()
    return None if value is None else dict(json.loads(value))


_CODE_KINDS = {"script": "a script", "service": "a service's command line", "py": "a py: module",
               "hf": "a model directory"}  # fmt: skip


def check_rerunnable(store: Store, run: RunResult) -> None:
    """Refuse to repeat ``run`` when an import brought it and its workload names code to run.

    An imported run's document is whatever the file's writer put there: its script and
    arguments (a standard-library module given ``-c``-like arguments runs anything), its
    ``py:`` module or its model directory are theirs. Runs made in this database, and imported
    runs of workloads bakeoff builds from its own code (:data:`RERUNNABLE_WHEN_IMPORTED`), pass.

    Raises:
        SpecError: an imported run whose workload names code.
    """
    kind = _names_code(run)
    if kind is None:
        return
    origin = imported_from(store, run.run_id)
    if origin is None:
        return
    what = _CODE_KINDS.get(kind, f"of kind {kind[:40]!r}")
    exe = {"script": "`bakeoff exec`", "service": "`bakeoff serve`"}.get(kind, "`bakeoff trial`")
    raise SpecError(
        f"run {run.run_id} was imported from {origin.get('file')} and its workload is {what}: "
        "code that came in an import is never run again",
        hint=f"read it with `bakeoff show {run.run_id}`; if you trust it, run it yourself with {exe}",
    )


def import_(
    store: Store | Callable[[], Store], path: str | os.PathLike[str], db_flag: str = "", check: RunCheck | None = None
) -> ImportSummary:
    """Add the runs, baselines, requirements, notes and tags of an export that ``store`` lacks.

    ``check`` is asked of every run before anything is written (see :func:`read`).
    ``store`` may be a callable that opens it: called only after the whole file was checked,
    so a refused file leaves no new database behind; ``db_flag`` (`` --db DB``) goes into the
    commands its hints name. Every run added is recorded as imported
    (:func:`imported_from`); those whose workload names code are listed in the summary's
    ``not_rerunnable`` (:func:`check_rerunnable` refuses them).

    Raises:
        StoreError: the file is missing, not a regular file, past a size cap, not an export,
            newer than this release, or malformed, or it gives a run or baseline id that the
            file or the database already uses for other content (nothing is written then), or
            the database refuses the write.
    """
    source = Path(path)
    records = read(source, check)
    if callable(store):
        store = store()
    runs_present, baselines_present = present(store, records, source, db_flag)
    keys = ("runs", "runs_present", "baselines", "baselines_present", "requirements", "notes", "tags")
    counts = dict.fromkeys(keys, 0)
    held: list[str] = []
    try:
        with store.exclusive_transaction(_IMPORT_LOCK) as conn:
            for item in records.requirements:
                counts["requirements"] += store.merge_requirements(conn, **item)
            for _, info, env in records.baselines:
                if store.insert_baseline_unless_exists(conn, info, env):
                    counts["baselines"] += 1
                    baselines_present.add(info.id)  # a second line of it is present now
                elif info.id in baselines_present:
                    counts["baselines_present"] += 1
                else:
                    raise _raced(source, "baseline", info.id)
            for _, run, version, notes, tags in records.runs:
                if store.insert_run_unless_exists(conn, run, version):
                    counts["runs"] += 1
                    runs_present.add(run.run_id)
                    _mark_imported(conn, run.run_id, source)
                    if _names_code(run) is not None:
                        held.append(run.run_id)
                elif run.run_id in runs_present:
                    counts["runs_present"] += 1
                else:
                    raise _raced(source, "run", run.run_id)
                counts["notes"] += store.merge_notes(conn, run.run_id, notes)
                counts["tags"] += store.merge_tags(conn, run.run_id, tags)
    except DBAPIError as exc:
        detail = str(exc.orig).strip().splitlines()[0]
        hint = "a run refers to a baseline the file and the database lack: export it with its baselines"
        if "foreign key" not in detail.lower():
            hint = "check the database; nothing from the file was imported"
        raise StoreError(f"cannot import {source} into {store.display_url}: {detail}", hint=hint) from exc
    return ImportSummary(path=str(source), **counts, not_rerunnable=tuple(held))
