"""``bakeoff dist``: the collectives check and DDP parity end to end, through the CLI and the
knowledge base, on the test device's process-group backend and on the CPU's gloo.

Seeded faults (the test device's backend, ``BAKEOFF_EMU_DIST_FAULT``): an all_reduce that averages
again on rank 1; bfloat16 reductions that drop the low four mantissa bits; a rank that leaves the
collectives at its fifth (the other waits in it: a hang, named; every rank stopped, also when
bakeoff itself is killed). Clean controls: the test device at 2 and 4 ranks, and gloo on the CPU
at 2, whose sums round honestly (within the dtype's rounding, not all exact). DDP: two bfloat16
steps of a one-layer Llama on the device pass against one float64 process on the global batch and
the CPU's gloo job (differing from it by rounding), under DDP and under FSDP2; the same faults
make rank 1's replica differ (named: step, rank, parameter), an FSDP unit whose gradients are
not reduced leaves the band at step 1, and a rank stuck in DDP's gradient all_reduce is a hang
named by its step and bucket, while a workload whose build outlasts the hang timeout is none.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from tests.conftest import EMU_ENV, bakeoff_cli, kill_9_when_started, marked, still_running

pytestmark = [pytest.mark.isolated, pytest.mark.emu]

_SMALL = ("--sizes", "64,4KiB", "--dtypes", "float32,bfloat16", "--iterations", "3")


def _dist(db: Path, *args: str, fault: str = "", marker: str = "", timeout: float = 300):
    env = {**os.environ, **EMU_ENV, "BAKEOFF_EMU_DIST_FAULT": fault, "BAKEOFF_TEST_MARK": marker}
    return bakeoff_cli("dist", *args, "--db", str(db), env=env, timeout=timeout)


def _json(ran: subprocess.CompletedProcess) -> dict:
    assert ran.stdout.strip(), ran.stderr
    return json.loads(ran.stdout)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Every run the tests read, made once: the clean ladder on the device and on the CPU, each
    seeded fault, and a hang (with whatever its processes left)."""
    here = tmp_path_factory.mktemp("dist")
    db = here / "b.db"
    found: dict = {"db": db}
    found["emu"] = _dist(db, "collectives", "--on", "emu", "--ranks", "2,4", *_SMALL, "--format", "json")
    found["cpu"] = _dist(db, "--on", "cpu", "--ranks", "2", *_SMALL, "--format", "json", "--strict")
    found["avg"] = _dist(db, "--on", "emu", *_SMALL, "--format", "json", "--strict", fault="avg_twice@1")
    found["bf16"] = _dist(db, "--on", "emu", *_SMALL, "--format", "json", fault="bf16_low_bits")
    marker = uuid.uuid4().hex
    found["hang"] = _dist(db, "--on", "emu", *_SMALL, "--hang-timeout", "4", fault="skip@1:5", marker=marker)
    found["hang_left"] = marked(marker)
    # both ranks stop joining from the second call of the first all_to_all: its output stays as poisoned
    found["stale"] = _dist(db, "--on", "emu", "--sizes", "64", "--dtypes", "float32", "--iterations", "3",
                           "--format", "json", fault="skip@0:26,skip@1:26")  # fmt: skip
    found["slow"] = _dist(db, "--on", "cpu", "--sizes", "64", "--dtypes", "float32", "--iterations", "100000",
                          "--timeout", "1", "--format", "json")  # fmt: skip
    ddp = ("arch:llama?layers=1", "--on", "emu?dtype=bfloat16", "--steps", "2", "--format", "json")
    found["ddp"] = _dist(db, *ddp, "--mode", "ddp,fsdp", "--strict")
    # the faults show at step 1: one step each
    found["ddp_avg"] = _dist(db, *ddp, "--steps", "1", fault="avg_twice@1")
    found["fsdp_unreduced"] = _dist(db, *ddp, "--steps", "1", "--mode", "fsdp", fault="unreduced@1")
    # rank 1 never returns from its fifth collective: DDP's first gradient all_reduce (after four
    # of DDP's own set-up collectives), issued by the comm hook in the middle of backward
    marker = uuid.uuid4().hex
    found["ddp_hang"] = _dist(db, *ddp, "--steps", "1", "--mode", "ddp", "--hang-timeout", "8", fault="stall@1:5",
                              marker=marker)  # fmt: skip
    found["ddp_hang_left"] = marked(marker)
    # rank 1 never returns from its third collective: FSDP2's all_gather of the first layer in step 1's forward
    found["fsdp_hang"] = _dist(db, *ddp, "--steps", "1", "--mode", "fsdp", "--hang-timeout", "8", fault="stall@1:3")
    # the control: a workload whose build outlasts --hang-timeout (each rank builds before its
    # first collective) is not a hang, however far apart a loaded machine makes the two ranks
    slow = f"py:{Path(__file__).parent / 'fixtures' / 'sweep_models.py'}:fine?slow=6"
    found["slow_build"] = _dist(db, slow, "--on", "cpu", "--mode", "ddp", "--steps", "1", "--hang-timeout", "3",
                                "--format", "json")  # fmt: skip
    return found


