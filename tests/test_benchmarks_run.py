"""Every script in benchmarks/ runs with its tiny arguments and prints its figures.

The figures themselves are not judged here (no timed assertions on a shared machine): this keeps
the scripts from rotting as the library changes under them. A new script must be listed below.
Each runs forked from the test worker's warm process (``python_script``): a figure of its own
start-up is not a fresh interpreter's here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.conftest import py_workload, python_script

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
NUMBER = r"-?\d+(?:\.\d+)?"

#: script -> (tiny arguments, lines its output must contain (regular expressions), pytest marks)
SCRIPTS: dict[str, tuple[list[str], list[str], list]] = {
    "aa_calibration.py": (
        # a plain torch model: each trial starts two workers, which then need not import transformers
        ["--quick", "--workload", py_workload("mlp")],
        [
            rf"false-positive rate \(reported interval excludes 1\): {NUMBER}%",
            rf"bias: geometric mean ratio {NUMBER}; reference slowest in \d+ of 2",
            rf"spread: sd of log ratio {NUMBER}",
            rf"robust spread \(1.4826 MAD\): sd of log ratio {NUMBER}",
            rf"per-round first-sample excess: median {NUMBER}x",
            rf"round-start penalty kept out of the samples \(untimed warm call / round median\): median {NUMBER}x",
        ],
        [pytest.mark.isolated],
    ),
    "arch_coverage.py": (
        # two types (plain, SSM hybrid) in one worker process: each worker is a spawned interpreter
        # that imports torch and transformers, the most of this script's time (--quick: 5 in 2)
        ["--types", "llama,bamba", "--processes", "1"],
        [
            r"transformers \d+\.\d+\S*; \d+ causal-LM model types, 2 tried",
            r"built and ran \(build \+ 2 forwards\): 2 of 2",
            rf"time per type: median {NUMBER} s",
        ],
        [],
    ),
    "dist_collectives.py": (
        # two ranks on the test device and its backend, one size, ten calls, one round against a plain loop
        ["--quick", "--on", "emu"],
        [
            r"bakeoff dist collectives on emu \(emu\) and a plain loop, 2 ranks",
            rf"(?m)^\s+262144\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER} {NUMBER}$",
            rf"(?m)^\s+262144 plain / plain again, bus bandwidth: {NUMBER} \(each round: {NUMBER}\)$",
            rf"rank start \(forked from the check's warm process, to ready; the first world waits for its import of "
            rf"torch\): {NUMBER}, {NUMBER} s",
            rf"collectives check, 2 ranks, every collective at 256KiB: {NUMBER} s wall",
            rf"exec --nproc 2 run of a script that meets its peer: forked {NUMBER} s, fresh {NUMBER} s "
            rf"\(forked / fresh {NUMBER}\)",
        ],
        [pytest.mark.isolated],
    ),
    "exec_audit_overhead.py": (
        ["--quick"],  # the CUDA-style training script of the exec tests, on the test device
        [
            rf"\s+3 cpu\s+{NUMBER} s\s+{NUMBER} s\s+{NUMBER}x\s+not audited",
            rf"\s+3 emu\s+{NUMBER} s\s+{NUMBER} s\s+{NUMBER}x\s+{NUMBER} s",
        ],
        [pytest.mark.isolated],
    ),
    "false_alarms.py": (
        ["--quick"],  # a 1-layer llama: eager bf16 over a profile, then the seeded backends in-process
        [
            r"false alarms \(fail on an honest target\): 0 of \d+",
            r"seeded faults caught: 2 of 2",
            r"stated sensitivity held \(2x caught, 0.25x of the smallest passed\): 4 of 4",
        ],
        [pytest.mark.isolated, pytest.mark.compile],
    ),
    "first_verdict.py": (
        ["--quick", "--workload", py_workload("mlp")],  # one trial from a fresh process, timed by phase
        [
            rf"this bakeoff: median {NUMBER} s to the verdict over 1 run\(s\)",
            rf"parsing the targets \(imports torch\)\s+{NUMBER}\s+\d+%",
            rf"session: timing rounds\s+{NUMBER}\s+\d+%",
            rf"worker: spawn to ready\s+{NUMBER}",
        ],
        [pytest.mark.isolated],
    ),
    "iteration_overhead.py": (
        ["--quick", "--workload", py_workload("mlp")],  # as above
        [
            rf"timing loop, empty callable\s*: \+{NUMBER} us per iteration",
            rf"interleaved rounds: \d+ rounds, \d+ samples; wall {NUMBER} s",
            rf"server dispatch: start - arrival at an idle server p50 {NUMBER} us",
        ],
        [pytest.mark.isolated],
    ),
    "kb_scale.py": (
        ["--quick"],
        [rf"history \(newest 20\)\s+{NUMBER} s", rf"report --html \(whole database\)\s+{NUMBER} s"],
        [],
    ),
    "kb_sharing.py": (
        ["--quick"],
        [rf"import into an empty database\s+{NUMBER} s", r"runs in the database afterwards \(expected\)\s+30 \(30\)"],
        [pytest.mark.isolated],  # two writer processes
    ),
    "fit_accuracy.py": (
        ["--quick"],  # the tiny Llama on the test device: two points each way, a map of four, one edge
        [
            rf"largest error before calibration: inference {NUMBER}%, training {NUMBER}%",
            rf"map of 4 points: predicted in {NUMBER} s on the host; running them on the device {NUMBER} s",
            r"edge at seq 64: batch \d+ measured [\d,]+ of 3,145,728; next batch [\d,]+: the edge holds",
        ],
        [pytest.mark.emu],
    ),
    "localize_cost.py": (
        ["--quick"],  # the tiny Llama on the test device, with a seeded wrong activation
        [rf"arch:llama\s+{NUMBER}s\s+{NUMBER}s\s+{NUMBER}x\s+{NUMBER}MB\s+{NUMBER}MB\s+\d+"],
        [pytest.mark.emu],
    ),
    "placement_overhead.py": (["--quick"], [rf"arch:llama\S*\s+{NUMBER}M\s+\d+\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}"], []),
    "sweep_coverage.py": (
        ["--quick"],  # four tiny architectures on cpu, through warm workers, against in-process trials
        [
            rf"wall {NUMBER} s for 4 cells: {NUMBER} cells per minute",
            r"coverage on cpu: builds 4/4 \(100%\), runs 4/4 \(100%\)",
            rf"orchestration overhead per cell as the sweep's wall time \(cells 2-4\): median -?{NUMBER} s",
            rf"orchestration overhead per cell inside the runner \(cells 2-4\): median -?{NUMBER} s",
        ],
        [pytest.mark.isolated],
    ),
    "serve_load.py": (
        ["--quick"],  # the load generator at 100 and 500 requests/s against a no-op server, 1 s each
        [
            rf"\s+100\s+{NUMBER}\s+{NUMBER}ms\s+{NUMBER}ms\s+{NUMBER}ms\s+{NUMBER}x"
            rf"\s+{NUMBER}ms\s+{NUMBER}ms\s+0 (yes|NO)",
            rf"\s+500\s+{NUMBER}\s+{NUMBER}ms",
        ],
        [],
    ),
    "sweep_ray.py": (
        # one plain torch model on the local pool and on a local Ray cluster: the Ray worker and its
        # target workers need not import transformers
        ["--workload", py_workload("mlp")],
        [
            r"identical grades and categories: yes",
            rf"ray start-up: {NUMBER} s; overhead per cell beyond it: [+-]{NUMBER} s",
        ],
        # on the worker of the Ray tests: two local Ray clusters at once took minutes on two cores
        [pytest.mark.isolated, pytest.mark.xdist_group("test_sweep_ray")],
    ),
    "training_parity.py": (
        ["--quick"],
        [rf"\s+0 emu\s+{NUMBER}s (pass|drift)", r"false alarms \(fail on a clean target\): 0 of 2"],
        [pytest.mark.emu],
    ),
    "trial_workers.py": (
        # one trial with spawned workers, one forked; a plain torch model: no transformers to import
        ["--quick", "--workload", py_workload("mlp"), "--on", "cpu"],
        [
            rf"round 1 spawned\s+wall\s+{NUMBER} s\s+cpu\s+{NUMBER} s\s+cpu ok p50 {NUMBER} ms peak {NUMBER} MiB",
            rf"round 1 forked\s+wall\s+{NUMBER} s",
            rf"wall_s\s+{NUMBER} /\s+{NUMBER} = {NUMBER}",
            rf"cpu\s+peak MiB\s+{NUMBER} /\s+{NUMBER} = {NUMBER}",
        ],
        [pytest.mark.isolated],
    ),
    "timing_fidelity.py": (
        ["--quick"],
        [
            rf"bakeoff per-sample overhead \(empty callable\): p50 {NUMBER} us",
            rf"arch:llama\S*(\s+{NUMBER}){{6}}\s+\d+ ",
        ],
        [],
    ),
}


def test_every_benchmark_is_listed() -> None:
    assert sorted(p.name for p in BENCHMARKS.glob("*.py")) == sorted(SCRIPTS)


@pytest.mark.parametrize("script", [pytest.param(name, marks=marks) for name, (_, _, marks) in sorted(SCRIPTS.items())])
def test_benchmark_runs_with_tiny_arguments(script: str, tmp_path: Path) -> None:
    arguments, expected, _ = SCRIPTS[script]
    done = python_script(BENCHMARKS / script, *arguments, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for pattern in expected:
        assert re.search(pattern, done.stdout), f"{script} did not print /{pattern}/:\n{done.stdout[-3000:]}"
