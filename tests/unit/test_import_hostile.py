"""Hostile export files: each refused whole, in one line, before anything is stored; a run
imported with code of its own to run is never run again by ``bakeoff rerun``."""

from __future__ import annotations

import json
import os
import threading
import timeit
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from tests.conftest import cli_in_process
from tests.kb.runs import environment, recorded_baseline, recorded_run, variant

from bakeoff.errors import SpecError
from bakeoff.results.values import RunResult
from bakeoff.store import Store, transfer
from bakeoff.store import schema as tables
from bakeoff.store.transfer import reading

FROM_EXPORT = "(pass a file written by `bakeoff export --format jsonl`)"
NATIVE = "c0ffee0000aa"  # a run the receiving database made itself
SCRIPT_RUN = "5c71b7000001"


_cli = cli_in_process


def _records(tmp_path: Path) -> list[dict[str, Any]]:
    """The lines of an honest export: a baseline, two real runs, a note and a tag."""
    laptop = Store.open(tmp_path / "laptop.db")
    first = recorded_run(0)
    laptop.save_baseline(recorded_baseline(), first.environment)
    laptop.save_run(first)
    laptop.save_run(recorded_run(1))
    laptop.add_note(first.run_id, "first try on the new driver", author="ana")
    laptop.add_tag(first.run_id, "driver-560")
    out = tmp_path / "laptop.jsonl"
    transfer.export(laptop, out)
    return [json.loads(line) for line in out.read_text().splitlines()]


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _team(tmp_path: Path) -> Path:
    """A receiving database that already holds a run of its own."""
    path = tmp_path / "team.db"
    Store.open(path).save_run(variant(NATIVE, env=environment(7), created_at="2026-12-01T00:00:00+00:00"))
    return path


def _dump(db: Path) -> list[list[tuple[Any, ...]]]:
    """Every row of every table (the whole knowledge base), to compare before and after."""
    store = Store.open(db, create=False)
    with store.engine.connect() as conn:
        return [sorted(map(tuple, conn.execute(select(t)).all()), key=repr) for t in tables.metadata.sorted_tables]


def _run_line(records: list[dict[str, Any]], run_id: str) -> int:
    return next(n for n, r in enumerate(records, start=1) if r.get("kind") == "run" and r["run"]["run_id"] == run_id)


def _refused(capsys: pytest.CaptureFixture[str], path: Path, db: Path, line: str) -> None:
    """Importing ``path`` into ``db`` exits 2 with ``line`` alone on stderr and changes nothing."""
    before = _dump(db)
    code, out, err = _cli(capsys, "import", str(path), "--db", str(db))
    assert (code, out, err) == (2, "", f"bakeoff: error: {line}\n")
    assert _dump(db) == before


# -- the honest control ---------------------------------------------------------------------


def test_honest_export_imports_then_is_present_and_stays_unmarked(tmp_path, capsys):
    records = _records(tmp_path)
    path = _write(tmp_path / "honest.jsonl", records)
    db = _team(tmp_path)
    code, out, err = _cli(capsys, "import", str(path), "--db", str(db))
    assert (code, err) == (0, "")
    assert out == (
        "imported 2 runs (0 already present), 1 baseline (0 already present), 0 requirements updates, 1 note, "
        f"1 tag into {db}\n"
    )
    code, out, _ = _cli(capsys, "import", str(path), "--db", str(db))
    assert code == 0 and out.startswith("imported 0 runs (2 already present), 0 baselines (1 already present)")
    store = Store.open(db, create=False)
    for run_id in (recorded_run(0).run_id, recorded_run(1).run_id):
        assert transfer.imported_from(store, run_id)["file"] == str(path)
        transfer.check_rerunnable(store, store.get_run(run_id))  # an arch: run builds only bakeoff's code
    assert transfer.imported_from(store, NATIVE) is None
    # the laptop's own runs, coming back in a colleague's export, stay the laptop's
    code, out, _ = _cli(capsys, "import", str(path), "--db", str(tmp_path / "laptop.db"))
    assert code == 0 and out.startswith("imported 0 runs (2 already present)")
    assert transfer.imported_from(Store.open(tmp_path / "laptop.db"), recorded_run(0).run_id) is None


# -- files that are not files, or too big ---------------------------------------------------


