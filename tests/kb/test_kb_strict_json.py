"""Infinite figures (an output whose finiteness differs from the reference) stay strict JSON everywhere."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from tests.kb.runs import recorded_run, variant

from bakeoff.results import strictjson
from bakeoff.store.db import Store


def _strict(text: str):
    def refuse(constant: str):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def _run_with_infinite_error(run_id: str):
    data = recorded_run().to_dict()
    data["results"][1]["correctness"]["outputs"][0]["max_abs_err"] = math.inf
    data["results"][1]["correctness"]["outputs"][0]["max_rel_err"] = math.nan
    data["results"][1]["correctness"]["verdict"] = "fail"
    return variant(run_id, results=data["results"])


def test_codec_round_trips_non_finite_floats_as_strict_json():
    value = {"a": [math.inf, -math.inf, 1.5], "b": {"c": math.nan}, "d": {"$float": "text stays"}}
    text = strictjson.dumps(value)
    _strict(text)
    back = strictjson.loads(text)
    assert back["a"] == [math.inf, -math.inf, 1.5] and math.isnan(back["b"]["c"])
    assert back["d"] == {"$float": "text stays"}
    assert strictjson.for_display(value)["a"] == ["inf", "-inf", 1.5]
    assert strictjson.loads('{"x": NaN}')["x"] != 0  # older text with bare NaN still reads


def _check_store(url: str, tmp_path: Path) -> None:
    store = Store.open(url, artifacts_dir=tmp_path / "artifacts")
    store.save_run(_run_with_infinite_error("infrun000001"))
    read = store.get_run("infrun000001")
    output = read.results[1].correctness.outputs[0]
    assert output.max_abs_err == math.inf and math.isnan(output.max_rel_err)


def test_sqlite_store_keeps_infinities(tmp_path):
    _check_store(str(tmp_path / "b.db"), tmp_path)


def test_postgres_store_keeps_infinities(pg_url, tmp_path):
    # PostgreSQL's json type refuses bare NaN/Infinity: the tagged form is what lets this store at all
    _check_store(pg_url, tmp_path)


def test_every_json_output_parses_strictly(tmp_path):
    db = tmp_path / "b.db"
    Store.open(str(db)).save_run(_run_with_infinite_error("infrun000001"))

    def bakeoff(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "bakeoff", *args, "--db", str(db)], capture_output=True, text=True, timeout=300
        )

    shown = bakeoff("show", "infrun000001", "--format", "json")
    assert shown.returncode == 0, shown.stderr
    doc = _strict(shown.stdout)
    assert doc["results"][1]["correctness"]["outputs"][0]["max_abs_err"] == "inf"
    exported = bakeoff("export", "-o", str(tmp_path / "out.jsonl"))
    assert exported.returncode == 0, exported.stderr
    lines = (tmp_path / "out.jsonl").read_text().splitlines()
    assert all(_strict(line) for line in lines)
    assert '{"$float":"inf"}' in "".join(lines)
    reported = bakeoff("report", "--json", str(tmp_path / "r.json"))
    assert reported.returncode == 0, reported.stderr
    assert _strict((tmp_path / "r.json").read_text())
    for command in (["history"], ["regressions"]):
        out = bakeoff(*command, "--format", "json")
        assert out.returncode == 0, out.stderr
        _strict(out.stdout)
    # and the export imports back with the infinity intact
    other = tmp_path / "other.db"
    imported = subprocess.run(
        [sys.executable, "-m", "bakeoff", "import", str(tmp_path / "out.jsonl"), "--db", str(other)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert imported.returncode == 0, imported.stderr
    assert Store.open(str(other)).get_run("infrun000001").results[1].correctness.outputs[0].max_abs_err == math.inf


def _rewrite_first_result(db: Path, change) -> None:
    import sqlite3

    with sqlite3.connect(db) as conn:
        (row_id, text), *_ = conn.execute("select id, data from target_results order by id").fetchall()
        data = json.loads(text)
        change(data)
        conn.execute("update target_results set data = ? where id = ?", (json.dumps(data), row_id))
        conn.execute("update runs set bakeoff_version = '9.9.9'")


def test_a_run_from_a_newer_bakeoff_that_cannot_be_read_is_one_line_naming_its_version(tmp_path):
    db = tmp_path / "b.db"
    Store.open(str(db)).save_run(variant("newer0000001"))
    _rewrite_first_result(db, lambda data: data.pop("status"))
    shown = subprocess.run(
        [sys.executable, "-m", "bakeoff", "show", "newer0000001", "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 2
    assert "Traceback" not in shown.stderr
    (line,) = shown.stderr.strip().splitlines()
    assert line.startswith("bakeoff: error: run newer0000001 was written by bakeoff 9.9.9 in a result format")


def test_a_run_from_a_newer_bakeoff_with_added_fields_reads_around_them(tmp_path):
    db = tmp_path / "b.db"
    Store.open(str(db)).save_run(variant("newer0000002"))

    def add_fields(data):
        data["a_field_added_later"] = {"x": 1}
        data["target_detail"]["an_option_added_later"] = "y"
        for key in ("correctness", "placement", "compilation", "error"):
            if data.get(key):
                data[key]["added_later"] = 1
        for scenario in data.get("scenarios") or ():
            scenario["added_later"] = 1

    _rewrite_first_result(db, add_fields)
    read = Store.open(str(db)).get_run("newer0000002")
    original = variant("newer0000002").results[0]
    # everything it knows, intact; what it does not know kept aside, not dropped
    assert read.results[0] == replace(original, unknown={"a_field_added_later": {"x": 1}})
    assert read.results[0].to_dict()["a_field_added_later"] == {"x": 1}  # written back as it came
