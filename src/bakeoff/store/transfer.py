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
"""

from __future__ import annotations

import csv
import json
import os
import re
import stat
from collections.abc import Callable, Generator, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from sqlalchemy import insert, select
from sqlalchemy.exc import DBAPIError

from bakeoff.checks.registry import guarded, registered_checks
from bakeoff.codec import Value
from bakeoff.env import Environment
from bakeoff.errors import BakeoffError, SpecError, StoreError
from bakeoff.outfiles import replacing
from bakeoff.results import strictjson
from bakeoff.results.values import BaselineInfo, RunResult
from bakeoff.store import schema
from bakeoff.store.annotations import MAX_NOTE_CHARS, check_note_text, check_tag
from bakeoff.store.artifacts import baseline_name
from bakeoff.store.db import Store
from bakeoff.store.schema import utc_now
from bakeoff.version import __version__

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

EXPORT_SCHEMA = "bakeoff.export"
EXPORT_VERSION = 1
FORMATS = ("jsonl", "csv")
# pg_advisory_xact_lock key held while importing, so concurrent imports cannot both add a note
_IMPORT_LOCK = int.from_bytes(b"bkimport", "big")
#: How deeply a record's JSON may nest (bakeoff's own documents stay under a dozen levels): a
#: deeper one is refused before the store's serialisers would run out of stack on it.
MAX_DEPTH = 100
#: The largest file an import reads (a larger team database is exported in parts, by tag or
#: workload): every record is held in memory until the whole file has been checked.
MAX_FILE_BYTES = 512 * 2**20
#: The longest line (one record): a run of many targets with ten thousand samples each is a few MiB.
MAX_LINE_BYTES = 64 * 2**20
#: The longest text anywhere in a record (a key or a value): bakeoff's own are error tails and
#: library logs of a few KiB.
MAX_TEXT_CHARS = 2**20
#: Integers a database column holds: a larger one would fail the write, or read back changed.
_INT_RANGE = range(-(2**63), 2**63)
#: What a run id may be (bakeoff's are 12 hex digits): it is printed, matched as a prefix and
#: used in keys, so it holds no markup, control or wildcard characters.
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,31}")
#: Workload kinds bakeoff builds from its own code: the only imported runs ``rerun`` repeats.
RERUNNABLE_WHEN_IMPORTED = frozenset({"arch"})
_FROM_EXPORT = "pass a file written by `bakeoff export --format jsonl`"
# the meta row that records where an imported run came from: its key is this and the run id
_IMPORTED_KEY = "imported:"

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
    try:  # written whole or not at all, and never over the database (replacing refuses it first)
        with replacing(path, store.url, newline="") as out:
            if fmt == "csv":
                rows = _write_csv(store, index, out)
                summary = ExportSummary(str(path), fmt, len(index), 0, 0, rows)
            else:
                summary = _write_jsonl(store, index, out, workload, tag, str(path))
        return summary
    except OSError as exc:
        raise StoreError(f"cannot write {path}: {exc.strerror or exc}", hint="choose a writable path with -o") from exc


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
    """What a file holds, checked, each record with its line number."""

    requirements: list[dict[str, Any]]
    baselines: list[tuple[int, BaselineInfo, Environment]]
    runs: list[tuple[int, RunResult, str, list[dict[str, Any]], list[str]]]


def _refused(path: Path, number: int, what: str, hint: str = _FROM_EXPORT) -> StoreError:
    return StoreError(f"{path}, line {number}: {what}", hint=hint)


def _too_big(path: Path, size: int) -> StoreError:
    return StoreError(
        f"{path} is {size} bytes, more than an import reads ({MAX_FILE_BYTES})",
        hint="export it in parts: `bakeoff export --tag NAME` or `--workload SPEC`",
    )


def _open(path: Path) -> IO[bytes]:
    """``path`` open for reading, if it is a regular file no larger than :data:`MAX_FILE_BYTES`.

    Opened without waiting (opening a FIFO waits for a writer), then checked through the open
    descriptor, so the file read is the file checked.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError as exc:
        raise StoreError(f"no file {path}", hint="pass the path of a `bakeoff export` file") from exc
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {exc.strerror or exc}", hint="check the path") from exc
    handle = os.fdopen(fd, "rb")
    size = os.fstat(fd)
    if not stat.S_ISREG(size.st_mode):
        handle.close()
        raise StoreError(f"{path} is not a regular file", hint=_FROM_EXPORT)
    if size.st_size > MAX_FILE_BYTES:
        handle.close()
        raise _too_big(path, size.st_size)
    return handle


def _lines(path: Path) -> Generator[tuple[int, str], None, None]:
    """The file's non-blank lines with their numbers, each within :data:`MAX_LINE_BYTES`."""
    with _open(path) as handle:
        number = read = 0
        try:
            while raw := handle.readline(MAX_LINE_BYTES + 1):
                number += 1
                read += len(raw)
                if read > MAX_FILE_BYTES:  # it grew while it was read
                    raise _too_big(path, read)
                if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                    raise _refused(path, number, f"longer than {MAX_LINE_BYTES} bytes")
                text = raw.decode("utf-8")
                if text.strip():
                    yield number, text
        except UnicodeDecodeError as exc:
            raise StoreError(f"{path} is not a text file", hint=_FROM_EXPORT) from exc
        except OSError as exc:
            raise StoreError(f"cannot read {path}: {exc.strerror or exc}", hint="check the path") from exc


