"""Coverage sweeps end to end: warm workers, every way a cell fails, resume after kill -9, expectations.

One sweep (module fixture) runs a population with a clean control and one workload per fault,
on two eager CPU targets, through the CLI; the tests read what it stored.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from tests.conftest import bakeoff_cli, stored_cells, sweep_until_stored

from bakeoff.store import Store

FIXTURE = Path(__file__).parent / "fixtures" / "sweep_models.py"
TARGETS = "cpu,cpu?threads=1"
CRAFTED = "<img src=x onerror=alert(1)>"


def spec(function: str, **options: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in options.items())
    return f"py:{FIXTURE}:{function}" + (f"?{query}" if query else "")


POPULATION = [
    spec("fine"),
    spec("fine", width="4"),
    spec("fine", label=CRAFTED),
    spec("crashes"),
    spec("fine", width="6"),  # right after a crash: a new worker serves it
    spec("killed"),
    spec("unsupported"),
    spec("unsupported", width="4"),
    spec("hangs"),
    spec("wrong"),
    spec("does_not_build"),
    # the build itself ends or blocks the process that serves the cell: a fresh one goes on
    spec("hangs_building"),
    spec("crashes_building"),
    spec("eats_memory_building"),
    spec("fine", width="5"),
]
CLEAN = [spec("fine"), spec("fine", label=CRAFTED), *(spec("fine", width=w) for w in "465")]


def bakeoff(*args: str, timeout: int = 600, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    return bakeoff_cli(*args, timeout=timeout, env=env or dict(os.environ))


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> dict:
    here = tmp_path_factory.mktemp("sweep")
    population = here / "models.txt"
    population.write_text("# every way a cell can end\n" + "\n".join(POPULATION) + "\n", encoding="utf-8")
    db = here / "kb.db"
    scratch = here / "tmp"  # the sweep's temporary files, and a mark on every process it starts
    scratch.mkdir()
    done = bakeoff(
        "sweep", str(population), "--on", TARGETS, "--timing", "none", "--timeout", "8", "--db", str(db),
        "--format", "json", env={**os.environ, "TMPDIR": str(scratch)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(done.stdout)
    cells = {(c["workload"], c["target"]): c for c in data["cells"]}
    return {
        "data": data, "cells": cells, "db": db, "here": here, "stderr": done.stderr, "population": population,
        "scratch": scratch,
    }  # fmt: skip


def grade(swept: dict, workload: str, target: str = "cpu") -> dict:
    return swept["cells"][(workload, target)]


def test_every_cell_is_stored_once_with_its_grade(swept):
    data = swept["data"]
    assert data["population"]["size"] == len(POPULATION) and data["population"]["unit"] == "workload"
    assert data["population"]["transformers"]  # recorded with the sweep
    assert data["pending"] == []
    assert len(data["cells"]) == 2 * len(POPULATION)
    for target in ("cpu", "cpu?threads=1"):
        for clean in CLEAN:
            assert grade(swept, clean, target)["grade"] == "generates_same", grade(swept, clean, target)


@pytest.mark.parametrize(
    ("function", "grade_reached", "category", "words"),
    [
        # prepared, then the first forward pass ended the worker: built, never ran
        ("crashes", "builds", "crash", "SIGABRT"),
        ("killed", "builds", "out_of_memory", "SIGKILL"),
        ("hangs", "builds", "timeout", "within 8 s"),
        ("unsupported", "builds", "exception", "aten::_fused_thing"),
        ("wrong", "on_device", "", "correctness fail"),
        ("does_not_build", None, "", "config inconsistent"),
        ("hangs_building", None, "timeout", "building the workload and its baseline took over 8 s"),
        ("crashes_building", None, "crash", "died from signal SIGABRT while building the workload"),
        ("eats_memory_building", None, "out_of_memory", "killed by SIGKILL"),
    ],
)
def test_each_fault_is_its_cells_failure(swept, function, grade_reached, category, words):
    for target in ("cpu", "cpu?threads=1"):
        cell = grade(swept, spec(function), target)
        assert cell["grade"] == grade_reached, cell
        assert cell["category"] == category, cell
        assert words in cell["reason"], cell


def test_failures_cluster_by_reason(swept):
    reasons = {r["reason"]: r for r in swept["data"]["reasons"]}
    op = reasons["aten::_fused_thing not implemented (NotImplementedError)"]
    assert op["count"] == 2 and sorted(op["workloads"]) == sorted([spec("unsupported"), spec("unsupported", width="4")])
    assert op["targets"] == ["cpu", "cpu?threads=1"] and op["stopped_at"] == ["builds"]
    # the clean controls are in no cluster
    assert not any(spec("fine") in r["workloads"] for r in swept["data"]["reasons"])


def test_coverage_figures_count_the_population(swept):
    figures = swept["data"]["figures"]["cpu"]["grades"]
    size = len(POPULATION)
    # 5 clean; crashes, killed, hangs and 2 'unsupported' stop after builds, 'wrong' after
    # on_device; the four that do not build (or end or block their builder) reach nothing
    assert figures["builds"]["count"] == 11 and figures["runs"]["count"] == 6
    assert figures["on_device"]["count"] == 6 and figures["correct"]["count"] == 5
    assert figures["compiles_clean"]["count"] == figures["generates_same"]["count"] == 5
    assert figures["generates_same"]["share"] == pytest.approx(5 / size)


def test_warm_workers_serve_cells_and_a_crashed_one_is_replaced(swept):
    store = Store.open(swept["db"], create=False)
    (sweep,) = store.list_sweeps()
    runs = {c.workload_spec: c.run_id for c in store.sweep_cells(sweep.id)}

    def pid(workload: str, target: str) -> int:
        result = store.get_run(runs[workload]).result(target)
        return result.conditions["rounds"][0]["pid"]

    for target in ("cpu", "cpu?threads=1"):
        first = pid(spec("fine"), target)
        assert pid(spec("fine", width="4"), target) == first  # the same warm worker, not a new process
        assert pid(spec("fine", label=CRAFTED), target) == first
        assert pid(spec("fine", width="6"), target) != first  # after the crash: a new worker
    assert pid(spec("fine"), "cpu") != pid(spec("fine"), "cpu?threads=1")  # a worker per target
    cells = {c.workload_spec: c for c in store.sweep_cells(sweep.id)}
    assert "RuntimeError: config inconsistent" in cells[spec("does_not_build")].error["message"]
    # the hung build's stack, as faulthandler dumped it before the runner was stopped
    assert "hangs_building" in cells[spec("hangs_building")].error["stack"]
    # after the builds that ended their runner, a new runner (and new target workers) served on
    assert pid(spec("fine", width="5"), "cpu") not in (pid(spec("fine"), "cpu"), pid(spec("fine", width="6"), "cpu"))


def test_no_process_or_file_of_the_sweep_is_left(swept):
    """Runners ended for a hung, crashed or killed build took their target workers and their
    temporary files with them; the orderly end of the sweep took the rest."""
    mark = str(swept["scratch"])
    alive = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if process.environ().get("TMPDIR") == mark:
                alive.append(process.cmdline())
    assert alive == []
    # (torch's own compile cache, torchinductor_<user>, is meant to stay)
    assert [p.name for p in swept["scratch"].iterdir() if not p.name.startswith("torchinductor_")] == []


def test_coverage_command_and_reports(swept, tmp_path):
    sweep_id = swept["data"]["sweep_id"]
    html, md = tmp_path / "c.html", tmp_path / "c.md"
    shown = bakeoff("coverage", sweep_id[:6], "--db", str(swept["db"]), "--html", str(html), "--markdown", str(md))
    assert shown.returncode == 0, shown.stderr
    assert "aten::_fused_thing not implemented" in shown.stdout
    assert f"{len(CLEAN)}/{len(POPULATION)}" in shown.stdout and "grade ladder" in shown.stdout
    page = html.read_text(encoding="utf-8")
    # in the heat-map's data: entity-escaped for plotly, then JSON-escaped for the <script> block
    assert CRAFTED not in page and "\\u0026lt;img src=x onerror=alert(1)\\u0026gt;" in page
    assert "| aten::_fused_thing not implemented (NotImplementedError) |" in md.read_text(encoding="utf-8")
    listed = bakeoff("sweeps", "--db", str(swept["db"]), "--format", "json")
    assert json.loads(listed.stdout)[0]["stored"] == len(POPULATION)
    shown = bakeoff("show", sweep_id[:8], "--db", str(swept["db"]))  # a sweep's id where a run's goes
    assert shown.returncode == 2 and shown.stderr.strip().endswith(
        f"({sweep_id} is a sweep: read it with `bakeoff coverage {sweep_id}`)"
    ), shown.stderr
    for option in ("--html", "--markdown"):  # a page that cannot be written: one line, exit 2
        nowhere = bakeoff("coverage", sweep_id, "--db", str(swept["db"]), option, str(tmp_path / "no" / "c.page"))
        assert nowhere.returncode == 2 and "does not exist" in nowhere.stderr, nowhere.stderr
        assert len(nowhere.stderr.strip().splitlines()) == 1, nowhere.stderr


def test_expectations_classify_and_fail_on_a_regression(swept, tmp_path):
    sweep_id, db = swept["data"]["sweep_id"], str(swept["db"])
    expected = tmp_path / "expected.toml"
    written = bakeoff("sweep", "--resume", sweep_id, "--db", db, "--expect", str(expected), "--write-expect")
    assert written.returncode == 0, written.stderr  # nothing pending: the resume only reports
    for args, words in ((["--on", "cpu+aot_eager"], "targets"), (["--timing", "full"], "timing")):
        changed = bakeoff("sweep", "--resume", sweep_id, "--db", db, *args)  # would be silently ignored
        assert changed.returncode == 2 and f"a resumed sweep keeps its {words}" in changed.stderr, changed.stderr
    same = bakeoff("coverage", sweep_id, "--db", db, "--expect", str(expected), "--format", "json")
    assert same.returncode == 0, same.stderr
    statuses = {e["status"] for e in json.loads(same.stdout)["expectations"]}
    assert statuses == {"pass", "expected_failure"}
    text = expected.read_text(encoding="utf-8")
    wrong = f'"{spec("wrong")}" = "on_device"'
    assert wrong in text
    edited = text.replace(wrong, f'"{spec("wrong")}" = "generates_same"', 1)  # it used to be right
    edited = edited.replace(f'"{spec("crashes")}" = "builds"', f'"{spec("crashes")}" = "runs"', 1)
    edited = edited.replace(f'"{spec("fine", width="6")}" = "generates_same"\n', "", 1)  # a new cell
    edited += '"py:gone.py:model" = "generates_same"\n'  # listed under the last target, not swept
    expected.write_text(edited, encoding="utf-8")
    diff = bakeoff("coverage", sweep_id, "--db", db, "--expect", str(expected), "--format", "json")
    assert diff.returncode == 1, diff.stderr
    found = {(e["workload"], e["target"]): e["status"] for e in json.loads(diff.stdout)["expectations"]}
    assert found[(spec("wrong"), "cpu")] == "regressed"
    assert found[(spec("crashes"), "cpu")] == "regressed"
    assert found[(spec("fine", width="6"), "cpu")] == "new"
    assert found[("py:gone.py:model", "cpu?threads=1")] == "missing"
    assert found[(spec("fine"), "cpu")] == "pass"
    assert found[(spec("hangs"), "cpu")] == "expected_failure"
    # a clean sweep against expectations of failure: improved, exit 0
    improved = text.replace(f'"{spec("fine")}" = "generates_same"', f'"{spec("fine")}" = "runs"', 1)
    expected.write_text(improved, encoding="utf-8")
    better = bakeoff("coverage", sweep_id, "--db", db, "--expect", str(expected), "--format", "json")
    assert better.returncode == 0
    assert {e["status"] for e in json.loads(better.stdout)["expectations"]} == {"pass", "expected_failure", "improved"}


def slow_sweep(tmp_path: Path, count: int, slow: str) -> tuple[list[str], Path, list[str]]:
    """A population of ``count`` clean workloads that each take ``slow`` seconds to build (long
    enough to stop the sweep mid-way): its specs, the database, and the command that sweeps it."""
    population = tmp_path / "slow.txt"
    specs = [spec("fine", width=str(w), slow=slow) for w in range(2, 2 + count)]
    population.write_text("\n".join(specs) + "\n", encoding="utf-8")
    db = tmp_path / "kb.db"
    command = [sys.executable, "-m", "bakeoff", "sweep", str(population), "--on", "cpu", "--timing", "none"]
    return specs, db, [*command, "--db", str(db)]


def test_a_sweep_killed_with_sigkill_resumes_to_every_cell_exactly_once(tmp_path):
    specs, db, command = slow_sweep(tmp_path, 8, "0.7")
    scratch = tmp_path / "tmp"  # the sweep's temporary directories
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    process = sweep_until_stored(command, db, 2, env=env)
    workers = psutil.Process(process.pid).children(recursive=True)
    assert workers, "no worker processes to outlive the sweep"
    os.kill(process.pid, signal.SIGKILL)
    process.wait(30)
    _, alive = psutil.wait_procs(workers, timeout=20)
    assert not alive, f"workers outlived the killed sweep: {alive}"
    left = [p.name for p in scratch.iterdir()]
    assert any(name.startswith(f"bakeoff-worker-{process.pid}-") for name in left), left  # the runner's, orphaned
    stored = stored_cells(db)
    assert 2 <= stored < len(specs)
    store = Store.open(db, create=False)
    (sweep,) = store.list_sweeps()
    resumed = bakeoff("sweep", "--resume", sweep.id, "--db", str(db), "--format", "json", env=env)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert [p.name for p in scratch.iterdir() if not p.name.startswith("torchinductor_")] == []  # removed by the resume
    cells = store.sweep_cells(sweep.id)
    assert sorted(c.workload_spec for c in cells) == sorted(specs)  # every cell, exactly once
    with sqlite3.connect(db) as conn:
        runs = conn.execute("SELECT workload_spec, count(*) FROM runs GROUP BY workload_spec").fetchall()
    assert sorted(runs) == sorted((s, 1) for s in specs)  # no run lost, none twice, none without its cell
    assert {c["grade"] for c in json.loads(resumed.stdout)["cells"]} == {"generates_same"}


def test_bad_input_is_one_line_and_stores_nothing(tmp_path):
    db = tmp_path / "kb.db"
    listing = tmp_path / "bad.txt"
    listing.write_text(f"{spec('fine')}\nnot a spec\n", encoding="utf-8")
    good = tmp_path / "good.txt"
    good.write_text(f"{spec('fine')}\n", encoding="utf-8")
    sizes = tmp_path / "sizes.txt"
    sizes.write_text("arch:llama\narch:gpt2?layers=abc\n", encoding="utf-8")
    for args, words in (
        ([str(listing)], f"{listing}:2: malformed workload"),
        ([str(sizes)], f"{sizes}:2: option layers='abc' in arch:gpt2?layers=abc is not an integer"),
        ([str(tmp_path / "missing.txt")], "no workload list"),
        (["arch:everything"], "unknown population"),
        ([str(listing), "--on", "cpu+nosuchbackend"], "nosuchbackend"),
        (["--resume", "abc123"], "no database"),
        ([str(listing), "--write-expect"], "--write-expect needs --expect"),
        ([str(good), "--check", "nosuchcheck"], "unknown check 'nosuchcheck'"),
        ([str(good), "--check", "correctness?rtol=abc"], "rtol"),
        ([str(good), "--env", "NOEQUALS"], "'NOEQUALS' is not KEY=VALUE"),
        ([str(good), "--expect", str(tmp_path / "no" / "e.toml"), "--write-expect"], "does not exist"),
    ):
        done = bakeoff("sweep", *args, "--db", str(db))
        assert done.returncode == 2, (args, done.stderr)
        assert words in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not db.exists()  # refused before a database was made


EVOLVING = """
import torch

