"""One target's service result as bakeoff serve stores it, from synthetic load runs (no process):
a request the reference answered and the target did not is a wrong answer; a target that answered
nothing is an error; an objective whose interval straddles its threshold is stored as what the
decision reads ("not conclusive"), never as "met"."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from bakeoff.analysis.requirements import requirement_state
from bakeoff.errors import SpecError
from bakeoff.runner.serve import _result
from bakeoff.serve.load import LoadRun, Sent
from bakeoff.serve.measure import Measured
from bakeoff.serve.objectives import parse_objectives
from bakeoff.serve.service import Lifecycle
from bakeoff.settings.serve import ServeSettings
from bakeoff.target.spec import parse_target

RATE = 10.0
SETTINGS = ServeSettings.from_options(rate=RATE, min_duration_s=1.0)


def _run(count: int, failed: frozenset[int] = frozenset(), seed: int = 0) -> LoadRun:
    latencies = np.random.default_rng(seed).lognormal(np.log(0.05), 0.3, count)
    requests = tuple(
        Sent(i, i / RATE, i / RATE, None, 500, "http")
        if i in failed
        else Sent(i, i / RATE, i / RATE, i / RATE + lat, 200, None, json.dumps({"value": i * 0.5}).encode())
        for i, lat in enumerate(latencies)
    )
    return LoadRun(requests, count / RATE)


def _measured(run: LoadRun) -> Measured:
    return Measured(Lifecycle(ready_s=0.5), run, 2, 2, 0.1, "http://127.0.0.1:1")


def _target(run: LoadRun, slo: tuple[str, ...] = ()):
    reference = _measured(_run(200))
    return _result(parse_target("cpu"), _measured(run), reference, False, SETTINGS, parse_objectives(slo), "cpu")


def test_requests_the_target_failed_and_the_reference_answered_make_its_responses_wrong() -> None:
    control = _target(_run(200))
    assert control.status == "ok" and control.correctness.verdict == "pass", control.correctness.reason
    fault = _target(_run(200, failed=frozenset({3, 50, 120})))
    assert fault.status == "ok" and fault.correctness.verdict == "fail"
    assert fault.correctness.reason.startswith("3 request(s) the reference answered failed on the target")


def test_a_target_that_answered_nothing_is_an_error_not_ok() -> None:
    fault = _target(_run(200, failed=frozenset(range(200))))
    assert fault.status == "error" and fault.error.type == "NoAnswer"
    assert fault.error.message == "none of the 200 requests was answered (http 200)"


def test_an_objective_straddling_its_threshold_is_stored_as_not_conclusive() -> None:
    run = _run(200)
    at = sorted(r.latency_s for r in run.requests)[179] * 1e3  # about the run's own p90
    (stored,) = _target(run, (f"p90<={at:.4f}ms",)).requirements
    assert requirement_state(stored) == "not conclusive" and stored["confident"] is False
    (clear,) = _target(run, ("p90<=500ms",)).requirements  # the control: far above
    assert requirement_state(clear) == "met"


@pytest.mark.parametrize(
    ("text", "says"),
    [("p99>=5ms", "held to at most"), ("goodput<=5/s", "held to at least"), ("error_rate<=200%", "at most 100%")],
)
def test_an_objective_on_the_wrong_side_or_beyond_its_range_is_refused(text: str, says: str) -> None:
    with pytest.raises(SpecError) as raised:
        parse_objectives([text])
    assert says in raised.value.message


def test_a_service_run_is_shown_with_its_own_columns_and_its_intervals_at_their_level() -> None:
    from rich.console import Console

    from bakeoff.env import capture_environment
    from bakeoff.report.terminal.run import run_view
    from bakeoff.results.values import RunResult

    reference = _result(parse_target("cpu"), _measured(_run(200)), None, True, SETTINGS, parse_objectives(()), "cpu")
    target = _target(_run(200, seed=1), slo=("p90<=2s",))
    (objective,) = target.requirements
    assert objective["confidence"] == 0.99 and reference.placement.verdict == "not_applicable"
    workload = {"spec": "service:x", "kind": "service", "fingerprint": "f"}
    run = RunResult("r1", "2026-01-01T00:00:00+00:00", workload, capture_environment(), (reference, target))
    console = Console(width=250, record=True)
    console.print(run_view(run, verbose=True))
    text = console.export_text()
    header = next(line for line in text.splitlines() if "target" in line and "p50" in line)
    assert "p99" in header and "ready" in header and "500 ms" in text  # ready_s 0.5
    assert "speed vs cpu" not in header and "first result" not in header and "peak RSS" not in header
    assert "99% interval" in text and "95% interval" not in text
    assert "99% intervals that account for the correlation" in text


def test_a_service_is_costed_at_its_searched_rate_and_says_why_when_it_has_none() -> None:
    from dataclasses import replace

    from bakeoff.analysis.cost import parse_prices
    from bakeoff.serve.search import RateSearch, SearchStep
    from bakeoff.verdicts.standing import standing_of

    (price,) = parse_prices(["cpu=$3.6/h"])
    steps = (SearchStep(10.0, "met", 200), SearchStep(20.0, "not_met", 200))
    found = replace(_measured(_run(200)), search=RateSearch(steps, 10.0, 20.0, "done"))
    costed = _result(parse_target("cpu"), found, None, True, SETTINGS, parse_objectives(("p90<=1s",)), "cpu")
    cost = standing_of(costed, price).cost
    assert cost is not None and cost.basis == "service" and cost.rate == 10.0  # the rate shown to hold
    assert cost.value == pytest.approx(3.6 / 3600 / 10.0 * 1e6) and cost.low == pytest.approx(3.6 / 3600 / 20 * 1e6)
    none_held = replace(found, search=RateSearch(steps[1:], None, 20.0, "done"))
    missing = _result(parse_target("cpu"), none_held, None, True, SETTINGS, parse_objectives(("p90<=1s",)), "cpu")
    assert standing_of(missing, price).cost_note == "no rate shown within the objectives"
    unsearched = _result(parse_target("cpu"), _measured(_run(200)), None, True, SETTINGS, parse_objectives(()), "cpu")
    assert standing_of(unsearched, price).cost_note == "no rate searched"


@pytest.mark.parametrize("on", ["emu+aot_eager", "emu?dtype=bf16", "cpu?amp=bf16"])
def test_a_target_the_service_cannot_apply_is_refused_before_the_reference_runs(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, on: str
) -> None:
    """``--on emu+inductor`` ran the reference service's whole traffic, then said 'not run'."""
    from bakeoff import api

    monkeypatch.setenv("BAKEOFF_EMU", "1")
    traffic = tmp_path / "requests.jsonl"
    traffic.write_text('{"i": 0}\n')
    started = tmp_path / "started"  # the service would leave this behind
    command = f"{{python}} -c \"open('{started}', 'w')\" --port {{port}}"
    with pytest.raises(SpecError, match="bakeoff serve runs the service as written on the target's device"):
        api.serve_service(command, on=on, db=tmp_path / "b.db", traffic=str(traffic))
    assert not started.exists() and not (tmp_path / "b.db").exists()