def test_fifo_is_refused_in_one_line_without_waiting(tmp_path, capsys):
    db = _team(tmp_path)
    fifo = tmp_path / "export.jsonl"
    os.mkfifo(fifo)
    before = _dump(db)
    waited: list[bool] = []

    def release() -> None:  # a reader still waiting for a writer gets one (and end of file)
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            waited.append(True)
        except OSError:
            pass

    timer = threading.Timer(10, release)
    timer.start()
    try:
        done = [_cli(capsys, "import", str(fifo), "--db", str(db))]
    finally:
        timer.cancel()
    assert not waited, "import waited for a writer on a FIFO"
    assert done == [(2, "", f"bakeoff: error: {fifo} is not a regular file {FROM_EXPORT}\n")]
    assert _dump(db) == before


def test_file_over_the_total_cap_is_refused_before_it_is_read(tmp_path, capsys, monkeypatch):
    path = _write(tmp_path / "big.jsonl", _records(tmp_path))
    monkeypatch.setattr(reading, "MAX_FILE_BYTES", 4096)
    size = path.stat().st_size
    _refused(
        capsys,
        path,
        _team(tmp_path),
        f"{path} is {size} bytes, more than an import reads (4096) "
        "(export it in parts: `bakeoff export --tag NAME` or `--workload SPEC`)",
    )


def test_line_over_the_cap_is_refused(tmp_path, capsys, monkeypatch):
    records = _records(tmp_path)
    path = _write(tmp_path / "long-line.jsonl", records)
    monkeypatch.setattr(reading, "MAX_LINE_BYTES", 4096)
    line = _run_line(records, recorded_run(0).run_id)
    _refused(capsys, path, _team(tmp_path), f"{path}, line {line}: longer than 4096 bytes {FROM_EXPORT}")


def test_huge_note_is_refused(tmp_path, capsys):
    records = _records(tmp_path)
    line = _run_line(records, recorded_run(0).run_id)
    records[line - 1]["notes"].append({"created_at": "2026-12-01T00:00:00+00:00", "text": "x" * 2**20})
    path = _write(tmp_path / "huge-note.jsonl", records)
    _refused(
        capsys,
        path,
        _team(tmp_path),
        f"{path}, line {line}: a note of {2**20} characters, more than {transfer.MAX_NOTE_CHARS} "
        "(shorten the note in the file, or keep the text elsewhere and note where)",
    )


def test_bakeoff_note_refuses_a_note_an_import_would_refuse(tmp_path, capsys):
    db = _team(tmp_path)
    (run_id,) = [r.run_id for r in Store.open(db, create=False).list_runs()]
    before = _dump(db)
    code, _, err = _cli(capsys, "note", run_id, "x" * (transfer.MAX_NOTE_CHARS + 1), "--db", str(db))
    assert code == 2 and f"more than {transfer.MAX_NOTE_CHARS}" in err and _dump(db) == before
    code, _, _ = _cli(capsys, "note", run_id, "x" * transfer.MAX_NOTE_CHARS, "--db", str(db))  # at the cap: kept
    assert code == 0 and len(_dump(db)) == len(before)


def test_huge_text_anywhere_in_a_record_is_refused(tmp_path, capsys):
    records = _records(tmp_path)
    line = _run_line(records, recorded_run(1).run_id)
    records[line - 1]["run"]["workload"]["notes"] = ["y" * (transfer.MAX_TEXT_CHARS + 1)]
    path = _write(tmp_path / "huge-text.jsonl", records)
    _refused(
        capsys,
        path,
        _team(tmp_path),
        f"{path}, line {line}: a text of {transfer.MAX_TEXT_CHARS + 1} characters, more than "
        f"{transfer.MAX_TEXT_CHARS} {FROM_EXPORT}",
    )


@pytest.mark.parametrize(
    "digits",
    ["9" * 5000, str(2**64)],  # past Python's 4300-digit limit; past what a database column holds
    ids=["5000-digits", "past-64-bits"],
)
def test_huge_integer_is_refused_in_one_line(tmp_path, capsys, digits):
    records = _records(tmp_path)
    line = _run_line(records, recorded_run(1).run_id)
    records[line - 1]["run"]["settings"]["seed"] = "SEED"
    path = _write(tmp_path / "huge-int.jsonl", records)
    path.write_text(path.read_text().replace('"SEED"', digits))
    _refused(capsys, path, _team(tmp_path), f"{path}, line {line}: an integer beyond 64 bits {FROM_EXPORT}")


