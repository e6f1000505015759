"""``bakeoff dist``'s rules without starting a rank: the analytic expectations, the rounding
allowed, the bus-bandwidth factors, the hang's diagnosis from the phase files, verdicts judged
again from stored figures, the seeded faults' syntax and bad input refused in one line."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from tests.conftest import cli_in_process

from bakeoff.distributed.collectives import _error, elements, expected, ramp, tolerance
from bakeoff.distributed.ranks import TEARDOWN, diagnose
from bakeoff.emu.collectives import Faults
from bakeoff.errors import SpecError
from bakeoff.scenarios.base import ScenarioResult
from bakeoff.scenarios.dist import CollectiveCell, DistResult, WorldRun, busbw_factor, dist_of, world_words


@pytest.mark.parametrize("world", [2, 3, 4])
def test_expectations_are_what_a_simulated_collective_gives(world):
    n = elements("all_reduce_sum", 96, 4, world)
    ramps = [ramp(r, n) for r in range(world)]
    chunk = n // world
    for rank in range(world):
        assert torch.equal(expected("all_reduce_sum", rank, world, n), sum(ramps))
        assert torch.equal(expected("all_reduce_max", rank, world, n), torch.stack(ramps).amax(0))
        assert torch.equal(expected("broadcast", rank, world, n), ramps[-1])
        assert torch.equal(expected("reduce_scatter", rank, world, n), sum(ramps)[rank * chunk : (rank + 1) * chunk])
        moved = torch.cat([r[rank * chunk : (rank + 1) * chunk] for r in ramps])
        assert torch.equal(expected("all_to_all", rank, world, n), moved)
        gathered = elements("all_gather", 96, 4, world)
        assert torch.equal(
            expected("all_gather", rank, world, gathered), torch.cat([ramp(r, gathered) for r in range(world)])
        )


def test_the_ramps_are_exact_in_every_dtype_and_use_bfloat16s_whole_mantissa():
    values = ramp(3, 512)
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        assert torch.equal(values.to(dtype).double(), values)
    assert len({float(v) for v in values}) == 128  # every 1/128 step of [1, 2): all seven mantissa bits


def test_an_honest_bf16_sum_is_within_its_allowance_and_dropped_low_bits_are_not():
    world = 4
    n = 4096
    ramps = [ramp(r, n).to(torch.bfloat16) for r in range(world)]
    honest = ramps[0].clone()
    for r in ramps[1:]:
        honest = honest + r  # a sequential sum rounding in bfloat16 at every step
    want = expected("all_reduce_sum", 0, world, n)
    error, _ = _error(honest, want, torch.bfloat16)
    assert 0 < error <= tolerance("all_reduce_sum", world, "bfloat16")  # it rounds, and within the allowance
    dropped = honest.clone()
    dropped.view(torch.int16).bitwise_and_(~0xF)
    error, at = _error(dropped, want, torch.bfloat16)
    assert error > tolerance("all_reduce_sum", world, "bfloat16") and at >= 0
    assert _error(torch.full((n,), float("nan"), dtype=torch.bfloat16), want, torch.bfloat16)[0] == 1e30
    assert tolerance("all_gather", world, "bfloat16") == tolerance("all_reduce_max", world, "bfloat16") == 0
    # float32 holds every partial sum of the ramps: exact; float16 up to 8 ranks; an average over 3 rounds
    assert tolerance("all_reduce_sum", 64) == tolerance("reduce_scatter", 8, "float16") == 0
    assert tolerance("all_reduce_sum", 16, "float16") == 8 and tolerance("all_reduce_avg", 3) == 2.0


def test_bus_bandwidth_factors_are_nccl_tests():
    assert busbw_factor("all_reduce_sum", 4) == 1.5
    assert busbw_factor("all_gather", 4) == busbw_factor("reduce_scatter", 4) == busbw_factor("all_to_all", 4) == 0.75
    assert busbw_factor("broadcast", 8) == 1.0 and busbw_factor("barrier", 2) is None


def test_a_hang_names_the_lowest_collective_waited_in_and_the_ranks_that_did_not_arrive():
    phases = {0: {"seq": 7, "what": "all_gather"}, 1: {"seq": 9, "what": "finished"},
              2: {"seq": 7, "what": "all_gather"}, 3: {"seq": 6, "what": "broadcast"}}  # fmt: skip
    hang = diagnose(phases, replied=set(), world=4, after_s=5.0)
    assert (hang.collective, hang.seq) == ("broadcast", 6)  # rank 3 is the furthest behind, waiting in #6
    assert hang.waiting == (3,) and hang.missing == (0, 1, 2)
    assert hang.where["1"] == "finished (made 9 collectives)" and hang.where["0"] == "last entered all_gather #7"
    before = diagnose({0: None, 1: None}, set(), 2, 5.0)
    assert before.seq == 0 and before.missing == (0, 1) and before.where["0"] == "entered no collective"
    done = {0: {"seq": 9, "what": "finished"}, 1: {"seq": 9, "what": "finished"}}
    teardown = diagnose(done, set(), 2, 5.0)  # every rank made its last collective and none ended
    assert (teardown.collective, teardown.seq, teardown.waiting, teardown.missing) == (TEARDOWN, 9, (0, 1), ())
    said = world_words(WorldRun(2, "hang", backend="gloo", hang=teardown))
    assert "the process group's teardown, after the last collective #9 did not complete within 5 s" in said, said
    words = world_words(WorldRun(4, "hang", backend="gloo", hang=hang))
    assert "broadcast #6 did not complete within 5 s; waiting in it: rank 3; did not arrive: rank 0 (last" in words


def _stored(cell: CollectiveCell) -> ScenarioResult:
    world = WorldRun(2, "pass", backend="emu", cells=(cell,))
    return ScenarioResult("dist", "ok", facts=DistResult("collectives", "emu", "collectives", (world,)).to_dict())


def test_a_stored_pass_beside_a_wrong_figure_is_judged_again():
    crafted = CollectiveCell(
        "all_reduce_sum", "float32", 64, "pass", max_error=3.0, tolerance=1.0, detail="x", iterations=5
    )
    found = dist_of(_stored(crafted))
    assert found is not None and found.verdict == "fail" and found.worlds[0].cells[0].verdict == "fail"
    honest = CollectiveCell("all_reduce_sum", "bfloat16", 64, "fail", max_error=0.5, tolerance=1.0, iterations=5)
    assert dist_of(_stored(honest)).verdict == "pass"  # type: ignore[union-attr]
    unmeasured = CollectiveCell("all_gather", "float32", 64, "pass", iterations=5)
    assert dist_of(_stored(unmeasured)).verdict == "fail"  # type: ignore[union-attr]  # no figure, no pass
    assert dist_of(ScenarioResult("dist", "ok", facts={"worlds": "nonsense"})) is None


def test_the_backend_is_the_one_pytorch_names_for_the_device():
    from bakeoff.distributed.run import backend_for

    assert backend_for("cpu") == "gloo" and backend_for("cuda") == "nccl"
    assert backend_for("meta") is None  # no backend: refused up front, before a rank starts


def _dist_result(*cells: CollectiveCell) -> Any:
    from bakeoff.results.values import TargetResult
    from bakeoff.target.spec import parse_target

    verdict = "pass" if all(c.verdict == "pass" for c in cells) else "fail"
    world = WorldRun(2, verdict, backend="emu", cells=cells)
    facts = DistResult("collectives", "emu", "collectives", (world,)).to_dict()
    return TargetResult(parse_target("cpu"), "ok", scenarios=(ScenarioResult("dist", "ok", facts=facts),))


def test_a_regression_between_two_dist_runs_names_the_collective_that_went_wrong():
    from bakeoff.verdicts.regressions.rules import compare_results

    def cell(op: str, dtype: str, error: float) -> CollectiveCell:
        return CollectiveCell(op, dtype, 64, "pass", max_error=error, tolerance=1.0, p50_us=10.0, iterations=3)

    clean = _dist_result(cell("all_reduce_sum", "bfloat16", 0.5), cell("broadcast", "bfloat16", 0.0))
    rounded = _dist_result(cell("all_reduce_sum", "bfloat16", 1.0), cell("broadcast", "bfloat16", 0.0))
    dropped = _dist_result(cell("all_reduce_sum", "bfloat16", 8.0), cell("broadcast", "bfloat16", 0.0))
    outcome, reason, metrics = compare_results(clean, dropped, before_fingerprint="f", after_fingerprint="f")
    changed = {m.metric: m.outcome for m in metrics}
    assert outcome == "regressed"
    assert changed["collectives at 2 ranks: all_reduce_sum bfloat16 64 B"] == "regressed"
    assert changed["collectives at 2 ranks"] == "regressed"
    assert changed["collectives at 2 ranks: broadcast bfloat16 64 B"] == "unchanged"
    assert "all_reduce_sum bfloat16 64 B" in reason and "broadcast" not in reason
    # the control: another rounding within the allowance is no regression
    outcome, reason, _ = compare_results(clean, rounded, before_fingerprint="f", after_fingerprint="f")
    assert outcome == "unchanged", reason


def test_seeded_faults_parse_per_rank_and_a_bad_one_is_refused():
    assert Faults.parse("avg_twice@1,skip@0:3", 1) == Faults(avg_twice=True)
    assert Faults.parse("avg_twice@1,skip@0:3", 0) == Faults(skip=3)
    assert Faults.parse("stall@1:4", 1) == Faults(stall=4) and Faults.parse("stall@1:4", 0) == Faults()
    assert Faults.parse("bf16_low_bits", 5).bf16_low_bits
    with pytest.raises(SpecError, match="is not a fault"):
        Faults.parse("avg_thrice@1", 0)


@pytest.mark.parametrize(
    "args, line",
    [
        (["--ranks", "1"], "--ranks '1' is not a world size from 2 to 64"),
        (["--ranks", "two"], "--ranks 'two' is not a world size"),
        (["--sizes", "8"], "--sizes '8': a message is checked from 16 B to 64 MiB"),
        (["--sizes", "1GiB"], "--sizes '1GiB': a message is checked from 16 B to 64 MiB"),
        (["--ranks", "2,\u00b9"], "--ranks '\u00b9' is not a world size"),
        (["--sizes", "lots"], "--sizes 'lots' is not a message size"),
        (["--dtypes", "int8"], "--dtypes 'int8' is not one of float32, bfloat16, float16"),
        (["--on", "cpu+inductor"], "bakeoff dist runs collectives eagerly: cpu+inductor names a compile backend"),
        (["--on", "cpu,cpu?threads=2"], "bakeoff dist takes one target, got 2"),
        (["--on", "mps"], "mps cannot run here"),
        (["--hang-timeout", "0"], "--hang-timeout"),
        (["resnet"], "bakeoff dist checks collectives or trains a workload: malformed workload 'resnet'"),
        (["arch:llama", "--on", "cpu?amp=bfloat16"], "bakeoff dist runs without autocast"),
        # a setting the run would not use: refused, not silently dropped
        (["--mode", "fsdp"], "--mode applies to a workload's DDP or FSDP training, not to the collectives check"),
        (["collectives", "--steps", "5"], "--steps applies to a workload's DDP or FSDP training"),
        (["arch:llama", "--sizes", "64"], "--sizes applies to the collectives check, not to a workload's training"),
        (["arch:llama", "--iterations", "5"], "--iterations applies to the collectives check"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_stores_nothing(capsys, tmp_path, args, line):
    db = tmp_path / "b.db"
    code, _, err = cli_in_process(capsys, "dist", *args, "--db", str(db))
    assert code == 2 and line in err, err
    assert not db.exists()


def test_markdown_and_show_give_each_collectives_verdict_and_a_crafted_pass_is_not_believed(tmp_path):
    import bakeoff
    from bakeoff.distributed.record import dist_run
    from bakeoff.scenarios.dist import OPS
    from bakeoff.settings.dist import DIST_OPTIONS
    from bakeoff.settings.option import read_options
    from bakeoff.store.db import Store
    from bakeoff.target.spec import parse_target

    def cell(op: str, error: float = 0.0, stored: float = 0.0) -> CollectiveCell:
        shown = ("", 0) if op == "barrier" else ("bfloat16", 4096)
        return CollectiveCell(
            op, *shown, "pass", error, stored, p50_us=80.0, p99_us=120.0, busbw_gbs=0.05, iterations=20
        )

    # a stored tolerance of 1e9 beside 9 ulp: the rule's (1 unit for a bf16 sum at 2 ranks) is used
    cells = tuple(cell(op, 9.0, 1e9) if op == "all_reduce_sum" else cell(op) for op in OPS)
    found = DistResult("collectives", "cpu", "collectives", (WorldRun(2, "pass", backend="gloo", cells=cells),))
    settings = read_options(DIST_OPTIONS, {"sizes": "4KiB", "dtypes": "bfloat16"}, "dist")
    run = dist_run(found, parse_target("cpu"), settings)
    Store.open(tmp_path / "kb.db").save_run(run)
    page = tmp_path / "r.md"
    bakeoff.report(run_ids=[run.run_id], db=tmp_path / "kb.db", markdown=page)
    text = page.read_text()
    assert "| all\\_gather | bfloat16 | 4.0 KiB | **pass** | 0 / 0 | 80 | 120 | 1.5 | 0.05 |" in text
    assert "| all\\_reduce\\_sum | bfloat16 | 4.0 KiB | **fail** | 9 / 1 |" in text  # judged again from its figures
    shown = bakeoff.show(run.run_id, db=tmp_path / "kb.db")
    assert dist_of(shown.results[0].scenario("dist")).verdict == "fail"  # type: ignore[union-attr]
    (req,) = shown.results[0].requirements
    assert req["verdict"] == "not_met" and "wrong" in req["reason"]  # the stored requirement says the same


def _ddp(steps: tuple, divergence=None) -> WorldRun:
    from bakeoff.scenarios.dist import world_verdict

    return world_verdict(WorldRun(2, "pass", backend="emu", mode="ddp", dtype="float32", training=steps,
                                  divergence=divergence))  # fmt: skip


def test_ddp_steps_are_judged_in_the_training_band_and_replicas_must_agree():
    from bakeoff.scenarios.dist import Divergence, TrainingStep

    def step(n: int, target_loss: float, furthest: str = "w") -> TrainingStep:
        return TrainingStep(n, (2.0, 2.0 + 1e-7, target_loss), (1.0, 1.0 + 1e-7, 1.0 + 1e-7), (0.1, 0.1, 0.1),
                            (1e-7, 1.2e-7, 5e-8), furthest)  # fmt: skip

    honest = _ddp((step(1, 2.0 + 1.5e-7), step(2, 2.0 + 1e-7)))
    assert honest.verdict == "pass", honest.reason  # differs by rounding, as another engine would
    wrong = _ddp((step(1, 2.0 + 1e-7), step(2, 2.01, furthest="layer.weight")))
    assert wrong.verdict == "fail" and wrong.divergence.step == 2 and wrong.divergence.figure == "loss"  # type: ignore[union-attr]
    assert "step 2 diverged (the loss" in wrong.reason and "layer.weight" in wrong.reason
    split = _ddp((step(1, 2.0 + 1e-7),), Divergence(1, 1, "embed.weight", "rank 0"))
    assert split.verdict == "fail" and split.reason.startswith("rank 1's weights differ from rank 0's after step 1")
    assert _ddp(()).verdict == "error"


@pytest.mark.parametrize(
    "given, line",
    [
        ({"iterations": 0}, "--iterations must be"),
        ({"iterations": -1}, "--iterations must be"),
        ({"hang_s": -1.0}, "--hang-timeout must be"),
        ({"steps": 2.5}, "--steps must be a whole number"),
        ({"timeout_s": "soon"}, "--timeout must be a number"),
    ],
)
def test_the_api_and_a_stored_run_hold_numbers_to_the_options_bounds(tmp_path, given, line):
    import bakeoff
    from bakeoff.api import rerun_keywords
    from bakeoff.distributed.record import dist_run
    from bakeoff.settings.dist import DIST_OPTIONS
    from bakeoff.settings.option import read_options
    from bakeoff.store.db import Store
    from bakeoff.target.spec import parse_target

    with pytest.raises(SpecError, match=line):
        bakeoff.dist("collectives", "cpu", db=tmp_path / "b.db", **given)
    assert not (tmp_path / "b.db").exists()
    run = dist_run(
        DistResult("collectives", "cpu", "collectives"), parse_target("cpu"), read_options(DIST_OPTIONS, {}, "x")
    )
    tampered = {**run.settings["dist"], **given}
    store = Store.open(tmp_path / "kb.db")
    store.save_run(type(run)(**{**run.__dict__, "settings": {"dist": tampered}}))
    with pytest.raises(SpecError, match=f"run {run.run_id}: " + line):
        rerun_keywords(store.get_run(run.run_id))


def test_a_count_of_steps_reads_as_english():
    from bakeoff.scenarios.dist import steps_words

    assert (steps_words(1, "DDP"), steps_words(3, "SGD")) == ("1 DDP step", "3 SGD steps")


def test_the_steps_table_gives_the_loss_and_gradient_norm_of_golden_reference_and_target():
    from rich.console import Console

    from bakeoff.report.terminal import dist_view
    from bakeoff.scenarios.dist import DistResult, TrainingStep

    step = TrainingStep(1, (2.5, 2.25, 2.125), (1.5, 1.25, 1.125), (0.1, 0.1, 0.1), (1e-7, 2e-7, 3e-7), "w")
    console = Console(width=240, record=True)
    console.print(dist_view(DistResult("arch:llama", "emu", "ddp", (_ddp((step,)),))))
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in console.export_text().splitlines()]
    assert ["1", "2.5", "2.25", "2.125", "1.5", "1.25", "1.125"] in [row[:7] for row in rows]


def test_a_size_that_is_not_a_whole_number_of_elements_per_rank_is_noted_as_rounded():
    from bakeoff.distributed.run import rounded_sizes

    said = rounded_sizes({"ranks": (2, 3), "dtypes": ("float32", "bfloat16"), "sizes": (64, 4096)})
    assert said == ("at 3 ranks a message holds a whole number of elements per rank: 64 B float32 -> 60 B, "
                    "4,096 B float32 -> 4,092 B, 64 B bfloat16 -> 60 B, 4,096 B bfloat16 -> 4,092 B",)  # fmt: skip
    assert rounded_sizes({"ranks": (2, 4), "dtypes": ("float32", "bfloat16"), "sizes": (64, 4096)}) == ()


_NCCL = "nccl cannot put two ranks on one device"


@pytest.mark.parametrize(
    ("spec", "gpus", "backend", "said"),
    [
        ("cuda", 1, "nccl", f"{_NCCL}, and this machine has 1 cuda device(s) for 4 ranks"),
        ("cuda", 2, "nccl", f"{_NCCL}, and this machine has 2 cuda device(s) for 4 ranks"),
        ("cuda:1", 8, "nccl", f"{_NCCL}, and cuda:1 names one device for 4 ranks"),
        ("cuda", 4, "nccl", None),  # the control: a GPU per rank
        ("cuda", 1, "gloo", None),  # gloo shares a device between ranks
        ("emu", 1, "emu", None),  # so does the test device's backend
        ("cpu", 1, "gloo", None),
    ],
)
def test_ranks_a_backend_cannot_share_one_device_are_refused_before_they_start(monkeypatch, spec, gpus, backend, said):
    """NCCL ends a group whose ranks share a GPU ("Duplicate GPU detected"): on a one-GPU machine
    a ladder of 2 and 4 ranks is refused up front, by name, not left to fail in every rank."""
    from bakeoff.distributed import run
    from bakeoff.target import detect
    from bakeoff.target.spec import parse_target

    monkeypatch.setattr(detect, "device_status", lambda device: detect.DeviceInfo(device, True, gpus, "stand-in"))
    assert run.shared_device_refusal(parse_target(spec, extra_devices=("emu",)), (2, 4), backend) == said


def test_dist_on_a_device_its_ranks_would_share_is_refused_in_one_line(capsys, monkeypatch):
    from bakeoff.distributed import run

    monkeypatch.setattr(run, "shared_device_refusal", lambda target, worlds, backend: f"{backend} refuses {worlds}")
    code, out, err = cli_in_process(capsys, "dist", "collectives", "--on", "cpu", "--ranks", "2,4")
    assert (code, out) == (2, "")
    assert err == (
        "bakeoff: error: gloo refuses (2, 4) (ask for at most one rank per device (--ranks), or run where each rank "
        "has a device)\n"
    )


def test_exec_ranks_sharing_one_gpu_are_told_nccl_cannot_run_so(monkeypatch):
    """exec cannot refuse: the script picks its backend (gloo shares a GPU); the note says it."""
    from bakeoff.runner.script import ranks_device
    from bakeoff.target import detect
    from bakeoff.target.spec import parse_target

    monkeypatch.setattr(detect, "device_status", lambda device: detect.DeviceInfo(device, True, 1, "stand-in"))
    device, note = ranks_device(parse_target("cuda"), 2)
    assert device == "cuda:0"
    assert note == (
        "the 2 ranks share cuda:0: this machine has 1 cuda device(s) (nccl refuses two ranks on one device: "
        "a script on nccl cannot run so here)"
    )
    monkeypatch.setattr(detect, "device_status", lambda device: detect.DeviceInfo(device, True, 2, "stand-in"))
    assert ranks_device(parse_target("cuda"), 2) == ("cuda", None)  # the control: a GPU per rank


def test_a_target_dtype_the_collectives_check_would_ignore_is_refused(capsys):
    """The collectives check's dtypes are --dtypes: ``emu?dtype=bf16`` ran float32 under its name."""
    code, out, err = cli_in_process(capsys, "dist", "collectives", "--on", "cpu?dtype=bf16", "--ranks", "2")
    assert (code, out) == (2, "")
    assert err == (
        "bakeoff: error: the collectives check takes its dtypes from --dtypes: cpu?dtype=bfloat16 names one "
        "(use --on cpu --dtypes bfloat16)\n"
    )