@pytest.mark.parametrize(
    ("flag", "keyword", "example"), [("--path", "path", "/generate"), ("--health", "health", "/health")]
)
def test_a_path_that_is_no_path_on_the_service_says_what_is_wrong(flag: str, keyword: str, example: str) -> None:
    with pytest.raises(SpecError) as raised:
        ServeSettings.from_options(**{keyword: "noslash"})
    assert raised.value.one_line() == (
        f"{flag} 'noslash' is not a path on the service (it starts with /) or a URL (e.g. {flag} {example})"
    )
    assert getattr(ServeSettings.from_options(**{keyword: "/v1/x"}), keyword) == "/v1/x"  # the control


def test_the_latency_figures_count_a_timed_out_request_at_its_wait() -> None:
    """132 of 160 requests timed out at 2 s and the table showed the 28 answers' 3 ms as p50/p90/p99."""
    answered = _run(160).requests
    hung = LoadRun(tuple(Sent(r.index, r.planned, r.sent + 0.0005, None, 0, "timeout") if r.index >= 28 else r
                         for r in answered), 16.0)  # fmt: skip
    settings = ServeSettings.from_options(rate=RATE, min_duration_s=1.0, request_timeout_s=2.0)
    reference = _measured(_run(160))
    fault = _result(parse_target("cpu"), _measured(hung), reference, False, settings, (), "cpu")
    samples = fault.latency.samples_ms
    assert len(samples) == 160 and samples[28:] == pytest.approx([2000.5] * 132)  # its lag, then the timeout
    assert fault.latency.p50_ms >= 2000 and fault.latency.p90_ms >= 2000  # the seeded fault shows
    assert any(
        n.startswith("132 request(s) timed out: in p50, p90 and p99 each counts at its wait") for n in fault.notes
    )
    # the control: answered at once with an error status, a request has no latency and is left out
    refused = LoadRun(tuple(Sent(r.index, r.planned, r.sent, None, 500, "http") if r.index >= 28 else r
                            for r in answered), 16.0)  # fmt: skip
    control = _result(parse_target("cpu"), _measured(refused), reference, False, settings, (), "cpu")
    assert control.latency.samples_ms == pytest.approx([r.latency_s * 1e3 for r in answered[:28]])
    assert not any("timed out" in n for n in control.notes)
