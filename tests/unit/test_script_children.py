"""The remap of a script's Python child processes: the hook a child's interpreter runs at start,
its ledger written home, and the runner's merge of the children's ledgers into the run's.

The seeded fault is the control: the same child, started without the hook's environment, fails
on ``.cuda()`` on this CPU-only machine; with it, the child runs on the CPU and its rewrites
come back with their counts. A user's own ``sitecustomize`` runs either way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bakeoff.script import children
from bakeoff.script.child_reports import LEDGERS, ChildReport, child_notes, merge_ledgers, read_children, with_children
from bakeoff.script.children import ENV, remapped_children
from bakeoff.script.ledger import Rewrite

SRC = Path(__file__).resolve().parents[2] / "src"
SCRIPTS = Path(__file__).resolve().parents[1] / "fixtures" / "scripts"


def _report(label: str, *rows: Rewrite, pid: int = 1, ended: bool = True, started: float = 0.0) -> ChildReport:
    return ChildReport(1, pid, 0, label, False, ended, started, None, rows)


def test_children_rewrites_are_summed_per_api_and_site_and_marked_with_their_processes():
    parent = [Rewrite("Tensor.cuda", 2, "train.py:3").to_dict()]
    sync = Rewrite("torch.cuda.synchronize", 1, "train.py:10")
    reports = [
        _report("SpawnPoolWorker-1", Rewrite("Tensor.cuda", 3, "train.py:9"), sync),
        _report("SpawnPoolWorker-2", Rewrite("Tensor.cuda", 1, "train.py:9"), pid=2),
        _report("python child.py", Rewrite("Tensor.cuda", 1, "child.py:4", True, "flagged"), pid=3),
    ]
    merged = merge_ledgers(parent, reports)
    assert merged[0] == parent[0]  # the script's own rows stay as they are
    rows = {(r["api"], r["site"]): (r["count"], r["numerics"]) for r in merged[1:]}
    assert rows == {
        ("Tensor.cuda", "train.py:9 (in 2 child processes: SpawnPoolWorker-1, SpawnPoolWorker-2)"): (4, False),
        ("torch.cuda.synchronize", "train.py:10 (in child process SpawnPoolWorker-1)"): (1, False),
        ("Tensor.cuda", "child.py:4 (in child process python child.py)"): (1, True),
    }


def test_the_run_says_how_many_children_ran_remapped_and_which_did_not_end(tmp_path):
    folder = tmp_path / LEDGERS
    folder.mkdir()
    later = _report("SpawnPoolWorker-2", Rewrite("Tensor.cuda", 1, "a.py:1"), pid=9, ended=False, started=2.0)
    first = _report("python child.py", pid=10, started=1.0)
    for report in (later, first):
        (folder / f"{report.pid}.json").write_text(json.dumps(report.to_dict()))
    (folder / "11.json").write_text("{not json")  # half written: skipped
    assert [r.label for r in read_children(tmp_path)] == ["python child.py", "SpawnPoolWorker-2"]
    result = with_children({"ledger": [], "exit_code": 0}, tmp_path)
    assert result["children"] == {"remapped": 2, "not_ended": ["SpawnPoolWorker-2"], "errors": []}
    notes = child_notes(result["children"])
    assert notes[0] == "2 child processes ran remapped, not audited"
    assert "1 of them did not end normally" in notes[1] and "SpawnPoolWorker-2" in notes[1]
    # no child: nothing added, nothing said
    assert with_children({"ledger": []}, tmp_path / "none") == {"ledger": []} and child_notes(None) == []


def test_the_hook_is_a_no_op_in_the_launchers_own_process(monkeypatch):
    monkeypatch.setenv(ENV, json.dumps({"map": {"cuda": "cpu"}, "launcher": os.getpid(), "out": "/nonexistent"}))
    finders = list(sys.meta_path)
    children.arm_from_env()
    assert children._state is None and sys.meta_path == finders


def test_the_environment_is_set_only_around_a_remapped_script_and_restored(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.delenv(ENV, raising=False)
    with remapped_children({}, strict=False, out=tmp_path):  # the script as written: nothing
        assert ENV not in os.environ and os.environ["PYTHONPATH"] == "/elsewhere"
    with remapped_children({"cuda": "cpu"}, strict=True, out=tmp_path):
        site = str(tmp_path.resolve() / children.SITE)
        assert os.environ["PYTHONPATH"] == os.pathsep.join([site, "/elsewhere"])
        config = json.loads(os.environ[ENV])
        assert config["map"] == {"cuda": "cpu"} and config["strict"] and config["launcher"] == os.getpid()
    assert ENV not in os.environ and os.environ["PYTHONPATH"] == "/elsewhere" and children._state is None


@pytest.mark.isolated
def test_a_child_runs_remapped_only_with_the_hook_and_a_users_sitecustomize_still_runs(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    (work / "child_cuda.py").write_text((SCRIPTS / "child_cuda.py").read_text())
    users = tmp_path / "users"
    users.mkdir()
    (users / "sitecustomize.py").write_text('import os\nos.environ["USER_SITE_RAN"] = "yes"\n')
    (work / "check.py").write_text("import os\nprint('user sitecustomize:', os.environ.get('USER_SITE_RAN'))\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(users), str(SRC)]))
    monkeypatch.chdir(work)

    def child(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120)

    # the control: no hook, the child as written fails on .cuda() here (no CUDA)
    plain = child("child_cuda.py", "2")
    assert plain.returncode != 0 and "CUDA" in plain.stderr, plain.stderr
    assert "user sitecustomize: yes" in child("check.py").stdout
    out = tmp_path / "out"
    with remapped_children({"cuda": "cpu"}, strict=False, out=out):
        hooked = child("child_cuda.py", "2")
        users_too = child("check.py")  # never imports torch: not remapped, not reported
    assert hooked.returncode == 0, hooked.stderr
    assert hooked.stdout.strip() == "child on cpu: 8.0"
    assert "user sitecustomize: yes" in users_too.stdout, users_too.stderr
    (report,) = read_children(out)
    assert report.ended and not report.forked and report.error is None
    assert report.label == "python child_cuda.py 2"
    rows = {(r.api, r.count, r.site) for r in report.ledger}
    assert rows == {("Tensor.cuda", 1, "child_cuda.py:8"), ("torch.cuda.synchronize", 2, "child_cuda.py:11")}
