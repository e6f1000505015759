"""``bakeoff sweep --executor ray`` on a real local Ray cluster (loopback only), through the CLI.

The same population runs on the local pool and on Ray: the cells both can run must get the same
grades and categories; the cells only Ray can fail on (a build that kills the Ray worker, one
that never returns) become cells with their category; an ``emu`` target asks for its resource,
and a target the cluster cannot offer is refused with one line. Every sweep runs in a
subprocess whose ``TMPDIR`` is its own, so the Ray processes, the tasks' scratch stores and the
workers' files of that sweep are found (or found gone) there.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from tests.conftest import bakeoff_cli, stored_cells, sweep_until_stored

from bakeoff.store import Store
from bakeoff.sweep.ray_executor import cell_resources, cell_timeout, missing_resource
from bakeoff.target.spec import Target, parse_target

pytest.importorskip("ray")

FIXTURE = Path(__file__).parent / "fixtures" / "sweep_models.py"
TARGETS = "cpu,cpu?threads=1"
TIMEOUT = "20"  # seconds a target step may take: generous, the machine may be busy


def spec(function: str, **options: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in options.items())
    return f"py:{FIXTURE}:{function}" + (f"?{query}" if query else "")


SHARED = [
    spec("fine"),
    spec("crashes"),
    spec("killed"),
    spec("wrong"),
    spec("does_not_build"),
    spec("fine", width="4"),
]
HANG_TIMEOUT = 3.0  # the hanging cell never reaches a target: its cell timeout is 2 x 3 x (1 + 1) = 12 s


def _tmpdir() -> Path:
    # short: Ray's socket paths live under it and must stay within the 107 bytes a socket name has
    return Path(tempfile.mkdtemp(prefix="bkr", dir="/tmp"))


def bakeoff(
    *args: str, tmp: Path, timeout: int = 400, python: tuple[str, ...] = ("-m", "bakeoff"), emu: bool = False
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TMPDIR": str(tmp)}
    env.pop("BAKEOFF_EMU", None)
    if emu:
        env["BAKEOFF_EMU"] = "1"
    env.pop("RAY_TMPDIR", None)
    env.pop("RAY_ADDRESS", None)
    if python == ("-m", "bakeoff"):
        return bakeoff_cli(*args, timeout=timeout, env=env)
    return subprocess.run([sys.executable, *python, *args], capture_output=True, text=True, timeout=timeout, env=env)


def ray_processes(tmp: Path) -> list[psutil.Process]:
    """Processes of the Ray cluster that a sweep with ``TMPDIR=tmp`` started (they name its session dir)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        with_tmp = any(str(tmp) in part for part in process.info["cmdline"] or ())
        if with_tmp and process.pid != os.getpid():
            found.append(process)
    return found


