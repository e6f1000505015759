"""The decision rule and the cost arithmetic: pure functions on cases with known answers."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from bakeoff.analysis.cost import Price, cost_of, parse_prices, price_for
from bakeoff.checks.correctness import Correctness
from bakeoff.errors import SpecError
from bakeoff.verdicts.decision import Standing, decide, decide_run, standing_of

PRICE_HINT = "(e.g. --price cpu=0.34/h or --price 'neuron=$1.34/h')"
REF = Standing("cpu", is_reference=True, speed=(1.0, 1.0, 1.0))


def fast(name: str, value: float, low: float, high: float, **kw) -> Standing:
    return Standing(name, speed=(value, low, high), **kw)


def test_the_fastest_qualifying_target_is_recommended_when_the_data_tells_it_apart():
    decision = decide([REF, fast("cpu+inductor", 3.0, 2.6, 3.4), fast("cpu+aot_eager", 0.7, 0.6, 0.8)])
    assert (decision.outcome, decision.target, decision.basis, decision.tied) == (
        "recommended",
        "cpu+inductor",
        "speed",
        (),
    )
    assert decision.lines[0] == "cpu+inductor: 3.00x the reference (2.60-3.40x)"


def test_overlapping_intervals_are_a_tie_never_a_win():
    decision = decide([REF, fast("a", 3.0, 2.5, 3.5), fast("b", 2.8, 2.4, 3.2)])
    assert (decision.outcome, decision.target, decision.tied) == ("tie", "a", ("b",))
    assert "b indistinguishable: 2.80x" in decision.lines[1]
    # an A/A-level difference from the reference: the reference ties with it
    aa = decide([REF, fast("cpu?threads=1", 1.02, 0.97, 1.07)])
    assert aa.outcome == "tie" and set(aa.tied) | {aa.target} == {"cpu", "cpu?threads=1"}


def test_a_wrong_or_misplaced_target_never_qualifies_however_fast():
    wrong = fast("wrong", 9.0, 8.0, 10.0, misses=("correctness fail: max abs err 0.05",))
    decision = decide([REF, wrong])
    assert (decision.outcome, decision.target) == ("recommended", "cpu")
    # when everything misses something, the closest is named with exactly what it misses
    slow = fast("slow", 0.5, 0.4, 0.6, misses=("p90<=5ms not met: 7.2 ms (6.8 ms-7.6 ms)",))
    none = decide([wrong, slow, fast("broken", 1, 1, 1, misses=("failed (error): x", "correctness error: y"))])
    assert (none.outcome, none.target) == ("none", "wrong")  # one miss, fastest of those with one
    assert none.lines[0] == "closest: wrong, ruled out by correctness fail: max abs err 0.05"
    assert "slow ruled out by p90<=5ms not met: 7.2 ms (6.8 ms-7.6 ms)" in none.lines


def test_inconclusive_evidence_is_named_and_never_counted_as_a_win():
    straddles = fast("cpu+inductor", 3.0, 2.6, 3.4, doubts=("p90<=5ms: 4.9 ms, its interval straddles the limit",))
    decision = decide([straddles])
    assert (decision.outcome, decision.target) == ("inconclusive", "cpu+inductor")
    assert "straddles" in decision.lines[0]
    # a qualifying reference is recommended; the faster, undecided target is named as such
    with_ref = decide([REF, straddles])
    assert (with_ref.outcome, with_ref.target) == ("recommended", "cpu")
    assert with_ref.lines[-1].startswith("cpu+inductor might do better, but its evidence is inconclusive")
    # a slower undecided target is listed too, as undecided
    slower = fast("cpu+aot_eager", 0.5, 0.4, 0.6, doubts=("p90<=5ms not measured: no figure",))
    listed = decide([REF, slower]).lines
    assert listed[-1].startswith("cpu+aot_eager (0.50x the reference (0.40-0.60x)) is undecided: p90<=5ms not measured")
    assert decide([]).outcome == "none" and decide([]).target is None


def test_with_prices_the_cheapest_qualifying_target_wins():
    cheap, dear = Price("cpu", 0.34), Price("neuron", 3.40)
    ref = Standing("cpu", True, speed=(1.0, 1.0, 1.0), cost=cost_of(cheap, 100.0, "single-stream", (100.0, 100.0)))
    # ten times the price, four times the speed: dearer per request
    neuron = Standing("neuron", speed=(4.0, 3.8, 4.2), cost=cost_of(dear, 400.0, "single-stream", (380.0, 420.0)))
    decision = decide([ref, neuron])
    assert (decision.outcome, decision.target, decision.basis) == ("recommended", "cpu", "cost")
    # twenty times the speed: cheaper per request
    quick = Standing("neuron", speed=(20.0, 19.0, 21.0), cost=cost_of(dear, 2000.0, "single-stream", (1900.0, 2100.0)))
    assert decide([ref, quick]).target == "neuron"
    # one target without a price: ranked by speed, not by a partial cost
    unpriced = Standing("cpu+inductor", speed=(2.0, 1.9, 2.1))
    assert decide([ref, quick, unpriced]).basis == "speed"


def test_a_sustained_rate_is_one_reading_so_costs_from_it_cannot_be_told_apart():
    price = Price("cpu", 0.36)
    a = Standing("a", cost=cost_of(price, 100.0, "server"), speed=(1.0, 1.0, 1.0))
    b = Standing("b", cost=cost_of(price, 120.0, "server"), speed=(1.2, 1.1, 1.3))
    decision = decide([a, b])
    assert (decision.outcome, decision.target, decision.tied) == ("tie", "b", ("a",))
    assert "(one reading)" in decision.lines[0]


def test_cost_arithmetic():
    price = parse_prices(["cpu=0.36/h"])[0]
    assert price.per_hour == pytest.approx(0.36)
    cost = cost_of(price, 100.0, "single-stream", (80.0, 125.0))  # 0.0001 per second / 100 per second
    assert cost.value == pytest.approx(1.0) and cost.low == pytest.approx(0.8) and cost.high == pytest.approx(1.25)
    per_minute = parse_prices(["neuron=$0.02/min"])[0]
    assert (per_minute.per_hour, per_minute.currency) == (pytest.approx(1.2), "$")
    assert cost_of(per_minute, 1000 / 3600, "server").value == pytest.approx(1.2 * 1e6 / 1000)
    assert not cost_of(per_minute, 2.0, "server").has_interval
    with pytest.raises(ValueError):
        cost_of(price, 0.0, "single-stream")
    with pytest.raises(ValueError):
        cost_of(price, math.nan, "single-stream")


def test_a_device_price_applies_to_its_targets_and_a_target_price_wins():
    prices = parse_prices(["cpu=0.34/h", "cpu+inductor=0.40/h"])
    assert price_for("cpu+inductor", "cpu", prices).per_hour == pytest.approx(0.40)
    assert price_for("cpu+openvino", "cpu", prices).per_hour == pytest.approx(0.34)
    assert price_for("neuron", "neuron", prices) is None


@pytest.mark.parametrize(
    ("texts", "line"),
    [
        (["cpu"], "price 'cpu' is not NAME=AMOUNT/UNIT (e.g. --price cpu=0.34/h or --price 'neuron=$1.34/h')"),
        (
            ["cpu=0.34"],
            "price 'cpu=0.34' is not NAME=AMOUNT/UNIT (e.g. --price cpu=0.34/h or --price 'neuron=$1.34/h')",
        ),
        (
            ["cpu=0.34/day"],
            "price 'cpu=0.34/day' is not NAME=AMOUNT/UNIT (e.g. --price cpu=0.34/h or --price 'neuron=$1.34/h')",
        ),
        (["cpu=0/h"], "price 'cpu=0/h' must be a positive amount (e.g. --price cpu=0.34/h)"),
        (["cpu=1/h", "cpu=2/h"], "'cpu' priced twice (give each target or device one price)"),
        (["cpu=$1/h", "neuron=€2/h"], "prices in different currencies ('$', '€') (give every price in one currency)"),
    ],
)
def test_a_bad_price_is_one_line(texts, line):
    with pytest.raises(SpecError) as said:
        parse_prices(texts)
    assert said.value.one_line() == line


def test_a_standing_reads_every_reason_from_a_result():
    from tests.revisit_data import target_result

    from bakeoff.checks.placement import Placement

    clean = target_result("cpu+inductor")
    assert standing_of(clean).qualifies, standing_of(clean)
    missed = {"text": "p90<=5ms", "verdict": "not_met", "unit": "ms", "value": 7.2, "low": 6.8, "high": 7.6,
              "confident": True, "enough": True, "samples": 30, "reason": ""}  # fmt: skip
    straddled = {
        **missed,
        "text": "p50<=5ms",
        "verdict": "met",
        "value": 4.9,
        "low": 4.5,
        "high": 5.3,
        "confident": False,
    }

    judged = standing_of(replace(clean, requirements=(missed, straddled)))
    assert judged.misses == ("p90<=5ms not met: 7.2 ms (6.8 ms-7.6 ms)",)
    assert judged.doubts == ("p50<=5ms not conclusive: 4.9 ms, its interval (4.5 ms-5.3 ms) straddles the limit",)
    placed = replace(clean, checks={**clean.checks, "placement": Placement("fallbacks", "2 ops on the host")})
    assert standing_of(placed).misses == ("work left the device: placement fallbacks",)


def test_a_wrong_target_is_ruled_out_by_its_failing_output_with_its_relative_figure():
    from tests.revisit_data import target_result

    from bakeoff.checks.correctness import Correctness, TensorComparison

    # a GradScaler-scaled loss passes with a large absolute error (11.9, relative 2.2e-5): it is
    # no reason; the failing output is named, with its own relative figure
    scaled = TensorComparison("loss[0]", (), "float32", 11.9, 2.2e-5, 1.0, True, rule="honest")
    wrong = TensorComparison(
        "file:out/w.safetensors:w", (4,), "float32", 0.01, 3e-3, 1.0, False,
        problem="rms error vs the reference 0.00906 of rms(reference): 7,600x the honest spread 1.19e-06",
    )  # fmt: skip
    clean = target_result("cpu+inductor")
    failed = Correctness("fail", "...", "eager:float32", 1e-4, (scaled, wrong))
    (miss,) = standing_of(replace(clean, checks={**clean.checks, "correctness": failed})).misses
    assert miss == (
        "correctness fail: file:out/w.safetensors:w: rms error vs the reference 0.00906 of rms(reference): "
        "7,600x the honest spread 1.19e-06"
    )
    assert "11.9" not in miss
    # a failure without any output compared (a file the target did not write) says its reason
    missing = Correctness("fail", "missing output file out/preds.npy", "the script on cpu")
    (miss,) = standing_of(replace(clean, checks={**clean.checks, "correctness": missing})).misses
    assert miss == "correctness fail: missing output file out/preds.npy"


def test_a_dtype_that_overflows_is_ruled_out_and_a_finite_dtype_cost_is_not():
    from tests.revisit_data import target_result

    from bakeoff.checks.correctness import Correctness
    from bakeoff.target.spec import parse_target

    half = replace(target_result("cpu"), target=parse_target("cpu?dtype=fp16"))
    overflowed = Correctness("pass", drift={"reference": "eager:float32", "max_abs_err": 1.7976931348623157e308})
    ruled = standing_of(replace(half, checks={**half.checks, "correctness": overflowed}))
    assert ruled.misses == ("outputs not finite in float16 where eager:float32 is finite (the dtype overflows)",)
    finite = Correctness("pass", drift={"reference": "eager:float32", "max_abs_err": 0.004})
    assert standing_of(replace(half, checks={**half.checks, "correctness": finite})).qualifies  # the control


def test_the_test_devices_speed_is_never_ranked():
    from tests.revisit_data import target_result

    from bakeoff.target.spec import Target

    emu = replace(target_result("cpu", 0.1), target=Target("emu"), is_reference=False)  # ten times "faster"
    standing = standing_of(emu)
    assert standing.qualifies and standing.speed is None
    decision = decide([standing_of(target_result("cpu")), standing])
    assert decision.target == "cpu"  # never the emulation, however fast its timings
    assert "emu indistinguishable: speed not transferable (the bundled test device emulates" in decision.lines[1]
    from bakeoff.report.figures import speed_caveat

    assert speed_caveat(emu) == "not transferable: emu emulates a device on the CPU"
    assert speed_caveat(target_result("cpu")) == ""  # the control


def test_a_target_that_is_not_a_candidate_is_shown_never_chosen():
    reference = replace(REF, candidate=False)
    slow = fast("cpu+aot_eager padded to 18", 0.8, 0.7, 0.9)
    decision = decide([reference, slow])
    assert (decision.outcome, decision.target) == ("recommended", "cpu+aot_eager padded to 18")
    assert decision.lines[-1] == "cpu (for comparison, not a candidate): the reference (1.00x)"
    assert decide([REF, slow]).target == "cpu"  # the control: as a candidate, the faster reference wins


def test_cost_per_million_tokens_and_against_the_reference():
    from tests.revisit_data import environment, make_run, target_result

    from bakeoff.verdicts.decision import tokens_per_request

    price = Price("cpu", 0.36)  # 1e-4 per second
    cost = cost_of(price, 100.0, "single-stream", (90.0, 110.0), tokens_per_request=16.0)
    assert cost.value == pytest.approx(1.0) and cost.per_million_tokens == pytest.approx(1.0 / 16)
    assert cost_of(price, 100.0, "server").per_million_tokens is None  # not a language model
    ref = Standing("cpu", True, speed=(1.0, 1.0, 1.0), cost=cost_of(price, 100.0, "single-stream", (100.0, 100.0)))
    quick = Standing("x", speed=(4.0, 3.9, 4.1), cost=cost_of(price, 400.0, "single-stream", (390.0, 410.0)))
    assert ", 0.25x the reference's cost at 400.0/s" in decide([ref, quick]).lines[0]

    run = make_run("r", "2025-01-01T00:00:00+00:00", environment(), (target_result("cpu"),))
    assert tokens_per_request(run) is None  # the fixture's workload has no input_ids
    lm = replace(run, workload={**run.workload, "details": {"inputs": {"input_ids": [2, 16]}}})
    assert tokens_per_request(lm) == 32.0
    profiled = replace(lm, settings={"profile": {"source": "seq=8,24", "requests": [[1, 8], [1, 24]]}})
    assert tokens_per_request(profiled) == 16.0  # the profile's mean request, not the example input


def test_a_device_target_whose_placement_was_not_audited_is_undecided():
    from tests.revisit_data import target_result

    unaudited = target_result("neuron")
    unaudited = replace(unaudited, checks={k: v for k, v in unaudited.checks.items() if k != "placement"})
    assert standing_of(unaudited).doubts == ("placement not audited: where the work ran is unknown",)
    cpu = target_result("cpu")
    cpu = replace(cpu, checks={k: v for k, v in cpu.checks.items() if k != "placement"})
    assert standing_of(cpu).qualifies  # the control: on the CPU there is nowhere else the work could run


# -- what a price buys, the cost's basis, the test device's rehearsal ----------------------------
# The reference takes exactly 1 ms (1000 requests/s per stream), and 3.6/h is 1000 per second of
# the instance per million requests: a target at speed-up S on one stream costs 1 / S per million.


def _priced_run(*results, prices: tuple[str, ...] = (), reference_ms: float = 1.0):
    from tests.revisit_data import environment, make_run, target_result

    from bakeoff.results.values import Latency

    reference = replace(target_result("cpu"), latency=Latency((reference_ms,) * 60))
    settings = {"reference": "cpu", "prices": list(prices)}
    return make_run("r", "2025-01-01T00:00:00+00:00", environment(), (reference, *results), settings=settings)


def _on(spec: str, speed: tuple[float, float, float], device: str | None = None, **extra):
    """A correct result of ``spec`` (or, with ``device``, of a target on that device) at ``speed``."""
    from tests.revisit_data import target_result

    from bakeoff.checks.placement import Placement
    from bakeoff.results.values import Latency
    from bakeoff.target.spec import Target

    result = target_result(spec, **extra)
    placed = Placement("on_device", "") if not spec.startswith("cpu") else result.placement
    result = replace(
        result,
        latency=Latency((1.0 / speed[0],) * 60),
        speedup_ci={"value": speed[0], "low": speed[1], "high": speed[2]},
        checks={**result.checks, "placement": placed},
    )
    return replace(result, target=Target(device)) if device else result


def test_a_price_says_what_it_buys_and_an_instance_serves_its_streams():
    from bakeoff.analysis.cost import ONE_STREAM, streams_of

    four = parse_prices(["cpu=3.6/h@4cores"])[0]
    assert (four.per_hour, four.count, four.unit, four.buys) == (pytest.approx(3.6), 4, "cores", "4 cores")
    assert streams_of(four, "cpu", 1) == (4, "4 cores, 1 thread each")
    assert streams_of(four, "cpu", 2) == (2, "4 cores, 2 threads each")
    assert streams_of(four, "cpu", 8)[0] == 0  # a stream needs more threads than the instance has cores
    assert streams_of(four, "neuron", None) == (4, "4 cores, one stream on each")  # an accelerator's cores
    assert streams_of(parse_prices(["neuron=1/h@1device"])[0], "neuron", None) == (1, "1 device, one stream on each")
    bare = parse_prices(["cpu=3.6/h"])[0]
    assert (bare.count, streams_of(bare, "cpu", 1)) == (None, (1, ONE_STREAM))

    # the seeded fault: one stream costed for a 4-core instance (4x too dear); the control: no @
    cost = cost_of(four, 1000.0, "single-stream", (900.0, 1100.0), streams=4, streams_from="4 cores, 1 thread each")
    assert (cost.value, cost.low, cost.high) == pytest.approx((0.25, 1 / 4.4, 1 / 3.6))
    assert (cost.rate, cost.stream_rate, cost.basis_brief) == (pytest.approx(4000.0), pytest.approx(1000.0),
                                                               "single stream x 4")  # fmt: skip
    assert cost.basis_text == "single stream x 4 (4 cores, 1 thread each), assumed to scale"
    single = cost_of(bare, 1000.0, "single-stream", (900.0, 1100.0))
    assert (single.value, single.streams) == (pytest.approx(1.0), 1)  # today's meaning, unchanged
    assert single.basis_text == f"single stream x 1: {ONE_STREAM}"
    served = cost_of(four, 250.0, "server", streams=4, streams_from="4 cores, 1 thread each")
    assert served.basis_text == "measured server rate x 4 (4 cores, 1 thread each), assumed to scale"
    assert served.value == pytest.approx(1.0) and not served.has_interval
    with pytest.raises(ValueError):
        cost_of(four, 1000.0, "single-stream", streams=0)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("cpu=0.34/h@0cores", "price 'cpu=0.34/h@0cores': @0cores is not a positive whole number of cores"),
        ("cpu=0.34/h@-1cores", "price 'cpu=0.34/h@-1cores': @-1cores is not a positive whole number of cores"),
        ("cpu=0.34/h@abccores", "price 'cpu=0.34/h@abccores': @abccores is not a positive whole number of cores"),
        ("cpu=0.34/h@1.5cores", "price 'cpu=0.34/h@1.5cores': @1.5cores is not a positive whole number of cores"),
        ("cpu=0.34/h@nancores", "price 'cpu=0.34/h@nancores': @nancores is not a positive whole number of cores"),
        ("cpu=1/h@infdevices", "price 'cpu=1/h@infdevices': @infdevices is not a positive whole number of devices"),
        ("cpu=0.34/h@4gpus", "price 'cpu=0.34/h@4gpus': @4gpus is not @N cores or @N devices"),
        ("cpu=0.34/h@", "price 'cpu=0.34/h@': @ is not @N cores or @N devices"),
    ],
)
def test_a_bad_count_of_what_a_price_buys_is_one_line(text, line):
    with pytest.raises(SpecError) as said:
        parse_prices([text])
    assert said.value.one_line() == line + " (e.g. --price 'cpu=0.34/h@4cores' or --price 'neuron=$1.34/h@1device')"


@pytest.mark.parametrize("text", ["cpu=nan/h", "cpu=inf/h", "cpu=$-inf/min", "cpu=1e999/h"])
def test_a_price_that_is_not_finite_is_one_line(text):
    with pytest.raises(SpecError) as said:
        parse_prices([text])
    assert said.value.one_line() == f"price {text!r} must be a positive amount (e.g. --price cpu=0.34/h)"


def test_stored_price_texts_of_every_form_still_read():
    from bakeoff.verdicts.decision import stored_prices

    old = _priced_run(prices=("cpu=0.34/h", "neuron=$1.34/h"))  # written before a price could say what it buys
    read = stored_prices(replace(old, settings={**old.settings, "prices": ["cpu=$0.34/h", "neuron=$1.34/h"]}))
    assert [(p.name, p.count, p.unit) for p in read] == [("cpu", None, ""), ("neuron", None, "")]
    assert [p.count for p in stored_prices(_priced_run(prices=("cpu=0.34/h@4cores",)))] == [4]
    # a Price and a Cost written before the count existed read with one stream
    price = Price.from_dict({"name": "cpu", "per_hour": 0.34, "currency": "", "text": "cpu=0.34/h"})
    assert (price.count, price.unit) == (None, "")
    cost = cost_of(price, 100.0, "single-stream")
    written = {k: v for k, v in cost.to_dict().items() if k not in ("streams", "streams_from", "rehearsal")}
    again = type(cost).from_dict({**written, "price": price.to_dict()})
    assert (again.streams, again.rehearsal, again.value) == (1, False, pytest.approx(cost.value))


def test_the_decision_says_its_cost_basis_and_its_figures_agree():
    from bakeoff.verdicts.decision import decide_run

    fast = _on("cpu+inductor", (2.0, 1.9, 2.1))
    scaled = decide_run(_priced_run(fast, prices=("cpu=3.6/h@4cores",)))
    assert (scaled.outcome, scaled.target, scaled.basis) == ("recommended", "cpu+inductor", "cost")
    assert scaled.cost_basis == "single stream x 4 (4 cores, 1 thread each), assumed to scale"
    best = next(s for s in scaled.standings if s.target == "cpu+inductor")
    assert best.cost.value == pytest.approx(1 / 2.0 / 4)  # 4 streams at twice the reference's rate
    assert scaled.lines[0] == (
        "cpu+inductor: 0.125 per million requests (0.119-0.132), 0.50x the reference's cost at 8,000.0/s "
        "(single stream x 4)"
    )
    # the control: a price without @ keeps its meaning, and says what it assumes
    plain = decide_run(_priced_run(fast, prices=("cpu=3.6/h",)))
    assert plain.cost_basis.startswith("single stream x 1: one stream per price unit assumed")
    assert next(s for s in plain.standings if s.target == "cpu+inductor").cost.value == pytest.approx(0.5)
    assert plain.lines[0].endswith("at 2,000.0/s (single stream x 1)")
    # a target whose stream needs more threads than its price buys has no cost, and says why
    wide = _on("cpu?threads=8", (1.5, 1.4, 1.6))
    decision = decide_run(_priced_run(fast, wide, prices=("cpu=3.6/h@4cores",)))
    standing = next(s for s in decision.standings if s.target == "cpu?threads=8")
    assert (standing.cost, standing.cost_note) == (None, "needs 8 threads, its price buys 4 cores")
    assert decision.basis == "speed" and decision.lines[-1] == (
        "ranked by speed, not cost: no cost to rank for cpu?threads=8 (needs 8 threads, its price buys 4 cores)"
    )
    assert "cpu?threads=8 qualifies too: 1.50x the reference (1.40-1.60x) (no cost: needs 8 threads" in " | ".join(
        decision.lines
    )


def test_a_measured_server_rate_is_the_basis_where_it_was_measured():
    from bakeoff.results.values import ScenarioResult
    from bakeoff.verdicts.decision import decide_run

    served = ScenarioResult("server", "ok", options={"rate": 500.0}, facts={"rate": 500.0, "achieved_rate": 500.0})
    fast = _on("cpu+inductor", (2.0, 1.9, 2.1), scenarios=(served,))
    decision = decide_run(_priced_run(fast, prices=("cpu=3.6/h@2cores",)))
    cost = next(s for s in decision.standings if s.target == "cpu+inductor").cost
    assert (cost.basis, cost.rate, cost.value) == ("server", pytest.approx(1000.0), pytest.approx(1.0))
    assert "cpu+inductor: measured server rate x 2 (2 cores, 1 thread each), assumed to scale" in decision.cost_basis
    assert "cpu: single stream x 2 (2 cores, 1 thread each), assumed to scale" in decision.cost_basis  # the control


def test_the_test_device_gets_a_rehearsal_cost_never_a_recommendation_on_cost():
    from bakeoff.report.terminal import run_view
    from bakeoff.verdicts.decision import REHEARSAL, cost_in_run, decide_run

    assert REHEARSAL == (
        "rehearsal: emu emulates a device on the CPU; its speed and so its cost say nothing of a real device"
    )
    # the seeded fault: the emulation's timings make it ten times cheaper than the CPU
    emu = _on("neuron", (10.0, 9.5, 10.5), device="emu")
    prices = ("cpu=3.6/h", "emu=3.6/h@1device")
    decision = decide_run(_priced_run(emu, prices=prices))
    rehearsed = next(s for s in decision.standings if s.target == "emu")
    assert rehearsed.speed is None and rehearsed.cost.rehearsal  # its speed is still never ranked
    assert rehearsed.cost.value == pytest.approx(0.1)  # computed the same way: price / (reference rate x 10)
    assert (decision.outcome, decision.basis, decision.target) == ("recommended", "cost", "cpu")  # never emu
    assert decision.lines[1] == (  # shown with its figure, neither a tie nor a loss
        "emu (not ranked): rehearsal cost 0.1 per million requests (0.0952-0.105), 0.10x the reference's cost "
        f"at 10,000.0/s (single stream x 1) ({REHEARSAL})"
    )
    # the control: a real device with the same figures is recommended on cost
    real = _on("neuron", (10.0, 9.5, 10.5))
    priced_real = _priced_run(real, prices=("cpu=3.6/h", "neuron=3.6/h@1device"))
    control = decide_run(priced_real)
    assert (control.outcome, control.target, control.basis) == ("recommended", "neuron", "cost")
    # a rehearsal is not a cost to compare between runs either (regressions read cost_in_run)
    assert cost_in_run(_priced_run(emu, prices=prices), emu) is None
    assert cost_in_run(priced_real, real) == next(s.cost for s in control.standings if s.target == "neuron")
    # with only a rehearsal to rank by cost, and a speed that says nothing of a real device, nothing
    # ranks it: it is recommended on qualifying alone, and the decision says why
    planned = {"prices": ["emu=3.6/h"], "reference_added": True}  # a trial on emu alone: cpu is no candidate
    alone = decide_run(replace(_priced_run(emu), settings=planned))
    assert (alone.target, alone.basis) == ("emu", "qualification")
    assert alone.lines[0].startswith("emu: rehearsal cost 0.1 per million requests") and REHEARSAL in alone.lines[0]
    assert "not ranked: no speed to rank by, and no cost for emu (a rehearsal)" in alone.lines
    # the table marks it too, and says it under the table
    shown = " ".join(_plain(run_view(_priced_run(emu, prices=prices), width=200)).split())
    assert "0.1 (0.0952-0.105) (rehearsal)" in shown and REHEARSAL in shown


def test_a_target_without_a_cost_says_why_beside_it():
    from tests.revisit_data import failed_result

    from bakeoff.report.terminal import run_view
    from bakeoff.verdicts.decision import decide_run

    fast = _on("cpu+inductor", (2.0, 1.9, 2.1))
    run = _priced_run(fast, failed_result("cpu+openvino"), prices=("cpu+inductor=3.6/h",))
    decision = decide_run(run)
    notes = {s.target: (s.cost is not None, s.cost_note) for s in decision.standings}
    assert notes == {"cpu": (False, "not priced"), "cpu+inductor": (True, ""), "cpu+openvino": (False, "not priced")}
    assert "cpu qualifies too: the reference (1.00x) (no cost: not priced)" in decision.lines
    priced_all = decide_run(replace(run, settings={"prices": ["cpu=3.6/h"]}))
    assert {s.target: s.cost_note for s in priced_all.standings}["cpu+openvino"] == "did not run (error)"
    shown = " ".join(_plain(run_view(run, width=200)).split())
    assert "- (not priced)" in shown
    # the control: without prices nothing is said of costs
    unpriced = decide_run(replace(run, settings={}))
    assert all(s.cost_note == "" for s in unpriced.standings) and unpriced.cost_basis == ""
    assert not any("cost" in line for line in unpriced.lines)


def _plain(renderable) -> str:
    import io

    from rich.console import Console

    console = Console(width=200, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def test_every_report_says_the_cost_basis():
    from bakeoff.report.evidence import build_evidence, render_json
    from bakeoff.report.html import render_html
    from bakeoff.report.markdown import render_markdown

    run = _priced_run(_on("cpu+inductor", (2.0, 1.9, 2.1)), prices=("cpu=3.6/h@4cores",))
    evidence = build_evidence([run], generated_at="2025-01-03T00:00:00+00:00")
    said = "single stream x 4 (4 cores, 1 thread each), assumed to scale"
    assert f"- cost basis: {said}" in render_markdown(evidence)
    assert f"<li>cost basis: {said}</li>" in render_html(evidence)
    assert json.loads(render_json(evidence))["runs"][0]["decision"]["cost_basis"] == said
    # the control: without prices no report speaks of a cost basis
    bare = build_evidence([replace(run, settings={})], generated_at="2025-01-03T00:00:00+00:00")
    assert "cost basis" not in render_markdown(bare) and "cost basis" not in render_html(bare)


BUSY = "machine busy: load average up to 3.41 on 2 core(s)"


def _two_fast_targets(**settings):
    from tests.revisit_data import make_run, target_result

    from bakeoff.env import Environment

    env = Environment({"cpu_count": 2, "threads": {"intra_op": 1}})
    fast_one = target_result("cpu+inductor", 0.5)  # 4x the reference, far from the other: a clear win
    slow_one = target_result("cpu+aot_eager", 1.5)
    return make_run("r1", "2026-12-01T00:00:00+00:00", env, (target_result("cpu", 2.0), fast_one, slow_one),
                    settings={"reference": "cpu", **settings})  # fmt: skip


def test_a_ranking_timed_on_a_busy_machine_is_inconclusive_and_says_why():
    quiet = _two_fast_targets()
    assert decide_run(quiet).outcome == "recommended"  # the clean control: the same figures, quiet
    busy = replace(quiet, results=tuple(replace(r, noise=(BUSY,)) for r in quiet.results))
    decision = decide_run(busy)
    assert (decision.outcome, decision.target) == ("inconclusive", "cpu+inductor")  # its best estimate, named
    assert decision.lines[0].startswith(f"inconclusive: the machine was busy while timing ({BUSY})")
    assert "--replicates 3" in decision.lines[0]
    # oversubscription, found from the threads beside the environment's cores, is the machine too
    crowded = replace(quiet, results=tuple(replace(r, threads=8) for r in quiet.results))
    assert "oversubscribed: 8 intra-op threads on 2 core(s)" in decide_run(crowded).lines[0]
    # replicates measured the spread between processes: their intervals include it, the ranking stands
    replicated = replace(busy, settings={**busy.settings, "replicates": 3})
    assert decide_run(replicated).outcome == "recommended"
    # noise that is not the machine's (a wide spread) is in the intervals already
    spread = replace(
        quiet, results=tuple(replace(r, noise=("noisy timings: IQR is 30% of the median",)) for r in quiet.results)
    )
    assert decide_run(spread).outcome == "recommended"


def test_a_single_qualifying_target_needs_no_ranking_on_a_busy_machine():
    run = _two_fast_targets(reference_added=True)  # the reference shown for comparison, not a candidate
    slow_wrong = replace(run.results[2], checks={**run.results[2].checks, "correctness": Correctness("fail", "x")})
    busy = replace(run, results=tuple(replace(r, noise=(BUSY,)) for r in (run.results[0], run.results[1], slow_wrong)))
    decision = decide_run(busy)
    assert (decision.outcome, decision.target) == ("recommended", "cpu+inductor")


def test_targets_never_timed_are_recommended_on_qualifying_alone_and_say_so():
    untimed = Standing("emu")  # the test device: its speed is never ranked
    alone = decide([replace(REF, speed=None, candidate=False), untimed])
    assert (alone.outcome, alone.target, alone.basis) == ("recommended", "emu", "qualification")
    two = decide([untimed, Standing("cpu+aot_eager")])
    assert (two.outcome, two.basis, two.tied) == ("tie", "qualification", ("cpu+aot_eager",))
    timed = decide([REF, fast("cpu+inductor", 2.0, 1.8, 2.2)])  # control: a measured speed ranks as before
    assert (timed.outcome, timed.target, timed.basis) == ("recommended", "cpu+inductor", "speed")


def test_a_run_of_the_reference_alone_says_there_was_no_target_to_decide_on():
    from rich.console import Console

    from bakeoff.report.terminal import decision_view

    alone = decide([replace(REF, candidate=False)])  # exec --on cpu: the one target is the reference
    assert (alone.outcome, alone.target) == ("none", None)
    assert (
        alone.lines[0]
        == "no target was run but the reference (cpu), which targets are compared with: name one with --on"
    )
    console = Console(width=200, record=True)
    console.print(decision_view(alone))
    assert "no target was run but the reference (cpu)" in console.export_text()
    assert decide([]).lines == ("no target was measured",)  # nothing at all: no reference to name


def test_every_report_heads_a_reference_alone_as_nothing_to_decide_and_a_miss_with_its_closest():
    from tests.revisit_data import make_run, target_result

    from bakeoff.env import Environment
    from bakeoff.report.evidence import build_evidence
    from bakeoff.report.html import render_html
    from bakeoff.report.markdown import render_markdown
    from bakeoff.report.terminal import decision_view

    env = Environment({"cpu_count": 2, "threads": {"intra_op": 1}})
    alone = make_run("r1", "2026-12-01T00:00:00+00:00", env, (target_result("cpu", 2.0),),
                     settings={"reference": "cpu", "reference_added": True})  # fmt: skip
    decision = decide_run(alone)
    assert (decision.outcome, decision.target, decision.said) == ("none", None, "nothing")
    evidence = build_evidence([alone], generated_at="2026-12-01T00:00:00+00:00")
    markdown, html = render_markdown(evidence), render_html(evidence)
    assert "**Decision**: nothing to decide" in markdown
    assert ">nothing to decide</span></p>" in html
    assert "nothing to decide" in _plain(decision_view(decision)).splitlines()[0]
    for text in (markdown, html, _plain(decision_view(decision))):
        assert "no target was run but the reference (cpu)" in text
        assert "no target qualifies" not in text and "<strong>-</strong>" not in text and "**-**" not in text
        assert "(by speed" not in text  # no basis: nothing was ranked
    # the control: every target missing something is still headed with the closest, by name
    missed = decide([replace(REF, candidate=False), fast("cpu+inductor", 2.0, 1.8, 2.2, misses=("outputs differ",))])
    assert (missed.outcome, missed.target, missed.said) == ("none", "cpu+inductor", "none")
    assert "no target qualifies; closest: cpu+inductor" in _plain(decision_view(missed))