def make():
    torch.manual_seed(0)
    return torch.nn.Linear(4, 4), (torch.randn(2, 4),)
"""


def test_two_sweeps_of_one_population_show_what_started_and_stopped_working(tmp_path):
    model = tmp_path / "evolving.py"
    model.write_text(EVOLVING, encoding="utf-8")
    evolving = f"py:{model}:make"
    population = tmp_path / "pair.txt"
    population.write_text(f"{spec('fine')}\n{spec('switchable')}\n{evolving}\n", encoding="utf-8")
    db = str(tmp_path / "kb.db")
    ids = []
    # the second "release" breaks one workload on the target (not in the baseline: the fixture
    # reads the variable in target workers only; not an adjustment either, so the two runs of
    # the cell stay comparable) and another no longer builds at all
    for release in ({}, {"BAKEOFF_FIXTURE_WRONG": "1"}):
        args = ["sweep", str(population), "--on", "cpu?threads=1", "--timing", "none", "--format", "json"]
        done = bakeoff(*args, "--db", db, env={**os.environ, **release})
        assert done.returncode == 0, done.stderr[-2000:]
        ids.append(json.loads(done.stdout)["sweep_id"])
        model.write_text(EVOLVING.replace("torch.manual_seed(0)", "raise ValueError('width 4 is gone')"))
    later = bakeoff("coverage", ids[1], "--against", ids[0], "--db", db, "--format", "json")
    assert later.returncode == 1, later.stderr  # a cell stopped working
    found = {e["workload"]: (e["status"], e["expected"], e["actual"]) for e in json.loads(later.stdout)["expectations"]}
    assert found == {
        spec("fine"): ("pass", "generates_same", "generates_same"),
        spec("switchable"): ("regressed", "generates_same", "on_device"),
        evolving: ("regressed", "generates_same", "none"),
    }
    shown = bakeoff("coverage", ids[1], "--against", ids[0], "--db", db)
    assert f"against sweep {ids[0]} (same library versions)" in shown.stdout and "2 regressed" in shown.stdout
    back = bakeoff("coverage", ids[0], "--against", ids[1], "--db", db, "--format", "json")
    assert back.returncode == 0
    assert {e["status"] for e in json.loads(back.stdout)["expectations"]} == {"pass", "improved"}

    # the same two sweeps through `bakeoff regressions`: grades first, then each cell's two runs
    changes = bakeoff("regressions", "--sweep", ids[1], "--db", db, "--format", "json", "--strict")
    assert changes.returncode == 1, changes.stderr  # the earlier sweep of the population was found
    data = json.loads(changes.stdout)
    assert data["against"] == ids[0] and data["regressed"] is True
    assert {c["workload"]: c["status"] for c in data["cells"]} == {
        spec("fine"): "pass", spec("switchable"): "regressed", evolving: "regressed",
    }  # fmt: skip
    metrics = {m["workload"]: m for m in data["metrics"]}
    assert set(metrics) == {spec("fine"), spec("switchable")}  # no run of the one that no longer builds
    assert metrics[spec("fine")]["outcome"] not in ("regressed", "failed"), metrics[spec("fine")]
    broken = metrics[spec("switchable")]
    assert broken["outcome"] == "regressed", broken
    assert any(m["metric"] == "correctness" and m["outcome"] == "regressed" for m in broken["metrics"]), broken
    text = bakeoff("regressions", "--sweep", ids[1], "--db", db)
    assert text.returncode == 0  # not --strict
    assert f"sweep {ids[0]} (same library versions)" in text.stdout and "2 regressed" in text.stdout
    # the clean direction is the control: nothing regressed, --strict passes
    clean = bakeoff("regressions", "--sweep", ids[0], "--against", ids[1], "--db", db, "--format", "json", "--strict")
    assert clean.returncode == 0, clean.stdout[-2000:]
    assert json.loads(clean.stdout)["regressed"] is False
    # the first sweep has nothing before it: one line, no traceback
    first = bakeoff("regressions", "--sweep", ids[0], "--db", db)
    assert first.returncode == 2 and "no sweep of" in first.stderr and "Traceback" not in first.stderr


def test_ctrl_c_stops_a_sweep_keeping_every_finished_cell(tmp_path):
    specs, db, command = slow_sweep(tmp_path, 5, "1")
    process = sweep_until_stored(command, db, 1, text=True)
    workers = psutil.Process(process.pid).children(recursive=True)
    process.send_signal(signal.SIGINT)  # what Ctrl-C in a terminal sends
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err[-2000:]
    assert "bakeoff: interrupted: every finished cell is stored; bakeoff sweep --resume" in err, err[-2000:]
    assert "Traceback" not in err and "\n\n" not in err, err[-2000:]
    assert err.strip().splitlines()[-1].startswith("bakeoff: interrupted"), err[-2000:]  # said once, last
    _, alive = psutil.wait_procs(workers, timeout=20)
    assert not alive, f"workers outlived the interrupted sweep: {alive}"
    stored = stored_cells(db)
    assert 1 <= stored < len(specs)
    (sweep,) = Store.open(db, create=False).list_sweeps()
    # printed before the first cell and when stopped, with the --db the sweep was given: the hint runs as it reads
    assert f"resume it with bakeoff sweep --resume {sweep.id} --db {db}" in err
    assert f"bakeoff sweep --resume {sweep.id} --db {db} finishes it" in err
    resumed = bakeoff("sweep", "--resume", sweep.id, "--db", str(db), "--format", "json")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert sorted(c.workload_spec for c in Store.open(db, create=False).sweep_cells(sweep.id)) == sorted(specs)
