"""Every kind of stored run, the degenerate ones included, renders through every reader: the
terminal (summary, --verbose, --log), HTML, Markdown and JSON reports, and ``show`` and ``report``
on a knowledge base that holds them. A stored document never breaks a reader.

The degenerate runs: a target that compared no tensor (only strings captured, or a script that
ended with ``os._exit(0)`` before capturing anything), one that captured nothing, a latency
with no sample (a document whose samples were lost, or imported so), a target with an error
and no latency, an error without its details, a run with no target at all, a reference alone,
skipped targets only, a correctness value with no output and no tolerance. The control is an
ordinary run, whose figures are rendered as before.
"""

from __future__ import annotations

import hashlib
import io
import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from tests.conftest import bakeoff_cli, cli_in_process
from tests.revisit_data import environment, make_run, target_result

from bakeoff.report.evidence import build_evidence, render_json
from bakeoff.report.html import render_html
from bakeoff.report.markdown import render_markdown
from bakeoff.report.terminal import log_view, run_view
from bakeoff.results.codec import run_from_json, run_to_json
from bakeoff.results.values import Correctness, ErrorInfo, Latency, RunResult, TargetResult
from bakeoff.store import Store
from bakeoff.target.spec import parse_target

EXEC_SETTINGS = {"reference": "cpu", "reference_added": True, "exec": {"argv": [], "repeats": 0, "captures": []}}
NO_TENSOR = Correctness("not_comparable", "the workload returned no tensors", "the script on cpu")
LOG = ({"text": "done", "count": 1, "source": "stdout", "phase": "script"},)
#: a marker for a latency that is stored with no sample (Latency(()) cannot be written by to_dict)
_ZERO = "_zero_samples"


def _ref(status: str = "ok", **extra: Any) -> TargetResult:
    return TargetResult(parse_target("cpu"), status, is_reference=True, **extra)


def _target(spec: str = "cuda", status: str = "ok", **extra: Any) -> TargetResult:
    return TargetResult(parse_target(spec), status, **extra)


CASES: dict[str, tuple[tuple[TargetResult, ...], dict[str, Any]]] = {
    "ordinary": ((target_result("cpu", 2.0), target_result("cpu+inductor", 1.0, seed=2)), {"reference": "cpu"}),
    "strings_only": (
        (_ref(latency=Latency((0.4,)), log=LOG), _target(latency=Latency((0.6,)), checks={"correctness": NO_TENSOR})),
        EXEC_SETTINGS,
    ),
    "exited_before_capturing": (
        (
            _ref(),
            _target(checks={"correctness": Correctness("not_comparable", "the reference run captured nothing")}),
        ),
        EXEC_SETTINGS,
    ),
    "zero_samples": ((_ref(unknown={_ZERO: 1}), _target("cpu+inductor", unknown={_ZERO: 1})), {"reference": "cpu"}),
    "error_without_latency": (
        (_ref(latency=Latency((1.0,))), _target(status="error", error=ErrorInfo("NonZeroExit", "", "exception"))),
        EXEC_SETTINGS,
    ),
    "error_without_details": ((_ref(status="error"), _target(status="error")), EXEC_SETTINGS),
    "reference_failed_alone": (
        (TargetResult(parse_target("cpu"), "error", is_reference=True, error=ErrorInfo("Timeout", "\n\n")),),
        EXEC_SETTINGS,
    ),
    "no_target": ((), EXEC_SETTINGS),
    "skipped_only": ((_target(status="skipped", reason="no device here"),), {"reference": "cpu"}),
    "verdict_without_outputs": (
        (_ref(), _target(checks={"correctness": Correctness("fail", "", "", None)}, speedup=1.5)),
        EXEC_SETTINGS,
    ),
}


def _document(name: str) -> dict[str, Any]:
    """The case's run as its stored JSON document."""
    results, settings = CASES[name]
    run_id = hashlib.sha256(name.encode()).hexdigest()[:12]
    spec = f"script:{name}.py" if "exec" in settings else f"arch:llama?case={name}"
    run = make_run(run_id, "2025-01-01T10:00:00+00:00", environment(), results, spec=spec, settings=settings)
    data = json.loads(json.dumps(run_to_json(run)))
    for result in data["results"]:
        if result.pop(_ZERO, None):
            result["latency"] = {"samples_ms": []}
    return data


def _stored(name: str) -> RunResult:
    return run_from_json(_document(name))


