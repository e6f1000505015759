"""Outputs a command could not write as asked are refused before anything is written: two
report formats given one file (the later overwrote the earlier, and both were said written), an
export of a tag or workload no stored run has (an empty file, exit 0, where report refuses it)."""

from __future__ import annotations

import pytest
from tests.conftest import cli_in_process
from tests.kb.runs import recorded_baseline, recorded_run

from bakeoff.store import Store


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "b.db"
    store = Store.open(path)
    store.save_baseline(recorded_baseline(), recorded_run(0).environment)
    store.save_run(recorded_run(0))
    store.add_tag(recorded_run(0).run_id, "kept")
    return path


def test_two_report_formats_into_one_file_are_refused(capsys, tmp_path, db):
    same = tmp_path / "r.md"
    code, out, err = cli_in_process(capsys, "report", "--html", str(same), "--markdown", str(same), "--db", str(db))
    assert (code, out) == (2, "")
    assert err == f"bakeoff: error: --html and --markdown name one file, {same} (give each report a file of its own)\n"
    assert not same.exists()
    code, out, _ = cli_in_process(  # the control: a file each
        capsys, "report", "--html", str(tmp_path / "r.html"), "--markdown", str(same), "--db", str(db)
    )
    assert code == 0 and same.exists() and (tmp_path / "r.html").exists(), out


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [("--tag", "nosuch", "tagged 'nosuch'"), ("--workload", "arch:none", "of 'arch:none'")],
)
def test_an_export_of_a_selection_no_run_has_is_refused_and_writes_nothing(capsys, tmp_path, db, option, value, said):
    out_file = tmp_path / "n.jsonl"
    code, out, err = cli_in_process(capsys, "export", option, value, "-o", str(out_file), "--db", str(db))
    assert (code, out) == (2, "")
    assert err == (
        f"bakeoff: error: no runs {said} in {db} (run `bakeoff history` to see what is stored, or check --db)\n"
    )
    assert not out_file.exists()
    # the report of the same selection is refused in the same words
    report = tmp_path / "n.json"
    assert cli_in_process(capsys, "report", option, value, "--json", str(report), "--db", str(db)) == (2, "", err)
    assert not report.exists()
    code, out, _ = cli_in_process(capsys, "export", "--tag", "kept", "-o", str(out_file), "--db", str(db))
    assert code == 0 and out.startswith("exported 1 run"), out
