"""The cold-start check's rules without a process: which targets it applies to, what its reasons
say for each count of cache lookups, and how its figures reach requirements and regressions."""

from __future__ import annotations

import pytest

from bakeoff.checks.coldstart import ColdStart, ColdStartCheck, _reason
from bakeoff.metrics import parse_requirement
from bakeoff.settings.trial_checks import check_checks
from bakeoff.target.spec import parse_target
from bakeoff.verdicts.regressions.rules import _check_metric
from bakeoff.verdicts.regressions.values import Thresholds

CHECK = ColdStartCheck()


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("cpu", "an eager target compiles nothing"),
        ("cpu+openvino_export", "the openvino_export engine keeps its own cache, which bakeoff cannot see"),
        ("cpu+inductor", None),
        ("cpu+aot_eager", None),
    ],
)
def test_it_applies_to_torch_compile_targets_only(spec, why):
    said = CHECK.not_applicable(parse_target(spec), False)
    assert (said is None) if why is None else said.startswith(why)


def _figures(hits=0, misses=0, bypasses=0, cold_misses=2, cold_ms=10_000.0, warm_ms=9_000.0):
    return {"cold_ms": cold_ms, "warm_ms": warm_ms, "hits": hits, "misses": misses, "bypasses": bypasses,
            "cold_misses": cold_misses, "cache_bytes": 2048, "cache_files": 3}  # fmt: skip


@pytest.mark.parametrize(
    ("verdict", "figures", "ends"),
    [
        ("reused", _figures(hits=2), "; 2 cache hit(s), no miss"),
        ("partly_reused", _figures(hits=1, misses=1), "; 1 cache hit(s), 1 lookup(s) compiled again"),
        ("not_reused", _figures(misses=2), "the second process missed the cache 2 time(s) and compiled again"),
        ("not_reused", _figures(bypasses=1), "the cache was bypassed (1 time(s)): the compiler did not use it"),
        ("not_reused", _figures(cold_misses=0), "looked nothing up (its caches are off, or the backend keeps none"),
    ],
)  # fmt: skip
def test_each_count_of_lookups_reads_as_what_it_shows(verdict, figures, ends):
    reason = _reason(verdict, figures, {})
    assert reason.startswith("first result 10 s with an empty cache, 9000 ms with the cache the first process left")
    assert "(2.0 KiB in 3 files)" in reason and ends in reason


def test_a_second_start_that_came_sooner_without_a_hit_says_so():
    reason = _reason("not_reused", _figures(misses=2, warm_ms=3000.0), {})
    assert reason.endswith(
        "its first result still came sooner (other files the first process left, or a warmer machine)"
    )


def test_its_times_reach_requirements_but_not_regressions():
    value = ColdStart("reused", "r", cold_ms=10_000.0, warm_ms=3000.0, hits=2)
    metrics = {m.name: m for m in CHECK.metrics(value)}
    assert metrics["warm_start"].value == 3000.0 and parse_requirement("warm_start<=5s").threshold == 5000.0
    assert _check_metric(metrics["cold_start"], metrics["cold_start"], Thresholds()) is None
    assert _check_metric(metrics["coldstart"], CHECK.metrics(ColdStart("not_reused"))[0], Thresholds()).outcome == (
        "regressed"
    )


def test_only_an_error_rules_a_target_out():
    assert CHECK.misses(ColdStart("not_reused", "no hit")) == ([], [])
    assert CHECK.misses(ColdStart("error", "it crashed")) == (["coldstart error: it crashed"], [])


def test_a_requirement_on_a_start_asks_for_the_check():
    assert [spec.name for spec in check_checks((), {"requirements": ["warm_start<=5s"]})] == ["coldstart"]
