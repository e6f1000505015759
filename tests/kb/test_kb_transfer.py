"""Export and import: findings move from a laptop's SQLite to the team's PostgreSQL and back, intact."""

from __future__ import annotations

import csv
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import func, select
from tests.conftest import bakeoff_cli
from tests.kb.runs import environment, recorded_baseline, recorded_run, variant

from bakeoff.errors import StoreError
from bakeoff.store import Store
from bakeoff.store import schema as tables
from bakeoff.store.transfer import CSV_COLUMNS, EXPORT_VERSION, export, import_

COUNTED = (tables.runs, tables.target_results, tables.timing_samples, tables.environments, tables.baselines)


def bakeoff(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return bakeoff_cli(*args, cwd=cwd, timeout=120)


def _counts(store: Store) -> list[int]:
    with store.engine.connect() as conn:
        tables_ = (*COUNTED, tables.run_notes, tables.run_tags, tables.requirements)
        return [int(conn.execute(select(func.count()).select_from(t)).scalar_one()) for t in tables_]


def _laptop(path: Path) -> Store:
    """A SQLite knowledge base with what a team wants to share: runs in two environments, a
    baseline, requirements, notes and tags."""
    store = Store.open(path)
    first = recorded_run(0)
    store.save_baseline(recorded_baseline(), first.environment)
    store.save_run(first)
    store.save_run(recorded_run(1))
    store.save_run(variant("c0ffee000001", env=environment(1), created_at="2026-12-01T00:00:00+00:00"))
    store.save_run(variant("c0ffee000002", env=environment(2), created_at="2026-12-02T00:00:00+00:00"))
    store.save_requirements("arch:llama", ["p90<=50ms"], "2026-01-01T00:00:00+00:00")
    store.add_note(first.run_id, "first try on the new driver", author="ana")
    store.add_note(first.run_id, 'OOM at batch 8 <script>alert("x")</script>', author=None)
    store.add_note("c0ffee000002", '=HYPERLINK("http://example.invalid")', author="bo")
    store.add_tag(first.run_id, "driver-560")
    store.add_tag("c0ffee000002", "driver-560")
    store.add_tag("c0ffee000002", "torch-2.13")
    return store


def _same_content(a: Store, b: Store) -> None:
    ids = [s.run_id for s in a.list_runs(limit=100)]
    assert [s.run_id for s in b.list_runs(limit=100)] == ids
    for run_id in ids:
        assert b.get_run(run_id) == a.get_run(run_id)
        strip = lambda notes: [(n.created_at, n.text, n.author) for n in notes]  # noqa: E731 (ids are per database)
        assert strip(b.notes(run_id)) == strip(a.notes(run_id))
        assert b.tags(run_id) == a.tags(run_id)
    assert b.baselines() == a.baselines()
    assert b.all_requirements() == a.all_requirements()


def test_round_trip_sqlite_to_postgresql_to_sqlite(pg_url: str, tmp_path: Path) -> None:
    laptop = _laptop(tmp_path / "laptop.db")
    out = tmp_path / "laptop.jsonl"
    summary = export(laptop, out)
    assert (summary.runs, summary.baselines, summary.requirements) == (4, 1, 1)

    team = Store.open(pg_url)
    added = import_(team, out)
    assert (added.runs, added.runs_present, added.baselines, added.requirements, added.notes, added.tags) == (
        4,
        0,
        1,
        1,
        3,
        3,
    )
    _same_content(laptop, team)
    before = _counts(team)
    again = import_(team, out)  # importing twice adds nothing
    assert (again.runs, again.runs_present, again.baselines, again.notes, again.tags, again.requirements) == (
        0,
        4,
        0,
        0,
        0,
        0,
    )
    assert _counts(team) == before

    back = tmp_path / "team.jsonl"
    export(team, back)
    # what the team's server exports is, record for record, what the laptop exported
    assert out.read_text().splitlines()[1:] == back.read_text().splitlines()[1:]
    other = Store.open(tmp_path / "other-laptop.db")
    import_(other, back)
    _same_content(laptop, other)


def test_import_merges_new_notes_and_tags_into_runs_already_present(tmp_path: Path) -> None:
    laptop = _laptop(tmp_path / "laptop.db")
    team = Store.open(tmp_path / "team.db")
    import_(team, export(laptop, tmp_path / "1.jsonl").path)
    laptop.add_note("c0ffee000001", "rerun after the firmware update")
    laptop.add_tag("c0ffee000001", "firmware-2")
    laptop.save_requirements("arch:llama", ["p90<=40ms"], "2026-02-01T00:00:00+00:00")
    added = import_(team, export(laptop, tmp_path / "2.jsonl").path)
    assert (added.runs, added.runs_present, added.notes, added.tags, added.requirements) == (0, 4, 1, 1, 1)
    assert [n.text for n in team.notes("c0ffee000001")] == ["rerun after the firmware update"]
    assert team.requirements("arch:llama") == ["p90<=40ms"]
    # an older requirements record does not replace a newer one
    team.save_requirements("arch:llama", ["p90<=30ms"], "2026-03-01T00:00:00+00:00")
    assert import_(team, tmp_path / "2.jsonl").requirements == 0
    assert team.requirements("arch:llama") == ["p90<=30ms"]


def test_export_by_tag_carries_what_its_runs_need(tmp_path: Path) -> None:
    laptop = _laptop(tmp_path / "laptop.db")
    out = tmp_path / "tagged.jsonl"
    assert export(laptop, out, tag="driver-560").runs == 2
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert records[0]["selection"] == {"workload": None, "tag": "driver-560"}
    assert [r["kind"] for r in records[1:]] == ["requirements", "baseline", "run", "run"]
    fresh = Store.open(tmp_path / "fresh.db")
    import_(fresh, out)  # the first run's baseline came along: no dangling reference
    assert [s.run_id for s in fresh.list_runs()] == ["c0ffee000002", recorded_run(0).run_id]
    assert fresh.get_run(recorded_run(0).run_id).baseline_id == recorded_baseline().id


def _export_lines(tmp_path: Path) -> list[dict]:
    laptop = _laptop(tmp_path / "laptop.db")
    out = tmp_path / "x.jsonl"
    export(laptop, out)
    return [json.loads(line) for line in out.read_text().splitlines()]


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_newer_export_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    records = _export_lines(tmp_path)
    records[0]["schema_version"] = EXPORT_VERSION + 1
    path = _write(tmp_path / "newer.jsonl", records)
    target = tmp_path / "target.db"
    done = bakeoff("import", str(path), "--db", str(target), cwd=tmp_path)
    assert (done.returncode, done.stderr.strip()) == (
        2,
        f"bakeoff: error: {path} is a bakeoff export version {EXPORT_VERSION + 1}, newer than this bakeoff reads "
        f"({EXPORT_VERSION}) (upgrade bakeoff to import it)",
    )


def test_newer_run_document_is_refused_with_its_line(tmp_path: Path) -> None:
    records = _export_lines(tmp_path)
    last = len(records)
    records[-1]["run"]["schema_version"] = 99
    path = _write(tmp_path / "newer-run.jsonl", records)
    store = Store.open(tmp_path / "target.db")
    with pytest.raises(StoreError) as info:
        import_(store, path)
    assert info.value.one_line() == (
        f"{path}, line {last}: run document schema version 99 is newer than this bakeoff understands (1) "
        "(upgrade bakeoff to read it)"
    )
    assert _counts(store) == [0] * 8  # the earlier, valid lines were not imported either


def test_csv_is_not_an_export_to_import(tmp_path: Path) -> None:
    laptop = _laptop(tmp_path / "laptop.db")
    path = tmp_path / "runs.csv"
    export(laptop, path, fmt="csv")
    with pytest.raises(StoreError) as info:
        import_(Store.open(tmp_path / "t.db"), path)
    assert info.value.one_line() == (
        f"{path} is not a bakeoff export (its first line has no schema 'bakeoff.export') "
        "(pass a file written by `bakeoff export --format jsonl` (CSV exports cannot be imported))"
    )


def test_csv_is_one_row_per_run_and_target(tmp_path: Path) -> None:
    laptop = _laptop(tmp_path / "laptop.db")
    stored = [s.run_id for s in laptop.list_runs(limit=100)]
    path = tmp_path / "runs.csv"
    done = bakeoff(
        "export", "--format", "csv", "-o", str(path), "--tag", "driver-560", "--db", "laptop.db", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"exported 2 runs (4 rows) to {path}"
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    # the kept columns where they always were, then the checks' other metrics
    assert list(rows[0]) == [*CSV_COLUMNS, "host_op_calls", "host_state_copies", "graph_breaks"]
    run = recorded_run(0)
    [cpu] = [r for r in rows if r["run_id"] == run.run_id and r["target"] == "cpu"]
    assert float(cpu["p50_ms"]) == run.result("cpu").latency.p50_ms  # type: ignore[union-attr]
    assert (cpu["status"], cpu["correctness"], cpu["tags"], cpu["workload"]) == (
        "ok",
        "pass",
        "driver-560",
        "arch:llama",
    )
    assert cpu["notes"].startswith("first try on the new driver | OOM at batch 8")
    assert (cpu["host_op_calls"], cpu["graph_breaks"]) == ("0", "")  # eager: no compilation to count
    assert {r["notes"] for r in rows if r["run_id"] == "c0ffee000002"} == {'\'=HYPERLINK("http://example.invalid")'}
    assert [s.run_id for s in laptop.list_runs(limit=100)] == stored  # the export only read


def test_cli_export_and_import_say_what_they_did(tmp_path: Path) -> None:
    _laptop(tmp_path / "laptop.db")
    exported = bakeoff("export", "-o", "all.jsonl", "--db", "laptop.db", cwd=tmp_path)
    assert exported.stdout.strip() == "exported 4 runs, 1 baseline, requirements of 1 workload to all.jsonl"
    first = bakeoff("import", "all.jsonl", "--db", "team.db", cwd=tmp_path)
    assert first.stdout.strip() == (
        "imported 4 runs (0 already present), 1 baseline (0 already present), 1 requirements update, 3 notes, "
        f"3 tags into {tmp_path / 'team.db'}"
    )
    second = bakeoff("import", "all.jsonl", "--db", "team.db", "--format", "json", cwd=tmp_path)
    assert json.loads(second.stdout) == {
        "path": "all.jsonl",
        "runs": 0,
        "runs_present": 4,
        "baselines": 0,
        "baselines_present": 1,
        "requirements": 0,
        "notes": 0,
        "tags": 0,
    }
    missing = bakeoff("import", "nope.jsonl", "--db", "team.db", cwd=tmp_path)
    assert (missing.returncode, missing.stderr.strip()) == (
        2,
        "bakeoff: error: no file nope.jsonl (pass the path of a `bakeoff export` file)",
    )


def test_run_whose_baseline_is_nowhere_is_refused_and_nothing_imported(tmp_path: Path) -> None:
    records = [r for r in _export_lines(tmp_path) if r.get("kind") != "baseline"]
    path = _write(tmp_path / "no-baselines.jsonl", records)
    store = Store.open(tmp_path / "target.db")
    with pytest.raises(StoreError) as info:
        import_(store, path)
    assert info.value.one_line() == (
        f"cannot import {path} into {store.display_url}: FOREIGN KEY constraint failed "
        "(a run refers to a baseline the file and the database lack: export it with its baselines)"
    )
    assert _counts(store) == [0] * 8


def test_csv_rows_carry_scenarios_and_requirement_verdicts() -> None:
    from bakeoff.store.transfer.exporting import _csv_row

    run = recorded_run(0)
    item = {
        **run.result("cpu").to_dict(),
        "scenarios": [{"name": "offline", "status": "ok"}, {"name": "generation", "status": "not_applicable"}],
        "requirements": [
            {"text": "p90<=50ms", "verdict": "met", "confident": True},
            {"text": "ttft<=1ms", "verdict": "not_measured"},
            {"text": "p99<=80ms", "verdict": "met", "confident": False},  # its interval straddles the limit
        ],
    }
    row = _csv_row(run, item, "", "")
    assert row["scenarios"] == "offline:ok; generation:not_applicable"
    assert row["requirements"] == "p90<=50ms:met; ttft<=1ms:not measured; p99<=80ms:not conclusive"
    assert row["requirements_not_met"] == 2


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def _spoil_correctness(run: dict) -> str:
    run["results"][0]["correctness"]["verdict"] = 5
    return "(TypeError: Correctness.verdict should be a string, not int 5)"


def _spoil_samples(run: dict) -> str:
    run["results"][0]["latency"]["samples_ms"] = "abc"
    return "(TypeError: TargetResult.latency.samples_ms should be a list, not a string)"


def _spoil_depth(run: dict) -> str:
    run["results"][0]["from_a_plugin"] = _nested(500)
    return "nested more than 100 levels deep"


@pytest.mark.parametrize("spoil", [_spoil_correctness, _spoil_samples, _spoil_depth])
def test_crafted_run_record_is_refused_in_one_line_and_nothing_imported(tmp_path: Path, spoil: Callable) -> None:
    """A record of the wrong shape is refused while the file is read, never found later by a
    report (a verdict that is a number crashed `bakeoff show`) or by the insert (a string of
    samples, a value nested past the stack)."""
    records = _export_lines(tmp_path)
    last = len(records)
    detail = spoil(records[-1]["run"])
    path = _write(tmp_path / "crafted.jsonl", records)
    team = Store.open(tmp_path / "team.db")
    done = bakeoff("import", str(path), "--db", "team.db", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"bakeoff: error: {path}, line {last}: ")
    assert detail in line
    assert line.endswith("(pass a file written by `bakeoff export --format jsonl`)")
    assert _counts(team) == [0] * 8


def test_run_record_with_modest_unknowns_imports_and_shows(tmp_path: Path) -> None:
    """The control: a newer bakeoff's or a plugin's keys, nested as deep as real values go, are kept."""
    records = _export_lines(tmp_path)
    run = records[-1]["run"]
    run["results"][0]["from_a_plugin"] = _nested(50)
    run["results"][0]["correctness"]["tolerance"] = 1  # an integer is a number
    path = _write(tmp_path / "fine.jsonl", records)
    done = bakeoff("import", str(path), "--db", "team.db", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    shown = bakeoff("show", run["run_id"], "--db", "team.db", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert run["run_id"] in shown.stdout
    result = Store.open(tmp_path / "team.db").get_run(run["run_id"]).results[0]
    assert result.unknown["from_a_plugin"] == _nested(50)
    assert result.correctness.tolerance == 1.0  # type: ignore[union-attr]
