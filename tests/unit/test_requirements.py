"""Requirements: parsing into base units, and verdicts with their confidence."""

from __future__ import annotations

import pytest

from bakeoff.analysis.requirements import check_requirements
from bakeoff.errors import SpecError
from bakeoff.metrics import parse_requirement, scenario_for
from bakeoff.stats import Estimate


@pytest.mark.parametrize(
    ("text", "metric", "op", "threshold", "unit", "scenario"),
    [
        ("p90<=50ms", "p90", "<=", 50.0, "ms", "single-stream"),
        ("p99.9 < 1s", "p99.9", "<", 1000.0, "ms", "single-stream"),
        ("p50<=250us", "p50", "<=", 0.25, "ms", "single-stream"),
        ("server.p99<=100ms", "server.p99", "<=", 100.0, "ms", "server"),
        ("ttft<=200ms", "ttft", "<=", 200.0, "ms", "generation"),
        ("tpot.p90<=0.02s", "tpot.p90", "<=", 20.0, "ms", "generation"),
        ("step_time<=1.5s", "step_time", "<=", 1500.0, "ms", "training"),
        ("throughput>=200/s", "throughput", ">=", 200.0, "/s", "offline"),
        ("throughput>=600/min", "throughput", ">=", 10.0, "/s", "offline"),
        ("tokens_per_s>1e4", "tokens_per_s", ">", 1e4, "/s", "offline"),
        ("server.rate>=30", "server.rate", ">=", 30.0, "/s", "server"),
        ("peak_memory<=4GiB", "peak_memory", "<=", 4 * 1024**3, "B", ""),
        ("device_memory<=2GB", "device_memory", "<=", 2e9, "B", ""),
        ("first_result<=10s", "first_result", "<=", 10_000.0, "ms", "single-stream"),
    ],
)
def test_requirements_parse_into_base_units(text, metric, op, threshold, unit, scenario):
    req = parse_requirement(text)
    assert (req.metric, req.op, req.unit, req.scenario) == (metric, op, unit, scenario)
    assert req.threshold == pytest.approx(threshold)
    assert scenario_for(metric) == scenario
    assert parse_requirement(req.text) == req  # the canonical text parses to the same requirement


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (
            "p90=50ms",
            "malformed requirement 'p90=50ms' (write METRIC OP VALUE[UNIT], e.g. 'p90<=50ms' or 'throughput>=200/s')",
        ),
        ("p90<=50", "requirement 'p90<=50' needs a time unit (units: ns, us, µs, ms, s, min)"),
        ("p90<=5GiB", "requirement 'p90<=5GiB': GiB is not a time unit (units: ns, us, µs, ms, s, min)"),
        (
            "throughput>=5ms",
            "requirement 'throughput>=5ms': ms is not a rate unit (units: /s, /min, tok/s, samples/s (or none))",
        ),
        (
            "fits batch=32&seq=2048",
            "requirement 'fits batch=32&seq=2048' is judged by bakeoff fit, not by a trial (run `bakeoff fit WORKLOAD "
            "--on TARGET --require 'fits batch=32&seq=2048'`)",
        ),
    ],
)
def test_malformed_requirements_say_what_to_write(text, line):
    with pytest.raises(SpecError) as info:
        parse_requirement(text)
    assert info.value.one_line() == line


@pytest.mark.parametrize("text", ["latency<=5ms", "ttft.x<=1ms", "server<=1ms", "p100<=1ms"])
def test_unknown_metrics_are_refused_with_the_list(text):
    with pytest.raises(SpecError, match="unknown requirement metric") as info:
        parse_requirement(text)
    assert "throughput" in info.value.hint


def test_verdicts_compare_the_estimate_and_say_whether_the_interval_agrees():
    reqs = [parse_requirement(t) for t in ("p90<=50ms", "p99<=10ms", "throughput>=100/s", "ttft<=200ms")]
    measured = {
        "p90": Estimate(40.0, 35.0, 45.0, 200),  # met, whole interval below 50
        "p99": Estimate(9.0, 8.0, 12.0, 60, enough=False),  # met, but the interval crosses 10
        "throughput": Estimate(90.0, 85.0, 95.0, 50),  # not met, confidently
    }
    checks = {c.requirement.metric: c for c in check_requirements(reqs, measured, {"generation": "no decoder"})}
    assert (checks["p90"].verdict, checks["p90"].confident) == ("met", True)
    assert (checks["p99"].verdict, checks["p99"].confident) == ("met", False)
    assert checks["p99"].reason == "only 60 sample(s) back this figure"
    assert (checks["throughput"].verdict, checks["throughput"].confident) == ("not_met", True)
    assert checks["ttft"].verdict == "not_measured" and checks["ttft"].reason == "no decoder"
    assert checks["p90"].to_dict()["value"] == 40.0 and checks["p90"].to_dict()["text"] == "p90<=50ms"


def test_strict_and_non_strict_comparisons_differ_at_the_threshold():
    at = {"p50": Estimate(5.0, 5.0, 5.0, 10)}
    assert check_requirements([parse_requirement("p50<=5ms")], at)[0].verdict == "met"
    assert check_requirements([parse_requirement("p50<5ms")], at)[0].verdict == "not_met"


def test_one_reading_is_a_single_observation_without_an_interval():
    reqs = [parse_requirement(t) for t in ("first_result<=2s", "peak_memory<=1GiB", "p50<=5ms")]
    measured = {
        "first_result": Estimate(1500.0, 1500.0, 1500.0, 1),  # read once: no spread to build an interval from
        "peak_memory": Estimate(2e9, 2e9, 2e9, 1),
        "p50": Estimate(4.0, 4.0, 4.0, 200),  # the clean control: 200 identical samples do give an interval
    }
    checks = {c.requirement.metric: c for c in check_requirements(reqs, measured)}
    for metric, verdict in (("first_result", "met"), ("peak_memory", "not_met")):
        check = checks[metric]
        assert (check.verdict, check.samples, check.low, check.high) == (verdict, 1, None, None)
        assert check.confident is False and check.reason == "single observation: no interval"
    assert (checks["p50"].low, checks["p50"].high, checks["p50"].confident) == (4.0, 4.0, True)
    assert checks["p50"].reason == ""


def test_renderers_say_single_observation_never_a_zero_width_interval():
    from bakeoff.report.figures import requirement_figures

    (single,) = check_requirements(
        [parse_requirement("first_result<=2s")], {"first_result": Estimate(1.5e3, 1.5e3, 1.5e3, 1)}
    )
    assert requirement_figures(single.to_dict()) == ("1500 ms", "single observation")
    (many,) = check_requirements([parse_requirement("p50<=5ms")], {"p50": Estimate(4.0, 3.5, 4.5, 200)})
    assert requirement_figures(many.to_dict()) == ("4 ms", "3.5 ms-4.5 ms")
    (none,) = check_requirements([parse_requirement("p50<=5ms")], {})
    assert requirement_figures(none.to_dict()) == ("-", "-")