def test_huge_baseline_seed_is_refused_in_one_line(tmp_path, capsys):
    records = _records(tmp_path)
    line = next(n for n, r in enumerate(records, start=1) if r.get("kind") == "baseline")
    records[line - 1]["baseline"]["seed"] = 10**30
    path = _write(tmp_path / "huge-seed.jsonl", records)
    _refused(capsys, path, _team(tmp_path), f"{path}, line {line}: an integer beyond 64 bits {FROM_EXPORT}")


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("texts", "p90<=5ms", 'texts are not a list of texts ("p90<=5ms")'),
        ("texts", ["p90<=5ms", 5], 'texts are not a list of texts (["p90<=5ms", 5])'),
        ("texts", ["garbage"], "requirement 'garbage': "),
        ("workload_spec", None, "names no workload (workload_spec null)"),
        ("updated_at", 5, "updated_at 5 is not an ISO 8601 time"),
    ],
)
def test_a_requirements_record_of_the_wrong_kind_is_refused(tmp_path, capsys, field, value, said):
    """A string of texts was stored split into characters, under a workload named "None"."""
    records = _records(tmp_path)
    good = {"kind": "requirements", "workload_spec": "arch:llama", "updated_at": "2026-12-01T00:00:00+00:00",
            "texts": ["p90<=5ms"]}  # fmt: skip
    path = _write(tmp_path / "requirements.jsonl", [*records, {**good, field: value}])
    db = _team(tmp_path)
    before = _dump(db)
    code, out, err = _cli(capsys, "import", str(path), "--db", str(db))
    assert (code, out) == (2, "") and err.startswith(f"bakeoff: error: {path}, line {len(records) + 1}: "), err
    assert said in err and err.count("\n") == 1, err
    assert _dump(db) == before
    _write(path, [*records, good])  # the control: the same record, well formed, is kept
    code, out, err = _cli(capsys, "import", str(path), "--db", str(db))
    assert code == 0 and "1 requirements update" in out, out + err


@pytest.mark.parametrize("where", ["run", "note"])
def test_a_time_that_is_not_a_time_is_refused(tmp_path, capsys, where):
    """'yesterday' as a run's time was listed, and sorted first, by history."""
    records = _records(tmp_path)
    line = _run_line(records, recorded_run(0).run_id)
    if where == "run":
        records[line - 1]["run"]["created_at"] = "yesterday"
        said = f'run {recorded_run(0).run_id}\'s created_at "yesterday" is not an ISO 8601 time'
    else:
        records[line - 1]["notes"][0]["created_at"] = "yesterday"
        said = 'a note\'s created_at "yesterday" is not an ISO 8601 time'
    path = _write(tmp_path / "times.jsonl", records)
    _refused(capsys, path, _team(tmp_path), f"{path}, line {line}: {said} {FROM_EXPORT}")


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("speedup", {"$float": "inf"}, "speedup Infinity is not one a measurement gives (above 0, at most 1e6)"),
        ("speedup", 1e300, "speedup 1e+300 is not one a measurement gives (above 0, at most 1e6)"),
        ("speedup", -2.0, "speedup -2.0 is not one a measurement gives (above 0, at most 1e6)"),
        ("speedup", {"$float": "nan"}, "speedup NaN is not one a measurement gives (above 0, at most 1e6)"),
        ("samples_ms", [1.5, -3.0], "a latency sample that is not a time in milliseconds (finite, not negative)"),
        ("first_call_ms", {"$float": "inf"}, "first_call_ms Infinity is not a finite, non-negative number"),
        ("break_even_requests", -1.0, "break_even_requests -1.0 is not a finite, non-negative number"),
    ],
)
def test_a_timing_figure_no_measurement_gives_is_refused(tmp_path, capsys, field, value, said):
    """A speed-up of 1e300 would be printed, and decided on, as a measured one."""
    records = _records(tmp_path)
    line = _run_line(records, recorded_run(0).run_id)
    result = records[line - 1]["run"]["results"][1]
    honest = json.loads(json.dumps(records))
    if field == "samples_ms":
        result["latency"]["samples_ms"] = value
    else:
        result[field] = value
    path = _write(tmp_path / "figures.jsonl", records)
    where = f"run {recorded_run(0).run_id}'s target {result['target']}"
    _refused(capsys, path, _team(tmp_path), f"{path}, line {line}: {where}: {said} {FROM_EXPORT}")
    # the control: a large but honest speed-up (a thousand times) is kept as it was written
    honest[line - 1]["run"]["results"][1]["speedup"] = 1000.0
    _write(path, honest)
    (tmp_path / "control").mkdir()
    db = _team(tmp_path / "control")
    code, out, err = _cli(capsys, "import", str(path), "--db", str(db))
    assert (code, err) == (0, "") and out.startswith("imported 2 runs"), out + err
    assert Store.open(db).get_run(recorded_run(0).run_id).results[1].speedup == 1000.0


