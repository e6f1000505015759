"""Export: a knowledge base's selected runs written to a JSON-lines file (for import) or a CSV table.

The JSON-lines file is the format :mod:`bakeoff.store.transfer` describes: a header line
(:data:`EXPORT_SCHEMA`, :data:`EXPORT_VERSION`), then the requirements, the baselines' metadata
and the runs with their notes and tags, one record a line. The CSV is a flat table for
spreadsheets, one row per run and target: :data:`CSV_COLUMNS` first, then one column per further
metric the registered checks offer; text a spreadsheet would run as a formula is quoted.
"""

from __future__ import annotations

import csv
import functools
import os
from dataclasses import dataclass
from typing import IO, Any

from bakeoff.analysis.requirements import requirement_state
from bakeoff.checks.registry import guarded, registered_checks
from bakeoff.codec import Value
from bakeoff.errors import StoreError
from bakeoff.outfiles import replacing
from bakeoff.results import strictjson
from bakeoff.results.values import RunResult
from bakeoff.store.artifacts import baseline_name
from bakeoff.store.db import Store
from bakeoff.store.schema import utc_now
from bakeoff.store.selection import no_runs
from bakeoff.version import __version__

__all__ = ["CSV_COLUMNS", "EXPORT_SCHEMA", "EXPORT_VERSION", "FORMATS", "ExportSummary", "export", "keep_unsaved"]

EXPORT_SCHEMA = "bakeoff.export"
EXPORT_VERSION = 1
FORMATS = ("jsonl", "csv")

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


def _selected(store: Store, workload: str | None, tag: str | None) -> list[dict[str, str]]:
    return store.run_index(workload_spec=workload, tag=tag)


def export(
    store: Store, path: str | os.PathLike[str], fmt: str = "jsonl", workload: str | None = None, tag: str | None = None
) -> ExportSummary:
    """Write the selected runs (all, one workload's, or one tag's) to ``path``.

    Raises:
        StoreError: an unknown format, a tag or workload no stored run has (nothing is written,
            as the report refuses them), or a file that cannot be written.
    """
    if fmt not in FORMATS:
        raise StoreError(f"unknown export format {fmt!r}", hint="use jsonl (for import) or csv (for spreadsheets)")
    index = _selected(store, workload, tag)
    if not index and (workload is not None or tag is not None):
        raise no_runs(store, workload, tag)
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

    line = functools.partial(_line, out)
    filtered = workload is not None or tag is not None
    specs = sorted({row["workload_spec"] for row in index}) if filtered else None
    requirements = store.all_requirements(specs)
    baselines = store.baselines(specs)
    line(_header(workload, tag))
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


def _header(workload: str | None, tag: str | None) -> dict[str, Any]:
    """An export's first line: the format, when, by which release, and what was selected."""
    return {
        "schema": EXPORT_SCHEMA,
        "schema_version": EXPORT_VERSION,
        "exported_at": utc_now(),
        "bakeoff_version": __version__,
        "selection": {"workload": workload, "tag": tag},
    }


def _line(out: IO[str], record: dict[str, Any]) -> None:
    out.write(strictjson.dumps(record, sort_keys=True, separators=(",", ":")) + "\n")


def keep_unsaved(run: RunResult, path: str | os.PathLike[str]) -> None:
    """Write ``run`` alone as an export file at ``path`` (written whole or not at all), for a
    database that could not take it: ``bakeoff import`` stores it later (its baseline, stored
    before the run was measured, is not in it)."""
    record = {"kind": "run", "run": run.to_dict(), "bakeoff_version": __version__, "notes": [], "tags": []}
    with replacing(path, None, newline="") as out:
        for item in (_header(None, None), record):
            _line(out, item)


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
        # in the words every report uses: an interval straddling the limit is not conclusive, never met
        "requirements": "; ".join(f"{r['text']}:{requirement_state(r)}" for r in item.get("requirements") or ()),
        "requirements_not_met": sum(1 for r in item.get("requirements") or () if requirement_state(r) != "met"),
        "error_type": _get(item, "error", "type"),
        "error_category": _get(item, "error", "category"),
        "error_message": _get(item, "error", "message"),
        "tags": tags,
        "notes": notes,
    }
