"""The decision rule and the cost arithmetic: pure functions on cases with known answers."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from bakeoff.analysis.cost import Price, cost_of, parse_prices, price_for
from bakeoff.errors import SpecError
from bakeoff.verdicts.decision import Standing, decide, standing_of

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
    assert judged.doubts == ("p50<=5ms: 4.9 ms, its interval (4.5 ms-5.3 ms) straddles the limit",)
    placed = replace(clean, checks={**clean.checks, "placement": Placement("fallbacks", "2 ops on the host")})
    assert standing_of(placed).misses == ("work left the device: placement fallbacks",)


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