# -- headers and identities -----------------------------------------------------------------


def test_an_export_an_editor_saved_with_a_byte_order_mark_imports(tmp_path, capsys):
    path = _write(tmp_path / "bom.jsonl", _records(tmp_path))
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    code, out, err = _cli(capsys, "import", str(path), "--db", str(_team(tmp_path)))
    assert (code, err) == (0, "") and out.startswith("imported 2 runs"), out + err


@pytest.mark.parametrize(("version", "shown"), [(0, "0"), (-1, "-1"), (True, "true"), ("1", '"1"'), (1.0, "1.0")])
def test_schema_version_that_no_export_has_is_refused(tmp_path, capsys, version, shown):
    records = _records(tmp_path)
    records[0]["schema_version"] = version
    path = _write(tmp_path / "version.jsonl", records)
    _refused(
        capsys, path, _team(tmp_path), f"{path} has schema_version {shown}, which no bakeoff export has {FROM_EXPORT}"
    )


def test_same_run_id_with_other_content_in_one_file_is_a_conflict(tmp_path, capsys):
    records = _records(tmp_path)
    first = _run_line(records, recorded_run(0).run_id)
    other = json.loads(json.dumps(records[first - 1]))
    other["run"]["created_at"] = "2027-01-01T00:00:00+00:00"
    records.append(other)
    path = _write(tmp_path / "twice.jsonl", records)
    _refused(
        capsys,
        path,
        _team(tmp_path),
        f"{path}, line {len(records)}: run {recorded_run(0).run_id} appears again with other content "
        f"(first on line {first}) (nothing was imported: one run id names one run; keep one of the two lines)",
    )


def test_same_run_id_with_other_content_than_the_database_is_a_conflict(tmp_path, capsys):
    records = _records(tmp_path)
    line = _run_line(records, recorded_run(1).run_id)
    records[line - 1]["run"]["run_id"] = NATIVE
    path = _write(tmp_path / "clash.jsonl", records)
    db = _team(tmp_path)
    _refused(  # the hint reads the database the import was into, as given
        capsys,
        path,
        db,
        f"{path}, line {line}: run {NATIVE} is in the database with other content "
        f"(nothing was imported: compare the stored run (`bakeoff show {NATIVE} --db {db}`) with the file's and "
        "keep one)",
    )


def test_same_baseline_id_with_other_content_than_the_database_is_a_conflict(tmp_path, capsys):
    records = _records(tmp_path)
    db = _team(tmp_path)
    Store.open(db).save_baseline(recorded_baseline(), recorded_run(0).environment)
    line = next(n for n, r in enumerate(records, start=1) if r.get("kind") == "baseline")
    records[line - 1]["baseline"]["repeat_max_abs_err"] = 0.5
    path = _write(tmp_path / "baseline-clash.jsonl", records)
    _refused(
        capsys,
        path,
        db,
        f"{path}, line {line}: baseline {recorded_baseline().id} is in the database with other content "
        "(nothing was imported: a baseline id names one baseline; export the runs without it, or import into "
        "another database)",
    )


# -- an imported run that names code --------------------------------------------------------