def test_every_collective_is_right_on_the_device_at_2_and_4_ranks_and_on_the_cpus_gloo(runs):
    for name, worlds, backend in (("emu", [2, 4], "emu"), ("cpu", [2], "gloo")):
        ran = runs[name]
        assert ran.returncode == 0, ran.stderr
        found = _json(ran)
        assert found["verdict"] == "pass" and [w["world"] for w in found["worlds"]] == worlds
        assert "p99 of 3 calls is close to the slowest one" in found["notes"], found["notes"]  # about its table
        for world in found["worlds"]:
            assert world["verdict"] == "pass" and world["backend"] == backend, world["reason"]
            cells = world["cells"]
            assert {c["op"] for c in cells} == {"all_reduce_sum", "all_reduce_avg", "all_reduce_max", "all_gather",
                                                "reduce_scatter", "broadcast", "all_to_all", "barrier"}  # fmt: skip
            assert len(cells) == 7 * 2 * 2 + 1  # 7 collectives x 2 sizes x 2 dtypes, one barrier
            for cell in cells:
                assert cell["verdict"] == "pass" and cell["max_error"] <= cell["tolerance"], cell
                assert cell["iterations"] == 3 and 0 < cell["p50_us"] <= cell["p99_us"]
                moves_data = cell["op"] in ("all_gather", "broadcast", "all_to_all", "all_reduce_max")
                assert not moves_data or cell["max_error"] == 0  # data moved or picked is exact
                if cell["op"] != "barrier":
                    assert cell["busbw_gbs"] > 0
            # the honest control rounds: a bfloat16 sum is not exact, and stays within its allowance
            rounded = [c for c in cells if c["dtype"] == "bfloat16" and c["op"] == "all_reduce_sum"]
            assert any(c["max_error"] > 0 for c in rounded), rounded
            assert len(world["startup_s"]) == world["world"]


def test_an_all_reduce_averaged_again_on_one_rank_fails_every_all_reduce_naming_that_rank(runs):
    ran = runs["avg"]
    assert ran.returncode == 1, ran.stderr  # --strict
    (world,) = _json(ran)["worlds"]
    assert world["verdict"] == "fail"
    for cell in world["cells"]:
        if cell["op"].startswith("all_reduce"):
            assert cell["verdict"] == "fail" and cell["worst_rank"] == 1 and "rank 1 element" in cell["detail"]
        else:  # the control inside the run: what does not all_reduce is untouched
            assert cell["verdict"] == "pass", cell
    assert "all_reduce_sum float32 64 B: wrong (rank 1 element" in world["reason"]


