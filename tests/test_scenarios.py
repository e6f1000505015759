"""Scenarios, requirements and interleaving, end to end on tiny models.

Scenario figures are checked on a stepping clock (every clock read advances it by 1 ms), so
each timed call "takes" exactly one millisecond and the figures have known values while the
model really runs.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest
from tests.conftest import bakeoff_cli, cli_trial, py_workload

import bakeoff
from bakeoff.measure.timing import TimingSettings
from bakeoff.metrics import parse_requirement
from bakeoff.report.figures import scenario_figures
from bakeoff.runner.job import TargetJob
from bakeoff.runner.session import run_target
from bakeoff.scenarios.registry import parse_scenario
from bakeoff.store import Store
from bakeoff.target.spec import parse_target
from bakeoff.verdicts.metrics import check_target
from bakeoff.workload.profile import parse_profile

LLAMA = "arch:llama?layers=1&hidden=32&seq=8"
FAST = {"min_samples": 5, "min_seconds": 0.0}


class SteppingClock:
    """Each read returns the time, then moves it on by ``step`` seconds; sleeping moves it too."""

    def __init__(self, step: float = 1e-3) -> None:
        self.t, self.step = 0.0, step

    def now(self) -> float:
        value = self.t
        self.t += self.step
        return value

    def sleep(self, seconds: float) -> None:
        self.t += seconds


def _run(workload: str, *scenarios: str, target: str = "cpu", profile: str | None = None):
    job = TargetJob(
        workload_spec=workload,
        target=parse_target(target),
        fingerprint="",
        baseline_path=None,
        timing=TimingSettings(min_samples=10, min_seconds=0.0),
        profile=parse_profile(profile) if profile else None,
        scenarios=tuple(parse_scenario(s) for s in scenarios),
    )
    return run_target(job, clock=SteppingClock())


def test_every_scenario_on_a_tiny_language_model_gives_the_known_figures():
    result = _run(
        LLAMA,
        "offline?max_batch=4",
        "server?rate=100&requests=20",
        "generation?prompt=4&tokens=3&runs=2",
        "training?steps=3&warmup=1",
    )
    assert result.status == "ok", result.error
    by_name = {s.name: s for s in result.scenarios}
    assert list(by_name) == ["single-stream", "offline", "server", "generation", "training"]
    assert all(s.status == "ok" for s in result.scenarios), [s.reason for s in result.scenarios]
    assert result.latency.samples_ms == pytest.approx((1.0,) * result.latency.count)

    offline = by_name["offline"]
    assert [b["batch"] for b in offline.facts["batches"]] == [1, 2, 4]
    assert offline.facts["best_batch"] == 4 and offline.facts["tokens_per_item"] == 8
    assert [b["items_per_s"] for b in offline.facts["batches"]] == pytest.approx([1000, 2000, 4000])

    server = by_name["server"]
    # three rounds by default, pooled: each round's part is kept apart
    assert len(server.series["latency"]) == len(server.series["wait"]) == 3 * 20
    assert server.facts["rounds"] == 3 and server.facts["round_sizes"]["latency"] == [20, 20, 20]
    assert min(server.series["latency"]) >= 1.0  # service alone is one clock step
    assert server.facts["rate"] == 100 and server.facts["sweep"] == [] and server.facts["max_rate"] is None

    generation = by_name["generation"]
    assert generation.series["ttft"] == pytest.approx((1.0, 1.0) * 3)  # 2 runs in each of 3 rounds
    assert generation.series["tpot"] == pytest.approx((1.0,) * 4 * 3)  # 2 runs x 2 tokens after the first

    training = by_name["training"]
    assert training.series["step"] == pytest.approx((1.0,) * 3) and training.facts["batch"] == 1
    assert all(s.peak_host_rss_bytes > 0 for s in result.scenarios)
    assert result.peak_host_rss_bytes >= max(s.peak_host_rss_bytes for s in result.scenarios)  # the target's peak

    checks = {
        c.requirement.text: c
        for c in check_target(
            result,
            [
                parse_requirement(t)
                for t in (
                    "p90<=0.5ms",
                    "throughput>=3999/s",
                    "tokens_per_s>=31999",
                    "ttft<=1ms",
                    "tpot.p90<2ms",
                    "step_time<=1ms",
                    "samples_per_s>=1000",
                    "peak_memory<=64GiB",
                    "server.rate>=1000",
                )
            ],
        )
    }
    assert (checks["p90<=0.5ms"].verdict, checks["p90<=0.5ms"].confident) == ("not_met", True)
    assert checks["p90<=0.5ms"].value == pytest.approx(1.0)
    for met in ("throughput>=3999/s", "tokens_per_s>=31999", "ttft<=1ms", "tpot.p90<2ms", "step_time<=1ms"):
        assert checks[met].verdict == "met", (met, checks[met])
    assert checks["samples_per_s>=1000"].value == pytest.approx(1000.0)
    assert checks["peak_memory<=64GiB"].verdict == "met"
    assert checks["server.rate>=1000"].verdict == "not_met"  # 20 requests at 100/s achieve about 100/s


def _stepping_server_p99_ms(rate: float, requests: int) -> float:
    """The known p99 of the server loop on the stepping clock: it reads the clock three times a
    request (idle check, start, finish), so a request starts 1 ms after ``max(arrival, free)``,
    is read as finished 1 ms later, and the server is free again 1 ms after that."""
    from bakeoff.analysis.queueing import poisson_arrivals
    from bakeoff.stats import percentile

    free, latencies = 1e-3, []
    for arrival in poisson_arrivals(rate, requests, 0, exact=True):
        start = max(arrival, free)
        latencies.append(start + 2e-3 - arrival)
        free = start + 3e-3
    return percentile(latencies, 99) * 1e3


def test_server_sweep_finds_the_highest_rate_within_the_bound():
    # single-stream calls take 1 ms: capacity 1000/s, so the sweep tries 100, 250, 500/s...;
    # p99 is 7.5, 10.3 and 32.0 ms there, so within 20 ms the answer is 250/s
    result = _run(LLAMA, "server?rate=sweep&requests=30&bound=p99<=20ms&rounds=1")
    server = result.scenario("server")
    assert server.status == "ok", server.reason
    sweep = server.facts["sweep"]
    assert [s["rate"] for s in sweep] == [100.0, 250.0, 500.0]
    assert [s["met"] for s in sweep] == [True, True, False]  # stops at the first rate over the bound
    assert [s["p99_ms"] for s in sweep] == pytest.approx([_stepping_server_p99_ms(r, 30) for r in (100, 250, 500)])
    assert server.facts["max_rate"] == server.facts["rate"] == 250.0  # the latency figures are at that rate
    assert server.facts["bound"] == "p99<=20ms"
    (check,) = check_target(replace(result, is_reference=True), [parse_requirement("server.rate>=250")])
    assert (check.verdict, check.value, check.samples, check.low, check.high) == ("met", 250.0, 1, None, None)


def test_a_sweep_where_no_rate_meets_the_bound_says_so():
    result = _run(LLAMA, "server?rate=sweep&requests=10&bound=p99<=0.5ms&rounds=1")  # one call alone takes 1 ms
    server = result.scenario("server")
    assert server.facts["max_rate"] is None and len(server.facts["sweep"]) == 1  # stops at the first miss
    reference = replace(result, is_reference=True)
    (check,) = check_target(reference, [parse_requirement("server.rate>=200")])
    assert (check.verdict, check.value) == ("not_met", None)  # sustains none: no rate, not 0/s
    assert check.reason == (
        "single observation: no rate tried kept latency within p99<=0.5ms: none sustained (the lowest, 100.0/s, missed)"
    )
    (below,) = check_target(reference, [parse_requirement("server.rate>=1")])  # below the lowest rate tried
    assert below.verdict == "not_measured" and below.reason.endswith("give server?rate=1")


def test_scenarios_that_do_not_fit_say_why_and_the_target_still_passes():
    result = _run(py_workload("mlp"), "generation", "training?steps=2")
    assert result.status == "ok"
    generation, training = result.scenario("generation"), result.scenario("training")
    assert generation.status == "not_applicable"
    assert generation.reason.startswith("not a generative language model")
    assert training.status == "ok" and len(training.series["step"]) == 2
    checks = check_target(result, [parse_requirement("ttft<=1s")])
    assert checks[0].verdict == "not_measured"
    assert checks[0].reason.startswith("the generation scenario not applicable: not a generative language model")


@pytest.mark.compile
def test_compilations_for_scenario_shapes_stay_out_of_the_single_stream_audit():
    result = _run(py_workload("mlp"), "offline?max_batch=8", target="cpu+aot_eager")
    assert result.status == "ok", result.error
    assert result.compilation.graphs == 1 and result.compilation.recompiles == 0
    offline = result.scenario("offline")
    assert offline.status == "ok" and offline.facts["graphs"] >= 1  # batch 4 and 8 are new shapes
    # every graph made before the placement audit is labelled with its traffic, and they add up
    compile_signals = result.placement.signals["compile"]
    assert compile_signals["graphs_by_scenario"] == {"single-stream": 1, "offline": offline.facts["graphs"]}
    assert sum(compile_signals["graphs_by_scenario"].values()) == compile_signals["graphs"]


def test_a_scenario_that_raises_is_an_error_beside_a_good_single_stream():
    result = _run(py_workload("mlp"), "offline?seq=4")  # the mlp cannot build inputs of other shapes
    assert result.status == "ok" and result.latency.count >= 10
    offline = result.scenario("offline")
    assert offline.status == "error" and "cannot build inputs of other shapes" in offline.reason


def _prompt_lengths(workload: str, *scenarios: str, profile: str | None = None):
    """The run's result, and the length of every multi-token sequence the model embedded (the
    prompts and the profile's or example's inputs; a decoding step embeds one token)."""
    import torch

    seen = []

    def hook(module, args, _output):
        if isinstance(module, torch.nn.Embedding) and args and args[0].dim() == 2 and args[0].shape[1] > 1:
            seen.append(int(args[0].shape[1]))

    handle = torch.nn.modules.module.register_module_forward_hook(hook)
    try:
        result = _run(workload, *scenarios, profile=profile)
    finally:
        handle.remove()
    assert result.status == "ok", result.error
    return result, set(seen)


# its example input has 10 tokens (the placement audit runs it with or without a profile), the
# default prompt 16
LLAMA_10 = "arch:llama?layers=1&hidden=32&seq=10"


def test_generation_and_offline_follow_the_profile_and_say_so():
    # every request is long: neither the 16-token default prompt nor the example input may run
    result, lengths = _prompt_lengths(
        LLAMA_10, "generation?tokens=2&runs=3&rounds=1", "offline?max_batch=2&rounds=1", profile="seq=96,128,128"
    )
    assert lengths == {10, 96, 128}
    generation, offline = result.scenario("generation"), result.scenario("offline")
    assert generation.status == offline.status == "ok", (generation.reason, offline.reason)
    assert generation.facts["requests"] == [[1, 96], [1, 128], [1, 128]]  # the 1/6, 3/6, 5/6 length quantiles
    assert generation.facts["prompt"] == 128 and len(generation.series["ttft"]) == 3
    assert generation.facts["inputs"] == (
        "profile seq=96,128,128: 3 runs at evenly spaced length quantiles of its 3 requests, "
        "prompt lengths 96-128 (2 distinct)"
    )
    assert offline.facts["tokens_per_item"] == 128  # the profile's median item, built at that length
    assert offline.facts["inputs"] == (
        "profile seq=96,128,128: items of its median length, 128 tokens (lengths 96-128 (2 distinct))"
    )
    assert "inputs: profile seq=96,128,128: items of its median length" in "; ".join(scenario_figures(result, offline))
    assert any(f.startswith("inputs: profile seq=96,128,128: 3 runs at") for f in scenario_figures(result, generation))


def test_without_a_profile_generation_and_offline_keep_their_own_inputs_and_say_so():
    result, lengths = _prompt_lengths(LLAMA_10, "generation?tokens=2&runs=2", "offline?max_batch=2")
    assert lengths == {10, 16}  # the example input (single-stream, offline) and the default prompt
    generation, offline = result.scenario("generation"), result.scenario("offline")
    assert generation.facts["requests"] == [[1, 16], [1, 16]] and generation.facts["prompt"] == 16
    assert generation.facts["inputs"] == "fixed prompt of 16 tokens (the default; no profile)"
    assert offline.facts["tokens_per_item"] == 10
    assert offline.facts["inputs"] == "example input (10 tokens per item), tiled to each batch size (no profile)"
    # a result stored before scenarios said which inputs they used still renders, without the line
    old = replace(offline, facts={k: v for k, v in offline.facts.items() if k != "inputs"})
    shown = scenario_figures(result, old)
    assert shown[0].startswith("best batch") and not any(f.startswith("inputs") for f in shown)


def test_an_explicit_prompt_or_seq_wins_over_the_profile():
    result, lengths = _prompt_lengths(
        LLAMA_10, "generation?prompt=8&tokens=2&runs=2", "offline?max_batch=1&seq=12", profile="seq=96,128"
    )
    assert lengths == {8, 10, 12, 96, 128}  # single-stream follows the profile; the scenarios their options
    generation, offline = result.scenario("generation"), result.scenario("offline")
    assert generation.facts["requests"] == [[1, 8], [1, 8]]
    assert generation.facts["inputs"] == "fixed prompt of 8 tokens (prompt=8 as given, not the profile's lengths)"
    assert offline.facts["tokens_per_item"] == 12
    assert offline.facts["inputs"] == (
        "items of 12 tokens from the workload's input builder (seq=12 as given, not the profile's lengths)"
    )


def test_generation_runs_take_the_profiles_length_quantiles_with_its_batches():
    from bakeoff.scenarios.generation import prompts_for
    from bakeoff.scenarios.offline import item_length

    profile = parse_profile("seq=200,10,50,30,40,20&batch=1,1,1,1,1,4")
    chosen, text = prompts_for({"prompt": None, "runs": 3}, profile)
    # sorted 10 20 30 40 50 200; three runs take the 1/6, 3/6 and 5/6 quantiles, with their batches
    assert [(r.batch, r.seq) for r in chosen] == [(4, 20), (1, 40), (1, 200)]
    chosen, text = prompts_for({"prompt": None, "runs": 12}, profile)
    assert [r.seq for r in chosen] == [10, 10, 20, 20, 30, 30, 40, 40, 50, 50, 200, 200]
    assert text.endswith("prompt lengths 10-200 (6 distinct), batch 1-4 (2 distinct)")
    # offline counts items: the batch of 4 at length 20 holds the median of 9 items
    assert item_length({"seq": None}, profile)[0] == 20
    assert item_length({"seq": None}, parse_profile("seq=5,6,7"))[0] == 6
    assert item_length({"seq": None}, None) == (None, "")


@pytest.mark.parametrize(
    ("option", "line"),
    [
        (
            "--scenario=warp",
            "bakeoff: error: unknown scenario 'warp' (use one of single-stream, offline, server, generation, training)",
        ),
        ("--scenario=server?rate=-1", "bakeoff: error: server rate -1 must be positive (e.g. server?rate=20)"),
        (
            "--scenario=offline?batch=2",
            "bakeoff: error: scenario 'offline' has no option 'batch' (options: max_batch, seq, rounds)",
        ),
        (
            "--require=p90<=50",
            "bakeoff: error: requirement 'p90<=50' needs a time unit (units: ns, us, µs, ms, s, min)",
        ),
        (
            "--scenario=server?rate=5,server?rate=50",
            "bakeoff: error: scenario 'server' given twice (give each "
            "scenario once; compare rates with server?rate=sweep)",
        ),
        (
            "--scenario=offline?max_batch=x",
            "bakeoff: error: scenario option max_batch='x' in 'offline?max_batch=x' "
            "is not a whole number (e.g. offline?max_batch=64)",
        ),
        (
            "--check=determinism?repeats=0",
            "bakeoff: error: check option repeats in 'determinism?repeats=0' must be at least 1 "
            "(e.g. determinism?repeats=2)",
        ),
        (
            "--check=warp",
            "bakeoff: error: unknown check 'warp' "
            "(use one of correctness, placement, compilation, determinism, greedy, training, checkpoint, quality, "
            "coldstart, localization)",
        ),
    ],
)
def test_bad_scenarios_and_requirements_are_one_line_and_store_nothing(tmp_path, option, line):
    result = cli_trial(py_workload("mlp"), "cpu", tmp_path, option)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == line
    assert not (tmp_path / "b.db").exists() or Store.open(tmp_path / "b.db").list_runs() == []


def test_requirements_are_kept_with_the_workload_and_strict_fails_when_one_is_missed(tmp_path):
    first = cli_trial(py_workload("mlp"), "cpu", tmp_path, "--require", "p50<=1us", "--require", "peak_memory<=1TiB")
    assert first.returncode == 0, first.stderr
    (ref,) = json.loads(first.stdout)["results"]
    verdicts = {r["text"]: r["verdict"] for r in ref["requirements"]}
    assert verdicts == {"p50<=1us": "not_met", "peak_memory<=1TiB": "met"}

    assert "checking the requirements kept" not in first.stderr  # given, not kept: nothing to announce
    again = cli_trial(py_workload("mlp"), "cpu", tmp_path, "--strict")  # no --require: the kept ones apply
    assert again.returncode == 1, again.stderr
    assert (
        "checking the requirements kept for this workload: p50<=1us, peak_memory<=1TiB; "
        "--clear-requirements drops them, --require replaces them"
    ) in again.stderr
    doc = json.loads(again.stdout)
    assert doc["settings"]["requirements"] == ["p50<=1us", "peak_memory<=1TiB"]
    assert [r["verdict"] for r in doc["results"][0]["requirements"]] == ["not_met", "met"]

    cleared = cli_trial(py_workload("mlp"), "cpu", tmp_path, "--clear-requirements", "--strict")
    assert cleared.returncode == 0, cleared.stderr
    assert json.loads(cleared.stdout)["results"][0]["requirements"] == []


def test_table_output_shows_scenarios_and_requirements(tmp_path):
    result = bakeoff_cli(
        "trial", LLAMA, "--on", "cpu", "--db", str(tmp_path / "t.db"), "--in-process", "--samples", "5",
        "--min-time", "0", "--scenario", "generation?prompt=4&tokens=3&runs=2", "--require", "ttft<=10s",
        "--require", "p50<=1us", "--verbose", timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "scenarios (figures with 95% bootstrap intervals)" in out and "TTFT p50" in out
    assert "requirements" in out and "ttft<=10s" in out and "not met" in out and "not_met" not in out


@pytest.mark.isolated
def test_isolated_targets_are_timed_in_alternating_turns_and_sequential_runs_are_not(db):
    def order(run):
        rounds = [(c["at"], r.target.spec) for r in run.results for c in r.conditions["rounds"]]
        return [spec for _, spec in sorted(rounds)]

    settings = {"min_samples": 20, "min_seconds": 0.2}
    run = bakeoff.trial(py_workload("mlp"), on="cpu?threads=1", db=db, **settings)
    assert run.settings["interleaved"] is True
    seq = order(run)
    both = 2 * min(seq.count("cpu"), seq.count("cpu?threads=1"))
    assert both >= 10
    turns = [seq[i : i + 2] for i in range(0, both, 2)]
    assert all(set(turn) == {"cpu", "cpu?threads=1"} for turn in turns), seq  # every turn times both
    assert all(a[0] != b[0] for a, b in itertools.pairwise(turns)), seq  # A B, B A, A B: neither always first
    # rounds timed in turns are paired: the speed interval is a block bootstrap over them
    from bakeoff.analysis.compare import ratio_of_paired_blocks
    from bakeoff.runner.trial import _rounds

    ref, target = run.result("cpu"), run.result("cpu?threads=1")
    assert sum(len(b) for b in _rounds(target)) == target.latency.count
    from bakeoff.analysis.compare import PROCESS_SPREAD, with_process_spread

    # rounds of one process each, widened by the declared spread between processes
    paired = ratio_of_paired_blocks(_rounds(ref), _rounds(target))
    assert target.speedup_ci == with_process_spread(paired, PROCESS_SPREAD).to_dict()
    assert target.speedup_ci["bootstrap_low"] == paired.low and target.speedup_ci["process_spread"] == PROCESS_SPREAD

    apart = bakeoff.trial(py_workload("mlp"), on="cpu?threads=1", db=db, interleave=False, **settings)
    seq = order(apart)
    assert apart.settings["interleaved"] is False
    assert seq == sorted(seq, key=lambda spec: spec != "cpu")  # every reference round, then the target's


@pytest.mark.isolated
@pytest.mark.parametrize("isolate", [True, False])
def test_every_target_runs_the_references_server_load_and_is_judged_at_it(db, isolate):
    run = bakeoff.trial(
        py_workload("mlp"), on="cpu?threads=1", db=db, isolate=isolate, min_samples=10, min_seconds=0.0,
        scenarios="server?requests=10", requirements=["server.p99<=10s", "server.rate>=1"],
    )  # fmt: skip
    ref, other = run.result("cpu").scenario("server"), run.result("cpu?threads=1").scenario("server")
    assert ref.status == other.status == "ok", (ref.reason, other.reason)
    assert ref.facts["bound"] == other.facts["bound"] == "server.p99<=10s"  # the requirement is the bound
    assert (ref.facts["rates_from"], other.facts["rates_from"]) == ("own", "reference")
    assert other.options["ladder"] == ref.facts["ladder"]  # the same offered loads, from the reference
    assert other.facts["judged_rate"] == other.facts["rate"] == ref.facts["max_rate"] == ref.facts["judged_rate"]
    p99 = {r.target.spec: next(c for c in r.requirements if c["text"] == "server.p99<=10s") for r in run.results}
    assert p99["cpu"]["judged_at"] == p99["cpu?threads=1"]["judged_at"] == ref.facts["max_rate"]
    assert all(c["reason"].endswith(f"the reference's highest rate within {ref.facts['bound']}") for c in p99.values())


@pytest.mark.isolated
def test_a_worker_that_crashes_mid_timing_is_a_result_and_the_others_finish(db):
    run = bakeoff.trial(
        py_workload("crashes_while_timed"),
        on="cpu?threads=1",
        db=db,
        env=["BAKEOFF_FIXTURE_CRASH_AT=8"],  # switches apply to targets, never to the reference
        min_samples=30,
        min_seconds=0.1,
    )
    crashed, ref = run.result("cpu?threads=1"), run.result("cpu")
    assert crashed.status == "error" and crashed.error.category == "crash"
    assert crashed.error.phase == "timing" and crashed.error.type == "SIGABRT"
    assert ref.status == "ok" and ref.latency.count >= 30 and ref.verdict == "pass"
    stored = Store.open(db).get_run(run.run_id)
    assert stored.result("cpu?threads=1").error.phase == "timing"


@pytest.mark.isolated
def test_replicates_measure_each_target_in_several_processes_and_pool_them(db):
    from bakeoff.analysis.compare import ratio_of_paired_blocks
    from bakeoff.runner.replicates import replicate_blocks

    run = bakeoff.trial(
        py_workload("mlp"), on="cpu?threads=1", db=db, replicates=2, min_samples=10, min_seconds=0.05,
        scenarios="training?steps=2",
    )  # fmt: skip
    assert run.settings["replicates"] == 2
    ref, target = run.result("cpu"), run.result("cpu?threads=1")
    for result in (ref, target):
        pids = {r["pid"]: r["replicate"] for r in result.conditions["rounds"]}
        assert len(pids) == 2 and sorted(pids.values()) == [0, 1]  # two worker processes, one per replicate
        assert [r["status"] for r in result.conditions["replicates"]] == ["ok", "ok"]
        assert result.latency.count == sum(r["samples"] for r in result.conditions["replicates"]) >= 20
        assert [s.name for s in result.scenarios] == ["single-stream", "training"]  # from the first replicate only
    from bakeoff.analysis.compare import PROCESS_SPREAD, with_process_spread

    expected = ratio_of_paired_blocks(replicate_blocks(ref), replicate_blocks(target))
    # the interval resamples processes; too few of them to trust, so the spread is its floor
    assert target.speedup_ci == with_process_spread(expected, PROCESS_SPREAD, (2, 2), True).to_dict()
    stored = Store.open(db).get_run(run.run_id)
    assert stored.result("cpu?threads=1").conditions["replicates"] == target.conditions["replicates"]


def test_replicates_need_worker_processes(tmp_path):
    result = cli_trial(py_workload("mlp"), "cpu", tmp_path, "--replicates", "2")  # cli_trial runs in-process
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "bakeoff: error: replicates need worker processes (one process cannot show the spread between processes) "
        "(drop --in-process, or drop --replicates)"
    )