def _write(path: Path, specs: list[str]) -> Path:
    path.write_text("\n".join(specs) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def here(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ray")


@pytest.fixture(scope="module")
def local(here: Path) -> dict:
    tmp = _tmpdir()
    population = _write(here / "shared.txt", SHARED)
    db = here / "local.db"
    done = bakeoff(
        "sweep", str(population), "--on", TARGETS, "--timing", "none", "--timeout", TIMEOUT, "--db", str(db),
        "--format", "json", tmp=tmp,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    shutil.rmtree(tmp, ignore_errors=True)
    return {(c["workload"], c["target"]): c for c in json.loads(done.stdout)["cells"]}


@pytest.fixture(scope="module")
def on_ray(here: Path) -> dict:
    """The same population, plus a workload whose build ends the Ray worker, on local Ray."""
    tmp = _tmpdir()
    population = _write(here / "all.txt", [SHARED[0], spec("exits_in_ray"), *SHARED[1:]])
    db = here / "ray.db"
    started = time.monotonic()
    done = bakeoff(
        "sweep", str(population), "--on", TARGETS, "--timing", "none", "--timeout", TIMEOUT, "--db", str(db),
        "--executor", "ray", "--format", "json", tmp=tmp,
    )  # fmt: skip
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(done.stdout)
    yield {
        "data": data,
        "cells": {(c["workload"], c["target"]): c for c in data["cells"]},
        "db": db,
        "tmp": tmp,
        "seconds": seconds,
        "stderr": done.stderr,
    }
    shutil.rmtree(tmp, ignore_errors=True)


def test_shared_cells_grade_as_on_the_local_pool(local, on_ray):
    for workload in SHARED:
        for target in TARGETS.split(","):
            here, there = local[(workload, target)], on_ray["cells"][(workload, target)]
            assert (there["grade"], there["category"]) == (here["grade"], here["category"]), (here, there)
    # and they are the grades each fault must give (the seeded faults are caught, the controls clean)
    expected = {
        "fine": ("generates_same", ""),
        "crashes": ("builds", "crash"),
        "killed": ("builds", "out_of_memory"),
        "wrong": ("on_device", ""),
        "does_not_build": (None, ""),
    }
    for function, (grade, category) in expected.items():
        cell = on_ray["cells"][(spec(function), "cpu")]
        assert (cell["grade"], cell["category"]) == (grade, category), cell
    assert on_ray["cells"][(spec("fine", width="4"), "cpu?threads=1")]["grade"] == "generates_same"


def test_a_task_whose_worker_dies_is_a_crash_cell(on_ray):
    for target in TARGETS.split(","):
        crashed = on_ray["cells"][(spec("exits_in_ray"), target)]
        assert crashed["grade"] is None and crashed["category"] == "crash", crashed
        assert "WorkerCrashedError" in crashed["reason"] and "died" in crashed["reason"]
    # the cell after it ran on a new worker and is clean
    assert on_ray["cells"][(spec("fine", width="4"), "cpu")]["grade"] == "generates_same"


def test_a_task_that_hangs_is_cancelled_at_the_cell_timeout(here):
    tmp = _tmpdir()
    population = _write(here / "hang.txt", [spec("hangs_in_ray")])
    started = time.monotonic()
    done = bakeoff(
        "sweep", str(population), "--on", "cpu", "--timing", "none", "--timeout", f"{HANG_TIMEOUT:g}",
        "--executor", "ray", "--db", str(here / "hang.db"), "--format", "json", tmp=tmp,
    )  # fmt: skip
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    (hung,) = json.loads(done.stdout)["cells"]
    limit = cell_timeout(HANG_TIMEOUT, 1)
    assert hung["grade"] is None and hung["category"] == "timeout", hung
    assert f"ran past {limit:g} s (the cell timeout)" in hung["reason"]
    assert seconds < limit + 90  # cancelled at its limit, not waited out
    _, alive = psutil.wait_procs(ray_processes(tmp), timeout=20)
    assert alive == []  # the cancelled task's worker and its target workers too
    shutil.rmtree(tmp, ignore_errors=True)


def test_every_cell_is_stored_once_and_only_by_the_driver(on_ray):
    db = on_ray["db"]
    store = Store.open(db, create=False)
    (sweep,) = store.list_sweeps()
    cells = store.sweep_cells(sweep.id)
    assert sorted(c.workload_spec for c in cells) == sorted([*SHARED, spec("exits_in_ray")])
    with sqlite3.connect(db) as conn:
        runs = dict(conn.execute("SELECT workload_spec, count(*) FROM runs GROUP BY workload_spec").fetchall())
    with_run = {c.workload_spec for c in cells if c.run_id is not None}
    assert runs == dict.fromkeys(with_run, 1)
    assert with_run == set(SHARED) - {spec("does_not_build")}
    # each run's baseline is in the driver's store: its record, and its tensors in the driver's
    # artifacts with the hash the task computed
    for cell in cells:
        if cell.run_id is None:
            continue
        run = store.get_run(cell.run_id)
        (info,) = [i for i, _ in store.baselines([cell.workload_spec]) if i.id == run.baseline_id]
        assert store.baseline_problem(info) is None
        assert store.baseline_file(info).is_file()
    # the scratch store of every task is gone: the one whose worker died mid-build could not
    # remove its own, and a later task removed it; no task left a database anywhere else
    assert list(on_ray["tmp"].glob("bakeoff-cell-*")) == []
    assert list(on_ray["tmp"].glob("**/*.db")) == []


def test_no_ray_process_outlives_the_sweep(on_ray):
    assert (on_ray["tmp"] / "ray").is_dir()  # the cluster was this sweep's own
    _, alive = psutil.wait_procs(ray_processes(on_ray["tmp"]), timeout=20)
    assert alive == []


def test_an_emu_target_gets_a_node_with_emu(here):
    # a long step timeout: a worker that loads emu while its shared build is being redone must
    # not be killed holding the build's lock (every later load would wait on it)
    tmp = _tmpdir()
    population = _write(here / "emu.txt", [spec("fine")])
    db = here / "emu.db"
    done = bakeoff(
        "sweep", str(population), "--on", "emu", "--timing", "none", "--timeout", "600", "--executor", "ray",
        "--db", str(db), "--format", "json", tmp=tmp, emu=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (cell,) = json.loads(done.stdout)["cells"]
    assert (cell["target"], cell["grade"]) == ("emu", "generates_same"), cell
    assert ray_processes(tmp) == []
    shutil.rmtree(tmp, ignore_errors=True)


def test_resources_per_target_and_the_refusal_when_no_node_offers_one():
    emu, cuda, neuron = Target("emu"), parse_target("cuda"), parse_target("neuron")
    assert cell_resources([Target("cpu"), emu, cuda, neuron]) == {"emu": 1.0, "GPU": 1.0, "neuron_cores": 1.0}
    assert missing_resource([Target("cpu"), emu], [{"CPU": 2.0, "emu": 1.0}]) is None
    refusal = missing_resource([Target("cpu"), emu], [{"CPU": 2.0}])
    assert refusal is not None and "offers 'emu', which the target emu needs" in refusal.message
    assert """ray start --resources='{"emu": 1}'""" in (refusal.hint or "")
    # one cell, one node: a GPU here and an emu there make no node for a cell needing both
    split = missing_resource([cuda, emu], [{"CPU": 1.0, "GPU": 1.0}, {"CPU": 1.0, "emu": 1.0}])
    assert split is not None and "at once" in split.message


def test_a_target_the_cluster_lacks_is_refused_in_one_line(here):
    tmp = _tmpdir()
    db = here / "refused.db"
    population = _write(here / "one.txt", [spec("fine")])
    done = bakeoff(
        "sweep", str(population), "--on", "cpu,cuda", "--executor", "ray", "--db", str(db), tmp=tmp, emu=True
    )
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert len(line.splitlines()) == 1, line
    assert "no node of the local Ray cluster offers 'GPU', which the target cuda needs" in line
    assert "ray start --num-gpus=1" in line
    assert not db.exists() and not (tmp / "ray").exists()  # refused before a cluster or a sweep existed
    shutil.rmtree(tmp, ignore_errors=True)


def test_without_ray_the_executor_is_one_line_and_stores_nothing(here):
    tmp = _tmpdir()
    db = here / "noray.db"
    population = _write(here / "one.txt", [spec("fine")])
    hide = "import sys; sys.modules['ray'] = None; from bakeoff.cli.main import main; sys.argv[0] = 'bakeoff'; main()"
    done = bakeoff("sweep", str(population), "--executor", "ray", "--db", str(db), tmp=tmp, python=("-c", hide))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == "bakeoff: error: the ray executor needs ray: pip install 'bakeoff[ray]'"
    assert not db.exists()
    shutil.rmtree(tmp, ignore_errors=True)


def test_ctrl_c_stops_the_cluster_and_the_sweep_resumes_locally(here):
    tmp = _tmpdir()
    specs = [spec("fine", width=str(w), slow="1") for w in range(2, 5)]
    population = _write(here / "slow.txt", specs)
    db = here / "interrupted.db"
    env = {k: v for k, v in os.environ.items() if k not in ("BAKEOFF_EMU", "RAY_ADDRESS", "RAY_TMPDIR")}
    env["TMPDIR"] = str(tmp)
    command = [sys.executable, "-m", "bakeoff", "sweep", str(population), "--on", "cpu", "--timing", "none"]
    process = sweep_until_stored([*command, "--executor", "ray", "--db", str(db)], db, 1, env=env)
    assert ray_processes(tmp), "no Ray cluster to stop"
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err[-2000:]
    _, alive = psutil.wait_procs(ray_processes(tmp), timeout=20)
    assert alive == [], alive
    stored = stored_cells(db)
    assert 1 <= stored < len(specs)
    store = Store.open(db, create=False)
    (sweep,) = store.list_sweeps()
    resumed = bakeoff("sweep", "--resume", sweep.id, "--db", str(db), "--format", "json", tmp=tmp)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert sorted(c.workload_spec for c in store.sweep_cells(sweep.id)) == sorted(specs)
    with sqlite3.connect(db) as conn:
        runs = conn.execute("SELECT workload_spec, count(*) FROM runs GROUP BY workload_spec").fetchall()
    assert sorted(runs) == sorted((s, 1) for s in specs)
    shutil.rmtree(tmp, ignore_errors=True)