def test_bf16_reductions_that_drop_low_bits_fail_and_float32_and_data_moves_do_not(runs):
    ran = runs["bf16"]
    assert ran.returncode == 0, ran.stderr  # no --strict: the answer is a fail, the command ran
    (world,) = _json(ran)["worlds"]
    assert world["verdict"] == "fail"
    failed = {(c["op"], c["dtype"]) for c in world["cells"] if c["verdict"] == "fail"}
    reductions = ("all_reduce_sum", "all_reduce_avg", "all_reduce_max", "reduce_scatter")
    assert failed == {(op, "bfloat16") for op in reductions}
    worst = max(c["max_error"] for c in world["cells"] if c["verdict"] == "fail")
    assert worst > 4  # four bits dropped: several units, far beyond the honest half unit


def test_a_rank_that_leaves_the_collectives_is_a_hang_naming_the_collective_and_the_rank(runs):
    ran = runs["hang"]
    assert ran.returncode == 0, ran.stderr
    out = " ".join(ran.stdout.split())
    assert "2 ranks (emu): hang: all_reduce_avg float32 64 B #5 did not complete within" in out, out  # 4 calls a cell
    assert "waiting in it: rank 0; did not arrive: rank 1 (finished (made" in out
    assert "every rank was stopped" in out
    assert "each call's latency" not in out and "p99 of" not in out  # no table of calls to explain
    assert not runs["hang_left"]  # no rank outlives the command
    run_id, *flag = out.rsplit("`bakeoff show ", 1)[1].split("`")[0].split()
    assert flag == ["--db", str(runs["db"])]  # the hint shows the run again as it is written
    shown = bakeoff_cli("show", run_id, "--db", str(runs["db"]), "--format", "json", env={**os.environ, **EMU_ENV})
    stored = json.loads(shown.stdout)
    (result,) = stored["results"]
    assert result["status"] == "error" and result["error"]["category"] == "timeout"
    (req,) = result["requirements"]
    assert req["verdict"] == "not_met" and "hang" in req["reason"]
    hang = result["scenarios"][0]["facts"]["worlds"][0]["hang"]
    assert (hang["seq"], hang["waiting"], hang["missing"]) == (5, [0], [1])


def test_a_collective_that_writes_nothing_and_a_barrier_that_does_not_wait_fail(runs):
    world = _json(runs["stale"])["worlds"][0]
    cells = {c["op"]: c for c in world["cells"]}
    assert world["verdict"] == "fail"
    before = ("all_reduce_sum", "all_reduce_avg", "all_reduce_max", "all_gather", "reduce_scatter", "broadcast")
    assert all(cells[op]["verdict"] == "pass" for op in before)  # every call of these was joined
    assert cells["all_to_all"]["verdict"] == "fail" and "got nan" in cells["all_to_all"]["detail"]
    assert (
        cells["barrier"]["verdict"] == "fail" and "before rank 1 entered it 200 ms late" in cells["barrier"]["detail"]
    )


def test_a_job_that_runs_past_its_timeout_while_progressing_is_not_called_a_hang(runs):
    (world,) = _json(runs["slow"])["worlds"]
    assert world["verdict"] == "error" and world["hang"] is None
    assert world["reason"].startswith("did not finish within --timeout, at collective #")


def test_every_run_is_stored_and_show_reads_the_same_verdicts(runs):
    for name in ("emu", "avg", "bf16"):
        found = _json(runs[name])
        shown = bakeoff_cli("show", found["run_id"], "--db", str(runs["db"]), env={**os.environ, **EMU_ENV})
        assert shown.returncode == 0, shown.stderr
        text = " ".join(shown.stdout.split())
        assert f"dist collectives on emu: {found['verdict']}" in text
        for world in found["worlds"]:
            assert f"{world['world']} ranks (emu): {world['verdict']}" in text