def _problem(value: Any) -> str | None:
    """Why a parsed record is one no import takes, walked without recursion: nested past
    :data:`MAX_DEPTH`, an integer no database column holds, a text (key or value) past
    :data:`MAX_TEXT_CHARS`; None when it is none of these."""
    pending = [(value, 1)]
    while pending:
        item, level = pending.pop()
        if isinstance(item, str):
            if len(item) > MAX_TEXT_CHARS:
                return f"a text of {len(item)} characters, more than {MAX_TEXT_CHARS}"
        elif isinstance(item, int) and not isinstance(item, bool):
            if item not in _INT_RANGE:
                return "an integer beyond 64 bits"
        elif isinstance(item, dict | list):
            if level > MAX_DEPTH:
                return f"nested more than {MAX_DEPTH} levels deep"
            children = [*item, *item.values()] if isinstance(item, dict) else item
            pending.extend((child, level + 1) for child in children)
    return None


def _parse(path: Path, number: int, text: str) -> dict[str, Any]:
    try:
        record = strictjson.loads(text)
    except json.JSONDecodeError as exc:
        raise _refused(path, number, f"not JSON ({exc.msg})") from exc
    except RecursionError as exc:
        raise _refused(path, number, f"nested more than {MAX_DEPTH} levels deep") from exc
    except ValueError as exc:  # an integer of more digits than Python converts
        raise _refused(path, number, "an integer beyond 64 bits") from exc
    if not isinstance(record, dict):
        raise _refused(path, number, "expected a JSON object")
    problem = _problem(record)
    if problem is not None:
        raise _refused(path, number, problem)
    return record


def _check_header(path: Path, first: tuple[int, str] | None) -> None:
    number, text = first if first is not None else (1, "")
    try:
        record = strictjson.loads(text)
    except (ValueError, RecursionError):  # a CSV export, or any other text
        record = None
    if not isinstance(record, dict) or record.get("schema") != EXPORT_SCHEMA:
        raise StoreError(
            f"{path} is not a bakeoff export (its first line has no schema {EXPORT_SCHEMA!r})",
            hint=f"{_FROM_EXPORT} (CSV exports cannot be imported)",
        )
    problem = _problem(record)
    if problem is not None:
        raise _refused(path, number, problem)
    version = record.get("schema_version")
    if type(version) is not int or version < 1:  # true is no version, nor is "1"
        raise StoreError(
            f"{path} has schema_version {json.dumps(version)[:40]}, which no bakeoff export has", hint=_FROM_EXPORT
        )
    if version > EXPORT_VERSION:
        raise StoreError(
            f"{path} is a bakeoff export version {version}, newer than this bakeoff reads ({EXPORT_VERSION})",
            hint="upgrade bakeoff to import it",
        )


def _canonical(value: Any) -> str:
    """A document as one text, to tell two documents of one id apart."""
    return strictjson.dumps(value, sort_keys=True, separators=(",", ":"))


def _baseline_document(info: BaselineInfo, env: Environment) -> str:
    # the stored path is always the artifact store's name for it, whatever a file said
    return _canonical([{**info.to_dict(), "path": baseline_name(info), "sha256": info.sha256 or None}, env.fingerprint])


def _once(path: Path, number: int, noun: str, key: str, document: str, seen: dict[str, tuple[int, str]]) -> None:
    """Remember that line ``number`` holds ``document`` under ``key``; refuse a second, other one."""
    first = seen.setdefault(key, (number, document))
    if first[1] != document:
        raise _refused(
            path,
            number,
            f"{noun} {key} appears again with other content (first on line {first[0]})",
            hint=f"nothing was imported: one {noun} id names one {noun}; keep one of the two lines",
        )


def _run_record(
    path: Path, number: int, record: dict[str, Any]
) -> tuple[RunResult, str, list[dict[str, Any]], list[str]]:
    run = RunResult.from_dict(record["run"])
    if not _RUN_ID.fullmatch(run.run_id):
        raise _refused(
            path, number, f"run id {run.run_id[:40]!r} is not one bakeoff makes (up to 32 letters and digits)"
        )
    notes = []
    for note in record.get("notes", []):
        text = str(note["text"]).strip()
        if len(text) > MAX_NOTE_CHARS:
            raise _refused(
                path,
                number,
                f"a note of {len(text)} characters, more than {MAX_NOTE_CHARS}",
                hint="shorten the note in the file, or keep the text elsewhere and note where",
            )
        text = check_note_text(text)
        notes.append({"created_at": note["created_at"], "text": text, "author": note.get("author")})
    tags = [check_tag(t) for t in record.get("tags", [])]
    return run, str(record.get("bakeoff_version") or "unknown"), notes, tags