def _script_run(tmp_path: Path) -> dict[str, Any]:
    """A stored ``bakeoff exec`` run whose script is a standard-library module given arguments
    that run code of the file writer's choosing."""
    argv = ["-n", "1", "-s", f"open({str(tmp_path / 'PWNED')!r}, 'w').close()", "pass"]
    data = recorded_run(1).to_dict()
    data["run_id"] = SCRIPT_RUN
    data["baseline_id"] = None
    data["workload"] = {
        "spec": "script:" + " ".join([timeit.__file__, *argv]),
        "kind": "script",
        "fingerprint": "0123456789abcdef",
        "seed": 0,
        "dtype": "float32",
        "details": {"script": timeit.__file__, "argv": argv, "source_sha256": "0" * 64},
    }
    data["settings"] = {"reference": "cpu", "exec": {"argv": argv, "workdir": str(tmp_path), "map": ["cuda"]}}
    return {"kind": "run", "run": data, "bakeoff_version": "0.1.0", "notes": [], "tags": ["nightly"]}


def _never_again(path: Path) -> str:
    return (
        f"bakeoff: error: run {SCRIPT_RUN} was imported from {path} and its workload is a script: code that "
        f"came in an import is never run again (read it with `bakeoff show {SCRIPT_RUN}`; if you trust it, run it "
        "yourself with `bakeoff exec`)\n"
    )


@pytest.mark.parametrize(
    "select_by", [["RUN"], ["--tag", "nightly"], ["--workload", "SPEC"]], ids=["id", "tag", "workload"]
)
def test_imported_script_run_is_reported_and_never_rerun(tmp_path, capsys, select_by):
    record = _script_run(tmp_path)
    path = _write(tmp_path / "script.jsonl", [_records(tmp_path)[0], record])
    db = _team(tmp_path)
    code, out, err = _cli(capsys, "import", str(path), "--db", str(db))
    assert (code, err) == (0, "")
    assert out.splitlines()[1:] == [
        f"not for `bakeoff rerun` (imported runs that name code to run, a script or a module): {SCRIPT_RUN}",
    ]
    args = [{"RUN": SCRIPT_RUN, "SPEC": record["run"]["workload"]["spec"]}.get(a, a) for a in select_by]
    before = _dump(db)
    code, out, err = _cli(capsys, "rerun", *args, "--db", str(db))
    assert (code, err) == (
        2,
        _never_again(path),
    )
    assert not (tmp_path / "PWNED").exists()
    assert _dump(db) == before


def test_imported_script_run_is_not_localized_either(tmp_path, capsys):
    path = _write(tmp_path / "script.jsonl", [_records(tmp_path)[0], _script_run(tmp_path)])
    db = tmp_path / "t.db"
    transfer.import_(Store.open(db), path)
    code, out, err = _cli(capsys, "localize", f"{SCRIPT_RUN}:cpu", "--db", str(db))
    assert (code, out, err) == (2, "", _never_again(path))
    assert not (tmp_path / "PWNED").exists()


def test_import_json_lists_the_runs_not_for_rerun(tmp_path, capsys):
    path = _write(tmp_path / "script.jsonl", [_records(tmp_path)[0], _script_run(tmp_path)])
    code, out, _ = _cli(capsys, "import", str(path), "--db", str(tmp_path / "t.db"), "--format", "json")
    assert code == 0 and json.loads(out)["not_rerunnable"] == [SCRIPT_RUN]


def test_a_script_run_made_here_stays_rerunnable(tmp_path):
    store = Store.open(tmp_path / "here.db")
    run = RunResult.from_dict(_script_run(tmp_path)["run"])
    store.save_run(run)
    transfer.check_rerunnable(store, store.get_run(SCRIPT_RUN))  # no refusal: this database ran it
    assert transfer.imported_from(store, SCRIPT_RUN) is None


def test_check_rerunnable_refuses_an_imported_script_run(tmp_path):
    path = _write(tmp_path / "script.jsonl", [_records(tmp_path)[0], _script_run(tmp_path)])
    store = Store.open(tmp_path / "t.db")
    transfer.import_(store, path)
    with pytest.raises(SpecError, match=f"run {SCRIPT_RUN} was imported from"):
        transfer.check_rerunnable(store, store.get_run(SCRIPT_RUN))


