"""Moving findings between knowledge bases: export to JSON lines or CSV, import JSON lines.

A JSON-lines export is a header line followed by one record per line, so a large export can
be read (and checked by eye) line by line::

    {"schema": "bakeoff.export", "schema_version": 1, "exported_at": ..., "bakeoff_version": ...}
    {"kind": "requirements", "workload_spec": ..., "updated_at": ..., "texts": [...]}
    {"kind": "baseline", "baseline": {...BaselineInfo...}, "environment": {...}}
    {"kind": "run", "run": {...the "bakeoff.run" document...}, "bakeoff_version": ..., "notes": [...], "tags": [...]}

Baselines come before the runs that refer to them. Baseline *tensors* stay where they were
made: a baseline's record is its metadata (a later trial elsewhere recomputes the tensors).

Import is idempotent and safe beside other writers: a run, baseline, tag or note already
present is left alone (runs are keyed by id, notes by run, time, text and author), requirements
are replaced only by newer ones, and the whole file goes in as one transaction, taken one
importer at a time. The file is checked whole before anything is written, and refused if any of
it is wrong: a path that is not a regular file (a FIFO would wait for a writer for ever), a file
or a line past its size cap (:data:`MAX_FILE_BYTES`, :data:`MAX_LINE_BYTES`), a text or note past
its cap (:data:`MAX_TEXT_CHARS`, :data:`MAX_NOTE_CHARS`), an integer no database column holds, a
header whose ``schema_version`` no export has, a file or record newer than this release, and a
run or baseline whose id is already used for other content (in the file or in the database).

An imported run keeps where it came from (:func:`imported_from`). Its document was written by
whoever wrote the file, so a run whose workload names code to run (a script, a ``py:`` module, a
model directory) is never repeated from it: :func:`check_rerunnable` refuses it, and the import
lists such runs. CSV is a flat table for spreadsheets (one row per run and target) and is export-only:
:data:`CSV_COLUMNS` first (their names and order are kept from release to release), then one
column per further metric the registered checks offer (a plugin check's verdict, say), in the
order the checks run.

Where each part lives: export and the format's constants in
:mod:`~bakeoff.store.transfer.exporting`, the reading and checking of a file before import in
:mod:`~bakeoff.store.transfer.reading`, and the import itself with the provenance of imported
runs in :mod:`~bakeoff.store.transfer.importing`; this package re-exports their public names.
"""

from __future__ import annotations

from bakeoff.store.annotations import MAX_NOTE_CHARS
from bakeoff.store.transfer.exporting import CSV_COLUMNS, EXPORT_SCHEMA, EXPORT_VERSION, ExportSummary, export
from bakeoff.store.transfer.importing import (
    RERUNNABLE_WHEN_IMPORTED,
    ImportSummary,
    check_rerunnable,
    import_,
    imported_from,
)
from bakeoff.store.transfer.reading import MAX_FILE_BYTES, MAX_LINE_BYTES, MAX_TEXT_CHARS

__all__ = [
    "CSV_COLUMNS",
    "EXPORT_SCHEMA",
    "EXPORT_VERSION",
    "MAX_FILE_BYTES",
    "MAX_LINE_BYTES",
    "MAX_NOTE_CHARS",
    "MAX_TEXT_CHARS",
    "RERUNNABLE_WHEN_IMPORTED",
    "ExportSummary",
    "ImportSummary",
    "check_rerunnable",
    "export",
    "import_",
    "imported_from",
]