def test_ddp_and_fsdp_steps_on_the_device_train_as_the_golden_and_the_cpus_gloo_job(runs):
    ran = runs["ddp"]
    assert ran.returncode == 0, ran.stderr  # --strict: it passed
    found = _json(ran)
    assert found["workload"] == "arch:llama?layers=1" and [w["mode"] for w in found["worlds"]] == ["ddp", "fsdp"]
    for world in found["worlds"]:
        assert world["dtype"] == "bfloat16" and world["verdict"] == "pass" and len(world["training"]) == 2, world
        for step in world["training"]:
            reference, _, apart = step["weights"]
            assert 0 < apart < reference  # differs from the CPU's job by rounding, less than bf16 from float64
            assert abs(step["loss"][2] - step["loss"][0]) < 1e-2 * abs(step["loss"][0])


def test_an_fsdp_unit_whose_gradients_are_not_reduced_diverges_at_step_1(runs):
    (world,) = _json(runs["fsdp_unreduced"])["worlds"]
    assert world["mode"] == "fsdp" and world["verdict"] == "fail", world["reason"]
    found = world["divergence"]
    assert found["against"] == "the golden" and found["step"] == 1 and found["figure"] == "grad_norm"
    assert found["error"] > 2 * found["allowed"] and found["parameter"].startswith("model.layers.0.")  # 3.4x in bf16


def test_a_rank_whose_all_reduce_averages_again_is_named_with_the_step_and_parameter(runs):
    world = _json(runs["ddp_avg"])["worlds"][0]
    assert world["verdict"] == "fail"
    assert world["divergence"] == {"step": 1, "rank": 1, "parameter": "model.embed_tokens.weight", "against": "rank 0",
                                   "figure": "", "error": None, "allowed": None}  # fmt: skip
    assert "rank 1's weights differ from rank 0's after step 1 in model.embed_tokens.weight" in world["reason"]


def test_a_hang_inside_ddps_gradient_all_reduce_is_named_by_its_step_and_bucket(runs):
    (world,) = _json(runs["ddp_hang"])["worlds"]
    assert world["mode"] == "ddp" and world["verdict"] == "hang", world["reason"]
    hang = world["hang"]
    assert hang["collective"] == "step 1: DDP gradient all_reduce (bucket 0)"  # not "training step 1" alone
    assert hang["waiting"] == [0, 1] and hang["missing"] == []  # rank 1 stuck in it, rank 0 waiting for rank 1
    assert "the target job" in world["reason"]  # the CPU's gloo reference finished: the device's job hung
    assert not runs["ddp_hang_left"]


def test_a_hang_inside_fsdps_all_gather_is_named_by_its_step_and_unit(runs):
    (world,) = _json(runs["fsdp_hang"])["worlds"]
    assert world["mode"] == "fsdp" and world["verdict"] == "hang", world["reason"]
    assert world["hang"]["collective"] == "step 1: FSDP all_gather (model.layers.0)"  # not "training step 1" alone
    assert world["hang"]["waiting"] == [0, 1]


def test_a_build_longer_than_the_hang_timeout_is_no_hang(runs):
    (world,) = _json(runs["slow_build"])["worlds"]
    assert world["verdict"] == "pass" and world["hang"] is None, world["reason"]


def test_kill_9_of_bakeoff_during_a_hang_takes_every_rank_with_it(tmp_path):
    marker = uuid.uuid4().hex
    env = {**os.environ, **EMU_ENV, "BAKEOFF_EMU_DIST_FAULT": "skip@1:2", "BAKEOFF_TEST_MARK": marker}
    process = subprocess.Popen(
        [sys.executable, "-m", "bakeoff", "dist", "--on", "emu", *_SMALL, "--hang-timeout", "600",
         "--db", str(tmp_path / "b.db")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    # bakeoff and its two ranks; then 3 s for the ranks to meet and rank 1 to leave, the other waiting
    ranks = kill_9_when_started(process, marker, 3, 3.0)
    assert len(ranks) >= 2, ranks
    assert not still_running(ranks)
    assert not (tmp_path / "b.db").exists()  # nothing half-stored