@pytest.mark.parametrize("which", ["imported-arch-run", "script-run-made-here"])
def test_rerun_goes_ahead_where_it_did_before(tmp_path, capsys, monkeypatch, which):
    """The control: an imported run of a workload bakeoff builds itself, and a script run this
    database made, reach the rerun itself (stood in for here: it would run trials)."""
    db = tmp_path / "t.db"
    if which == "imported-arch-run":
        transfer.import_(Store.open(db), _write(tmp_path / "honest.jsonl", _records(tmp_path)))
        run_id = recorded_run(0).run_id
    else:
        Store.open(db).save_run(RunResult.from_dict(_script_run(tmp_path)["run"]))
        run_id = SCRIPT_RUN
    asked: list[str | None] = []
    monkeypatch.setattr("bakeoff.api.rerun", lambda run, **_: asked.append(run) or [])
    code, _, err = _cli(capsys, "rerun", run_id, "--db", str(db))
    assert (code, err, asked) == (0, "", [run_id])


@pytest.mark.parametrize(("spec", "refused"), [("py:evil.py:make", True), ("arch:gpt2", False)])
def test_an_imported_fit_map_is_rerun_only_when_its_workload_names_no_code(tmp_path, spec, refused):
    """A fit map's recorded kind is ``fit``: its spec says what a rerun would build."""
    data = recorded_run(1).to_dict()
    data["run_id"], data["baseline_id"] = "f17f17000001", None
    data["workload"] = {"spec": spec, "kind": "fit", "fingerprint": "0123456789abcdef", "seed": 0,
                        "dtype": "as built", "details": {}}  # fmt: skip
    data["settings"] = {"fit": {"grid": "batch=1", "on": "cpu"}}
    fitted = {"kind": "run", "run": data, "bakeoff_version": "0.1.0", "notes": [], "tags": []}
    path = _write(tmp_path / "fit.jsonl", [_records(tmp_path)[0], fitted])
    store = Store.open(tmp_path / "t.db")
    transfer.import_(store, path)
    if refused:
        with pytest.raises(SpecError, match="its workload is a py: module"):
            transfer.check_rerunnable(store, store.get_run("f17f17000001"))
    else:
        transfer.check_rerunnable(store, store.get_run("f17f17000001"))


@pytest.mark.parametrize(
    ("path", "value", "said"),
    [
        (("results", 0, "speedup_ci"), {"value": "x", "low": 1.0, "high": 2.0}, "has a value of the wrong kind ("),
        (("workload", "details"), "a string", "has a value of the wrong kind (AttributeError: "),
        (("settings",), [], "has a value of the wrong kind ("),
        (("workload", "kind"), [], "'s workload has no spec and kind as text"),
    ],
)
def test_a_run_value_of_the_wrong_kind_is_refused_before_it_breaks_show_and_report(tmp_path, capsys, path, value, said):
    # imported, one such run made `bakeoff report` of the whole database fail with a traceback, and
    # `show` of it; a kind that is not text raised a traceback in the import itself
    records = _records(tmp_path)
    line = _run_line(records, recorded_run(0).run_id)
    spoiled = json.loads(json.dumps(records))
    where = spoiled[line - 1]["run"]
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = value
    bad = _write(tmp_path / "spoiled.jsonl", spoiled)
    db = _team(tmp_path)
    before = _dump(db)
    code, out, err = _cli(capsys, "import", str(bad), "--db", str(db))
    assert (code, out) == (2, "") and err.startswith(f"bakeoff: error: {bad}, line {line}: run "), err
    assert said in err and err.count("\n") == 1, err
    assert _dump(db) == before


def test_a_file_in_another_encoding_is_refused_naming_the_line_and_byte(tmp_path, capsys):
    # "is not a text file" named neither: an export edited and saved as Latin-1 had one é in a note
    records = _records(tmp_path)
    text = "".join(json.dumps(r) + "\n" for r in records)
    latin = tmp_path / "latin1.jsonl"
    latin.write_bytes(text.replace("first try", "premi\u00e8re try").encode("latin-1", errors="strict"))
    line = next(n for n, r in enumerate(records, start=1) if r.get("kind") == "run" and r.get("notes"))
    column = text.splitlines()[line - 1].encode().index(b"first try") + len("premi") + 1
    _refused(
        capsys,
        latin,
        _team(tmp_path),
        f"{latin} is not UTF-8 text: line {line}, byte {column} of it is 0xe8 {FROM_EXPORT}",
    )