def _terminal(renderable: Any) -> str:
    console = Console(width=160, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


@pytest.mark.parametrize("name", list(CASES))
def test_every_renderer_reads_the_stored_run(name):
    run = _stored(name)
    for verbose in (False, True):
        assert run.run_id in _terminal(run_view(run, where="kb.db", width=160, verbose=verbose))
    assert run.run_id in _terminal(log_view(run))
    evidence = build_evidence([run], notes={}, tags={}, selection="all runs", database="kb.db")
    assert run.run_id in render_html(evidence)
    assert run.run_id in render_markdown(evidence)
    assert json.loads(render_json(evidence))["runs"][0]["run_id"] == run.run_id


def test_a_latency_without_samples_reads_as_no_latency():
    evidence = build_evidence([_stored("zero_samples")], notes={}, tags={}, selection="s", database="kb.db")
    doc = json.loads(render_json(evidence))
    assert [r["latency"] for r in doc["runs"][0]["results"]] == [None, None]


def test_the_ordinary_run_keeps_its_figures():
    """The control: a run with samples shows its p50 and speed-up as before."""
    run = _stored("ordinary")
    text = _terminal(run_view(run, width=160))
    target = run.result("cpu+inductor")
    assert f"{target.speedup:.2f}x" in text
    doc = json.loads(render_json(build_evidence([run], notes={}, tags={}, selection="s", database="kb.db")))
    assert doc["runs"][0]["results"][1]["latency"]["samples"] == 40


def _store_documents(db: Path, names: list[str]) -> None:
    """Store each case's run, its document written as it is (a latency with no sample included)."""
    store = Store.open(db)
    for name in names:
        data = _document(name)
        zero = [i for i, r in enumerate(data["results"]) if r.get("latency") == {"samples_ms": []}]
        for i in zero:
            data["results"][i]["latency"] = None
        store.save_run(run_from_json(data))
        if zero:
            with sqlite3.connect(db) as conn:
                rows = conn.execute(
                    "select id, data from target_results where run_id = ? order by position", (data["run_id"],)
                ).fetchall()
                for i in zero:
                    row_id, stored = rows[i]
                    conn.execute(
                        "update target_results set data = ? where id = ?",
                        (json.dumps({**json.loads(stored), "latency": {"samples_ms": []}}), row_id),
                    )


_cli = cli_in_process


def test_show_and_report_read_a_knowledge_base_of_degenerate_runs(tmp_path, capsys):
    db = tmp_path / "kb.db"
    _store_documents(db, list(CASES))
    for name in CASES:
        run_id = _document(name)["run_id"]
        assert Store.open(db, create=False).get_run(run_id).run_id == run_id
        for extra in ([], ["--verbose"], ["--log"], ["--format", "json"]):
            code, out, err = _cli(capsys, "show", run_id, *extra, "--db", str(db))
            assert code == 0 and "Traceback" not in err, (name, extra, err)
            if extra == ["--format", "json"]:
                assert json.loads(out)["run_id"] == run_id
    outputs = {flag: tmp_path / f"report.{flag[2:]}" for flag in ("--html", "--markdown", "--json")}
    ids = [_document(name)["run_id"] for name in CASES]
    flags = [a for f, p in outputs.items() for a in (f, str(p))]
    code, _, err = _cli(capsys, "report", *ids, *flags, "--db", str(db))
    assert code == 0, err
    assert len(json.loads(outputs["--json"].read_text())["runs"]) == len(CASES)


SCRIPT = """\
import os
import sys

import bakeoff

bakeoff.capture("label", "hello")
print("done")
sys.stdout.flush()
os._exit(0)
"""


@pytest.mark.isolated
def test_an_exec_run_that_captured_only_a_string_is_stored_and_read(tmp_path):
    """A real run: the script's one capture is a string, and it ends with ``os._exit(0)``, so no
    tensor is compared."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "strings.py").write_text(SCRIPT)
    db = tmp_path / "kb.db"

    def bakeoff(*args: str) -> subprocess.CompletedProcess[str]:
        """``bakeoff ARGS`` in the working directory, with ``--db`` before the last argument."""
        return bakeoff_cli(*args[:-1], "--db", str(db), args[-1], cwd=work, timeout=300)

    ran = bakeoff("exec", "--on", "cpu+aot_eager", "--format", "json", "strings.py")
    assert ran.returncode == 0, ran.stderr
    doc = json.loads(ran.stdout)
    target = doc["results"][1]
    assert target["status"] == "ok" and target["correctness"]["verdict"] == "not_comparable"
    assert target["correctness"]["outputs"] == []
    for extra in ([], ["--log"], ["--format", "json"]):
        shown = bakeoff("show", *extra, doc["run_id"])
        assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    reported = bakeoff(
        "report", "--markdown", str(tmp_path / "r.md"), "--html", str(tmp_path / "r.html"), doc["run_id"]
    )
    assert reported.returncode == 0, reported.stderr
    assert doc["run_id"] in (tmp_path / "r.md").read_text()


@pytest.mark.parametrize("name", list(CASES))
def test_the_hints_to_show_a_run_again_carry_the_db_it_was_given(name):
    from bakeoff.store.connection import db_flag

    run = _stored(name)
    assert db_flag(None) == "" and db_flag("my runs/k.db") == " --db 'my runs/k.db'"
    given = " ".join(_terminal(run_view(run, where="my runs/k.db", width=160, db_flag=db_flag("my runs/k.db"))).split())
    assert f"show again with `bakeoff show {run.run_id} --db 'my runs/k.db'`" in given
    plain = " ".join(_terminal(run_view(run, where="bakeoff.db", width=160)).split())  # the control: the default
    assert f"show again with `bakeoff show {run.run_id}`" in plain and "--db" not in plain