def _read(path: Path) -> _Records:
    """Parse and check every line before anything is written."""
    with closing(_lines(path)) as lines:
        _check_header(path, next(lines, None))
        return _records(path, lines)


def _records(path: Path, lines: Iterator[tuple[int, str]]) -> _Records:
    records = _Records([], [], [])
    runs_seen: dict[str, tuple[int, str]] = {}
    baselines_seen: dict[str, tuple[int, str]] = {}
    for number, text in lines:
        record = _parse(path, number, text)
        kind = record.get("kind")
        try:
            if kind == "run":
                run, version, notes, tags = _run_record(path, number, record)
                # what the store will write must serialise
                _once(path, number, "run", run.run_id, _canonical(run.to_dict()), runs_seen)
                records.runs.append((number, run, version, notes, tags))
            elif kind == "baseline":
                info = BaselineInfo.from_dict(record["baseline"])
                try:
                    baseline_name(info)  # its tensors may only ever be looked for inside the artifact store
                except StoreError as exc:
                    raise _refused(path, number, exc.message, hint=exc.hint or _FROM_EXPORT) from exc
                env = Environment.from_dict(record["environment"])
                strictjson.dumps([info.to_dict(), env.to_dict()])
                _once(path, number, "baseline", info.id, _baseline_document(info, env), baselines_seen)
                records.baselines.append((number, info, env))
            elif kind == "requirements":
                records.requirements.append(
                    {
                        "workload_spec": str(record["workload_spec"]),
                        "updated_at": str(record["updated_at"]),
                        "texts": [str(t) for t in record["texts"]],
                    }
                )
            else:
                raise _refused(path, number, f"unknown record kind {str(kind)[:40]!r}")
        except StoreError:
            raise
        except BakeoffError as exc:  # a run document newer than this release, a bad tag or note
            raise StoreError(f"{path}, line {number}: {exc.message}", hint=exc.hint) from exc
        except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as exc:
            raise _refused(
                path, number, f"a {kind} record is incomplete or malformed ({type(exc).__name__}: {exc})"
            ) from exc
    return records


def _stored_ids(store: Store, column: Any, ids: list[str]) -> set[str]:
    found: set[str] = set()
    with store.engine.connect() as conn:
        for start in range(0, len(ids), 500):
            found.update(conn.execute(select(column).where(column.in_(ids[start : start + 500]))).scalars())
    return found


def _present(store: Store, records: _Records, path: Path) -> tuple[set[str], set[str]]:
    """The ids of the file's runs and baselines the database holds already, with the same
    content; one it holds with other content is refused before anything is written."""
    runs = _stored_ids(store, schema.runs.c.id, [run.run_id for _, run, *_ in records.runs])
    compared: set[str] = set()
    for number, run, *_ in records.runs:
        if run.run_id in runs and run.run_id not in compared:
            compared.add(run.run_id)
            if _canonical(store.get_run(run.run_id).to_dict()) != _canonical(run.to_dict()):
                raise _refused(
                    path,
                    number,
                    f"run {run.run_id} is in the database with other content",
                    hint=f"nothing was imported: compare the stored run (`bakeoff show {run.run_id}`) with the "
                    "file's and keep one",
                )
    baselines = _stored_ids(store, schema.baselines.c.id, [info.id for _, info, _ in records.baselines])
    if baselines:
        stored = {info.id: _baseline_document(info, env) for info, env in store.baselines() if info.id in baselines}
        for number, info, env in records.baselines:
            if info.id in stored and stored[info.id] != _baseline_document(info, env):
                raise _refused(
                    path,
                    number,
                    f"baseline {info.id} is in the database with other content",
                    hint="nothing was imported: a baseline id names one baseline; export the runs without it, "
                    "or import into another database",
                )
    return runs, baselines


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
    for kind in (run.workload.get("kind"), str(run.workload.get("spec", "")).partition(":")[0]):
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


_CODE_KINDS = {"script": "a script", "py": "a py: module", "hf": "a model directory"}


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
    exe = "`bakeoff exec`" if kind == "script" else "`bakeoff trial`"
    raise SpecError(
        f"run {run.run_id} was imported from {origin.get('file')} and its workload is {what}: "
        "code that came in an import is never run again",
        hint=f"read it with `bakeoff show {run.run_id}`; if you trust it, run it yourself with {exe}",
    )


def import_(store: Store | Callable[[], Store], path: str | os.PathLike[str]) -> ImportSummary:
    """Add the runs, baselines, requirements, notes and tags of an export that ``store`` lacks.

    ``store`` may be a callable that opens it: called only after the whole file was checked,
    so a refused file leaves no new database behind. Every run added is recorded as imported
    (:func:`imported_from`); those whose workload names code are listed in the summary's
    ``not_rerunnable`` (:func:`check_rerunnable` refuses them).

    Raises:
        StoreError: the file is missing, not a regular file, past a size cap, not an export,
            newer than this release, or malformed, or it gives a run or baseline id that the
            file or the database already uses for other content (nothing is written then), or
            the database refuses the write.
    """
    source = Path(path)
    records = _read(source)
    if callable(store):
        store = store()
    runs_present, baselines_present = _present(store, records, source)
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
