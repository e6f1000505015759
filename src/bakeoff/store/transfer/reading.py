"""Reading an export file for import: every line parsed and checked before anything is written.

:func:`read` refuses a path that is not a regular file, a file or a line past its size cap
(:data:`MAX_FILE_BYTES`, :data:`MAX_LINE_BYTES`), a record nested too deep, a text past its cap
(:data:`MAX_TEXT_CHARS`, and a note's), an integer no database column holds, a header that is not
an export's or is newer than this release, a malformed record, and a run or baseline id the file
uses for two contents. :func:`present` then finds which of the file's runs and baselines the
database holds already, and refuses one it holds with other content.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable, Generator, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from sqlalchemy import select

from bakeoff.env import Environment
from bakeoff.errors import BakeoffError, StoreError
from bakeoff.results import strictjson
from bakeoff.results.values import BaselineInfo, RunResult
from bakeoff.store import schema
from bakeoff.store.annotations import MAX_NOTE_CHARS, check_note_text, check_tag
from bakeoff.store.artifacts import baseline_name
from bakeoff.store.db import Store
from bakeoff.store.transfer.exporting import EXPORT_SCHEMA, EXPORT_VERSION

__all__ = ["MAX_DEPTH", "MAX_FILE_BYTES", "MAX_LINE_BYTES", "MAX_TEXT_CHARS", "present", "read"]

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
_FROM_EXPORT = "pass a file written by `bakeoff export --format jsonl`"
#: The largest speed-up an imported result may say: a million times the reference's speed is
#: past any engine's; a larger figure (1e300, Infinity) is no measurement's.
MAX_SPEEDUP = 1e6


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
                text = raw.decode("utf-8-sig" if number == 1 else "utf-8")  # an editor's byte-order mark
                if text.strip():
                    yield number, text
        except UnicodeDecodeError as exc:  # a binary file, or one an editor saved in another encoding
            raise StoreError(
                f"{path} is not UTF-8 text: line {number}, byte {exc.start + 1} of it is 0x{exc.object[exc.start]:02x}",
                hint=_FROM_EXPORT,
            ) from exc
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
    _timestamp(path, number, f"run {run.run_id}'s created_at", run.created_at)
    workload = run.workload
    if not isinstance(workload, dict) or not all(isinstance(workload.get(k), str) for k in ("spec", "kind")):
        raise _refused(path, number, f"run {run.run_id}'s workload has no spec and kind as text")
    for result in run.results:
        problem = _timing_problem(result)
        if problem is not None:
            raise _refused(path, number, f"run {run.run_id}'s target {result.target.spec}: {problem}")
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
        created = _timestamp(path, number, "a note's created_at", note["created_at"])
        notes.append({"created_at": created, "text": text, "author": note.get("author")})
    tags = [check_tag(t) for t in record.get("tags", [])]
    return run, str(record.get("bakeoff_version") or "unknown"), notes, tags


def _timing_problem(result: Any) -> str | None:
    """Why a result's timing figures are none a measurement gives, else None: a latency that is
    not a finite, non-negative time, or a speed-up or break-even that is not a finite positive
    (non-negative) number. Another engine's figures are never judged here, only their range:
    a speed-up of 1e300 or Infinity would be printed as a measured one."""
    import math

    def finite(value: Any) -> bool:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)

    samples = result.latency.samples_ms if result.latency is not None else ()
    if not all(finite(v) and v >= 0 for v in samples):
        return "a latency sample that is not a time in milliseconds (finite, not negative)"
    if result.speedup is not None and not (finite(result.speedup) and 0 < result.speedup <= MAX_SPEEDUP):
        return f"speedup {json.dumps(result.speedup)[:40]} is not one a measurement gives (above 0, at most 1e6)"
    for name in ("first_call_ms", "break_even_requests"):
        value = getattr(result, name)
        if value is not None and not (finite(value) and value >= 0):
            return f"{name} {json.dumps(value)[:40]} is not a finite, non-negative number"
    return None


def _timestamp(path: Path, number: int, what: str, value: Any) -> str:
    """``value``, an ISO 8601 time as bakeoff writes them; refused otherwise (a text such as
    "yesterday" would be listed, and sorted, as a time)."""
    import datetime

    try:
        parsed = datetime.datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        parsed = None
    if parsed is None:
        raise _refused(path, number, f"{what} {json.dumps(value)[:40]} is not an ISO 8601 time")
    return value


def _requirements_record(path: Path, number: int, record: dict[str, Any]) -> dict[str, Any]:
    """A workload's kept requirements, each text one that ``--require`` takes."""
    from bakeoff.metrics import parse_requirement

    spec, texts = record["workload_spec"], record["texts"]
    if not isinstance(spec, str) or not spec.strip():
        raise _refused(path, number, f"a requirements record names no workload (workload_spec {json.dumps(spec)[:40]})")
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise _refused(
            path, number, f"a requirements record's texts are not a list of texts ({json.dumps(texts)[:40]})"
        )
    for text in texts:
        try:
            parse_requirement(text)
        except BakeoffError as exc:
            raise _refused(
                path, number, f"requirement {text[:40]!r}: {exc.message}", hint=exc.hint or _FROM_EXPORT
            ) from exc
    return {"workload_spec": spec, "updated_at": _timestamp(path, number, "updated_at", record["updated_at"]),
            "texts": texts}  # fmt: skip


#: ``check(runs)``: raises where runs read from a file cannot be used as stored ones are (shown,
#: reported): the caller's, which knows what reads runs.
RunCheck = Callable[[list[RunResult]], None]


def read(path: Path, check: RunCheck | None = None) -> _Records:
    """Parse and check every line before anything is written; the runs also by ``check``."""
    with closing(_lines(path)) as lines:
        _check_header(path, next(lines, None))
        records = _records(path, lines)
    if check is not None and records.runs:
        _checked(path, [(number, run) for number, run, *_ in records.runs], check)
    return records


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
                records.requirements.append(_requirements_record(path, number, record))
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


def _checked(path: Path, runs: list[tuple[int, RunResult]], check: RunCheck) -> None:
    """``check`` of all ``runs`` at once (a report of them all); where that fails, of each alone,
    to name the line: a value of the wrong kind that reading let through would break every
    later ``show`` or report that reaches the run."""
    try:
        check([run for _, run in runs])
        return
    except Exception:  # whatever a value of the wrong kind breaks in the code that reads it
        pass
    for number, run in runs:
        try:
            check([run])
        except Exception as exc:
            why = f"{type(exc).__name__}: {str(exc)[:120]}"
            raise _refused(path, number, f"run {run.run_id} has a value of the wrong kind ({why})") from exc
    raise StoreError(f"{path}: its runs cannot be reported together", hint="import them from separate files")


def _stored_ids(store: Store, column: Any, ids: list[str]) -> set[str]:
    found: set[str] = set()
    with store.engine.connect() as conn:
        for start in range(0, len(ids), 500):
            found.update(conn.execute(select(column).where(column.in_(ids[start : start + 500]))).scalars())
    return found


def present(store: Store, records: _Records, path: Path, db_flag: str = "") -> tuple[set[str], set[str]]:
    """The ids of the file's runs and baselines the database holds already, with the same
    content; one it holds with other content is refused before anything is written (the hint's
    ``bakeoff show`` carries ``db_flag``, the ``--db`` that reads this database)."""
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
                    hint=f"nothing was imported: compare the stored run (`bakeoff show {run.run_id}{db_flag}`) "
                    "with the file's and keep one",
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
