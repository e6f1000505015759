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
importer at a time. A file or record newer than this release is refused before anything is
written. CSV is a flat table for spreadsheets (one row per run and target) and is export-only:
:data:`CSV_COLUMNS` first (their names and order are kept from release to release), then one
column per further metric the registered checks offer (a plugin check's verdict, say), in the
order the checks run.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from sqlalchemy.exc import DBAPIError

from bakeoff.checks.registry import guarded, registered_checks
from bakeoff.codec import Value
from bakeoff.env import Environment
from bakeoff.errors import BakeoffError, StoreError
from bakeoff.results import strictjson
from bakeoff.results.values import BaselineInfo, RunResult
from bakeoff.store.annotations import check_note_text, check_tag
from bakeoff.store.artifacts import baseline_name
from bakeoff.store.db import Store
from bakeoff.store.schema import utc_now
from bakeoff.version import __version__

__all__ = ["CSV_COLUMNS", "EXPORT_SCHEMA", "EXPORT_VERSION", "ExportSummary", "ImportSummary", "export", "import_"]

EXPORT_SCHEMA = "bakeoff.export"
EXPORT_VERSION = 1
FORMATS = ("jsonl", "csv")
# pg_advisory_xact_lock key held while importing, so concurrent imports cannot both add a note
_IMPORT_LOCK = int.from_bytes(b"bkimport", "big")
#: How deeply a record's JSON may nest (bakeoff's own documents stay under a dozen levels): a
#: deeper one is refused before the store's serialisers would run out of stack on it.
MAX_DEPTH = 100

CSV_COLUMNS = [
    "run_id",
    "created_at",
    "workload",
    "workload_fingerprint",
    "environment_fingerprint",
    "torch",
    "target",
    "variant",
    "status",
    "reason",
    "correctness",
    "max_abs_err",
    "placement",
    "device_op_share",
    "p50_ms",
    "p90_ms",
    "p99_ms",
    "samples",
    "speedup",
    "speedup_low",
    "speedup_high",
    "first_call_ms",
    "graphs",
    "recompiles",
    "peak_host_rss_bytes",
    "adjustments",
    "scenarios",
    "requirements",
    "requirements_not_met",
    "error_type",
    "error_category",
    "error_message",
    "tags",
    "notes",
]


@dataclass(frozen=True)
class ExportSummary(Value):
    path: str
    format: str
    runs: int
    baselines: int
    requirements: int
    rows: int


@dataclass(frozen=True)
class ImportSummary(Value):
    """What an import added; ``*_present`` counts what the database already had."""

    path: str
    runs: int
    runs_present: int
    baselines: int
    baselines_present: int
    requirements: int
    notes: int
    tags: int


# -- export ---------------------------------------------------------------------------------


def _selected(store: Store, workload: str | None, tag: str | None) -> list[dict[str, str]]:
    return store.run_index(workload_spec=workload, tag=tag)


def export(
    store: Store, path: str | os.PathLike[str], fmt: str = "jsonl", workload: str | None = None, tag: str | None = None
) -> ExportSummary:
    """Write the selected runs (all, one workload's, or one tag's) to ``path``.

    Raises:
        StoreError: an unknown format, or a file that cannot be written.
    """
    if fmt not in FORMATS:
        raise StoreError(f"unknown export format {fmt!r}", hint="use jsonl (for import) or csv (for spreadsheets)")
    index = _selected(store, workload, tag)
    target = Path(path)
    try:
        with target.open("w", encoding="utf-8", newline="") as out:
            if fmt == "csv":
                rows = _write_csv(store, index, out)
                return ExportSummary(str(target), fmt, len(index), 0, 0, rows)
            return _write_jsonl(store, index, out, workload, tag, str(target))
    except OSError as exc:
        raise StoreError(
            f"cannot write {target}: {exc.strerror or exc}", hint="choose a writable path with -o"
        ) from exc


def _write_jsonl(
    store: Store, index: list[dict[str, str]], out: IO[str], workload: str | None, tag: str | None, where: str
) -> ExportSummary:

    def line(record: dict[str, Any]) -> None:
        out.write(strictjson.dumps(record, sort_keys=True, separators=(",", ":")) + "\n")

    filtered = workload is not None or tag is not None
    specs = sorted({row["workload_spec"] for row in index}) if filtered else None
    requirements = store.all_requirements(specs)
    baselines = store.baselines(specs)
    line(
        {
            "schema": EXPORT_SCHEMA,
            "schema_version": EXPORT_VERSION,
            "exported_at": utc_now(),
            "bakeoff_version": __version__,
            "selection": {"workload": workload, "tag": tag},
        }
    )
    for item in requirements:
        line({"kind": "requirements", **item})
    for info, env in baselines:
        record = {**info.to_dict(), "path": baseline_name(info)}  # no path of this machine
        line({"kind": "baseline", "baseline": record, "environment": env.to_dict()})
    for row in index:
        run = store.get_run(row["id"])
        notes = [{k: v for k, v in n.to_dict().items() if k not in ("id", "run_id")} for n in store.notes(row["id"])]
        line(
            {
                "kind": "run",
                "run": run.to_dict(),
                "bakeoff_version": row["bakeoff_version"],
                "notes": notes,
                "tags": store.tags(row["id"]),
            }
        )
    return ExportSummary(where, "jsonl", len(index), len(baselines), len(requirements), len(index))


def _cell(value: Any) -> Any:
    """A CSV cell; text that a spreadsheet would run as a formula is quoted with a leading '."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def _write_csv(store: Store, index: list[dict[str, str]], out: IO[str]) -> int:
    rows, more = [], {}
    for row in index:
        run = store.get_run(row["id"])
        tags = ";".join(store.tags(row["id"]))
        notes = " | ".join(n.text for n in store.notes(row["id"]))
        for result in run.results:
            extra = _check_metrics(result)
            more.update(dict.fromkeys(extra))
            rows.append({k: _cell(v) for k, v in {**_csv_row(run, result.to_dict(), tags, notes), **extra}.items()})
    writer = csv.DictWriter(out, fieldnames=[*CSV_COLUMNS, *more])
    writer.writeheader()
    writer.writerows(rows)
    return len(rows)


def _check_metrics(result: Any) -> dict[str, Any]:
    """The metrics of the result's check values that :data:`CSV_COLUMNS` does not hold, by
    name (a plugin's that fails gives none)."""
    return {
        metric.name: metric.value
        for check in registered_checks()
        if check.name in result.checks
        for metric in guarded(check, "metrics", result.checks[check.name], fallback=[])
        if metric.name not in CSV_COLUMNS and isinstance(metric.value, str | int | float | None)
    }


def _get(data: dict[str, Any] | None, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _csv_row(run: RunResult, item: dict[str, Any], tags: str, notes: str) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "created_at": run.created_at,
        "workload": run.workload.get("spec"),
        "workload_fingerprint": run.fingerprint,
        "environment_fingerprint": run.environment.fingerprint,
        "torch": run.environment.data.get("torch"),
        "target": item.get("target"),
        "variant": item.get("variant"),
        "status": item.get("status"),
        "reason": item.get("reason"),
        "correctness": _get(item, "correctness", "verdict"),
        "max_abs_err": _get(item, "correctness", "max_abs_err"),
        "placement": _get(item, "placement", "verdict"),
        "device_op_share": _get(item, "placement", "device_op_share"),
        "p50_ms": _get(item, "latency", "p50_ms"),
        "p90_ms": _get(item, "latency", "p90_ms"),
        "p99_ms": _get(item, "latency", "p99_ms"),
        "samples": _get(item, "latency", "samples"),
        "speedup": item.get("speedup"),
        "speedup_low": _get(item, "speedup_ci", "low"),
        "speedup_high": _get(item, "speedup_ci", "high"),
        "first_call_ms": item.get("first_call_ms"),
        "graphs": _get(item, "compilation", "graphs"),
        "recompiles": _get(item, "compilation", "recompiles"),
        "peak_host_rss_bytes": item.get("peak_host_rss_bytes"),
        "adjustments": len(item.get("adjustments") or ()),
        "scenarios": "; ".join(f"{s['name']}:{s['status']}" for s in item.get("scenarios") or ()),
        "requirements": "; ".join(f"{r['text']}:{r['verdict']}" for r in item.get("requirements") or ()),
        "requirements_not_met": sum(1 for r in item.get("requirements") or () if r["verdict"] != "met"),
        "error_type": _get(item, "error", "type"),
        "error_category": _get(item, "error", "category"),
        "error_message": _get(item, "error", "message"),
        "tags": tags,
        "notes": notes,
    }


# -- import ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Records:
    requirements: list[dict[str, Any]]
    baselines: list[tuple[BaselineInfo, Environment]]
    runs: list[tuple[RunResult, str, list[dict[str, Any]], list[str]]]


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        with path.open(encoding="utf-8") as handle:
            for number, raw in enumerate(handle, start=1):
                if not raw.strip():
                    continue
                try:
                    record = strictjson.loads(raw)
                except json.JSONDecodeError as exc:
                    raise StoreError(
                        f"{path}, line {number}: not JSON ({exc.msg})",
                        hint="pass a file written by `bakeoff export --format jsonl`",
                    ) from exc
                except RecursionError as exc:
                    raise StoreError(
                        f"{path}, line {number}: nested more than {MAX_DEPTH} levels deep",
                        hint="pass a file written by `bakeoff export --format jsonl`",
                    ) from exc
                if not isinstance(record, dict):
                    raise StoreError(
                        f"{path}, line {number}: expected a JSON object",
                        hint="pass a file written by `bakeoff export --format jsonl`",
                    )
                yield number, record
    except FileNotFoundError as exc:
        raise StoreError(f"no file {path}", hint="pass the path of a `bakeoff export` file") from exc
    except UnicodeDecodeError as exc:
        raise StoreError(
            f"{path} is not a text file", hint="pass a file written by `bakeoff export --format jsonl`"
        ) from exc
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {exc.strerror or exc}", hint="check the path") from exc


def _depth(value: Any) -> int:
    """How deeply ``value`` nests lists and objects, counted without recursion (0 for a scalar)."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, level = pending.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, level)
        if level <= MAX_DEPTH:  # deeper is refused anyway: no need to walk on
            pending.extend((child, level + 1) for child in children)
    return deepest


def _read(path: Path) -> _Records:
    """Parse and check every line before anything is written."""
    records = _Records([], [], [])
    lines = _lines(path)
    try:
        first = next(lines, None)
    except StoreError:
        if not path.is_file():
            raise
        first = None
    if first is None or first[1].get("schema") != EXPORT_SCHEMA:
        raise StoreError(
            f"{path} is not a bakeoff export (its first line has no schema {EXPORT_SCHEMA!r})",
            hint="pass a file written by `bakeoff export --format jsonl` (CSV exports cannot be imported)",
        )
    version = first[1].get("schema_version")
    if not isinstance(version, int) or version > EXPORT_VERSION:
        raise StoreError(
            f"{path} is a bakeoff export version {version}, newer than this bakeoff reads ({EXPORT_VERSION})",
            hint="upgrade bakeoff to import it",
        )
    for number, record in lines:
        kind = record.get("kind")
        if _depth(record) > MAX_DEPTH:
            raise StoreError(
                f"{path}, line {number}: nested more than {MAX_DEPTH} levels deep",
                hint="pass a file written by `bakeoff export --format jsonl`",
            )
        try:
            if kind == "run":
                run = RunResult.from_dict(record["run"])
                strictjson.dumps(run.to_dict())  # what the store will write must serialise
                notes = [
                    {"created_at": n["created_at"], "text": check_note_text(n["text"]), "author": n.get("author")}
                    for n in record.get("notes", [])
                ]
                tags = [check_tag(t) for t in record.get("tags", [])]
                records.runs.append((run, str(record.get("bakeoff_version") or "unknown"), notes, tags))
            elif kind == "baseline":
                info = BaselineInfo.from_dict(record["baseline"])
                try:
                    baseline_name(info)  # its tensors may only ever be looked for inside the artifact store
                except StoreError as exc:
                    raise StoreError(f"{path}, line {number}: {exc.message}", hint=exc.hint) from exc
                env = Environment.from_dict(record["environment"])
                strictjson.dumps([info.to_dict(), env.to_dict()])
                records.baselines.append((info, env))
            elif kind == "requirements":
                records.requirements.append(
                    {
                        "workload_spec": str(record["workload_spec"]),
                        "updated_at": str(record["updated_at"]),
                        "texts": [str(t) for t in record["texts"]],
                    }
                )
            else:
                raise StoreError(
                    f"{path}, line {number}: unknown record kind {kind!r}",
                    hint="pass a file written by `bakeoff export --format jsonl`",
                )
        except StoreError:
            raise
        except BakeoffError as exc:  # a run document newer than this release, a bad tag or note
            raise StoreError(f"{path}, line {number}: {exc.message}", hint=exc.hint) from exc
        except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as exc:
            raise StoreError(
                f"{path}, line {number}: a {kind} record is incomplete or malformed ({type(exc).__name__}: {exc})",
                hint="pass a file written by `bakeoff export --format jsonl`",
            ) from exc
    return records


def import_(store: Store | Callable[[], Store], path: str | os.PathLike[str]) -> ImportSummary:
    """Add the runs, baselines, requirements, notes and tags of an export that ``store`` lacks.

    ``store`` may be a callable that opens it: called only after the whole file was checked,
    so a refused file leaves no new database behind.

    Raises:
        StoreError: the file is missing, not an export, newer than this release, or malformed
            (nothing is written then), or the database refuses the write.
    """
    source = Path(path)
    records = _read(source)
    if callable(store):
        store = store()
    keys = ("runs", "runs_present", "baselines", "baselines_present", "requirements", "notes", "tags")
    counts = dict.fromkeys(keys, 0)
    try:
        with store.exclusive_transaction(_IMPORT_LOCK) as conn:
            for item in records.requirements:
                counts["requirements"] += store.merge_requirements(conn, **item)
            for info, env in records.baselines:
                added = store.insert_baseline_unless_exists(conn, info, env)
                counts["baselines" if added else "baselines_present"] += 1
            for run, version, notes, tags in records.runs:
                added = store.insert_run_unless_exists(conn, run, version)
                counts["runs" if added else "runs_present"] += 1
                counts["notes"] += store.merge_notes(conn, run.run_id, notes)
                counts["tags"] += store.merge_tags(conn, run.run_id, tags)
    except DBAPIError as exc:
        detail = str(exc.orig).strip().splitlines()[0]
        hint = "a run refers to a baseline the file and the database lack: export it with its baselines"
        if "foreign key" not in detail.lower():
            hint = "check the database; nothing from the file was imported"
        raise StoreError(f"cannot import {source} into {store.display_url}: {detail}", hint=hint) from exc
    return ImportSummary(path=str(source), **counts)
