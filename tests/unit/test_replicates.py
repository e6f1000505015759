"""Pooling one target's replicate processes into one result."""

from __future__ import annotations

from bakeoff.results.values import Correctness, ErrorInfo, Latency, TargetResult
from bakeoff.runner.replicates import merge_replicates, replicate_blocks
from bakeoff.target.spec import parse_target

CPU = parse_target("cpu+aot_eager")


def replicate(
    samples: tuple[float, ...], rounds: tuple[int, ...], verdict: str = "pass", rss: int = 100
) -> TargetResult:
    return TargetResult(
        CPU,
        "ok",
        latency=Latency(samples),
        first_call_ms=50.0,
        peak_host_rss_bytes=rss,
        conditions={"rounds": [{"samples": n, "pid": rss} for n in rounds]},
        noise=("machine busy",) if rss > 150 else (),
        checks={"correctness": Correctness(verdict)},
    )


def test_replicates_pool_samples_keep_rounds_by_process_and_the_largest_peak():
    a = replicate((1.0, 1.1, 1.2), (2, 1))
    b = replicate((2.0, 2.1), (1, 1), rss=300)
    merged = merge_replicates([a, b])
    assert merged.latency.samples_ms == (1.0, 1.1, 1.2, 2.0, 2.1)  # pooled, never averaged
    assert [r["replicate"] for r in merged.conditions["rounds"]] == [0, 0, 1, 1]
    assert [r["p50_ms"] for r in merged.conditions["replicates"]] == [1.1, 2.05]
    assert merged.peak_host_rss_bytes == 300 and merged.noise == ("replicate 1: machine busy",)
    assert "2 of 2 replicate processes pooled" in merged.notes
    assert "the speed interval resamples only 2 processes: use 3 or more replicates" in merged.notes
    assert replicate_blocks(merged) == [(1.0, 1.1, 1.2), (2.0, 2.1)]
    assert replicate_blocks(a) == []  # one process: no replicate blocks
    assert merge_replicates([a]) is a


def test_a_failed_correctness_in_any_replicate_wins_and_a_crashed_one_is_a_note():
    good = replicate((1.0,), (1,))
    bad = replicate((1.0,), (1,), verdict="fail")
    crashed = TargetResult(CPU, "error", error=ErrorInfo("SIGSEGV", "worker died from signal SIGSEGV", "crash"))
    merged = merge_replicates([good, bad, crashed])
    assert merged.status == "ok" and merged.verdict == "fail"
    assert "2 of 3 replicate processes pooled" in merged.notes
    assert "replicate 2 error: worker died from signal SIGSEGV" in merged.notes
    assert merged.latency.samples_ms == (1.0, 1.0)
    all_failed = merge_replicates([crashed, crashed])
    assert all_failed.status == "error" and "all 2 replicates failed" in all_failed.notes
