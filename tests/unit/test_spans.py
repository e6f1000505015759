"""The spans between a script's captures and the span out of line with the rest, on synthetic
times with known answers."""

from __future__ import annotations

import pytest

from bakeoff.analysis.spans import MAX_SPANS, compare_spans, spans


def test_spans_run_from_the_start_through_each_capture_in_time_order_to_the_end() -> None:
    times = {"loss": [0.10, 0.15, 0.25], "logits": [0.30]}
    found = spans(times, wall_s=0.40)
    assert list(found) == ["start→loss[0]", "loss[0]→loss[1]", "loss[1]→loss[2]", "loss[2]→logits[0]", "logits[0]→end"]
    assert found["start→loss[0]"] == pytest.approx(0.10) and found["loss[1]→loss[2]"] == pytest.approx(0.10)
    assert sum(found.values()) == pytest.approx(0.40)  # they add up to the run
    assert spans({}, wall_s=1.0) == {} and "logits[0]→end" not in spans(times)


def test_past_the_limit_the_last_span_runs_to_the_end_and_the_time_still_adds_up() -> None:
    times = {"loss": [i * 0.001 for i in range(1, 2 * MAX_SPANS)]}
    found = spans(times, wall_s=10.0)
    assert len(found) == MAX_SPANS and sum(found.values()) == pytest.approx(10.0)


def _ms(**spans_ms: float) -> dict[str, list[float]]:
    return {name.replace("_", "→"): [value] for name, value in spans_ms.items()}


def test_the_seeded_slow_span_is_out_of_line_and_the_uniformly_slower_rest_is_not() -> None:
    # the target is 3x slower everywhere (an emulated device), and one span took 300 ms more
    reference = _ms(start_a=100.0, a_b=2.0, b_c=2.0, c_d=2.0, d_end=1.0)
    target = _ms(start_a=300.0, a_b=6.0, b_c=306.0, c_d=6.0, d_end=3.0)
    compared = compare_spans(target, reference)
    assert compared["typical_ratio"] == pytest.approx(3.0)
    flagged = [r["span"] for r in compared["spans"] if r["out_of_line"]]
    assert flagged == ["b→c"]
    slow = next(r for r in compared["spans"] if r["span"] == "b→c")
    assert slow["ratio"] == pytest.approx(153.0) and slow["reference_ms"] == 2.0
    # the control: the same target without the slow span has nothing out of line
    clean = compare_spans(_ms(start_a=300.0, a_b=6.0, b_c=6.0, c_d=6.0, d_end=3.0), reference)
    assert not any(r["out_of_line"] for r in clean["spans"])


def test_a_tiny_span_that_doubles_by_chance_is_not_out_of_line() -> None:
    reference = _ms(start_a=100.0, a_b=0.1, b_end=50.0)
    target = _ms(start_a=100.0, a_b=0.4, b_end=50.0)  # 4x, but 0.3 ms of 150
    assert not any(r["out_of_line"] for r in compare_spans(target, reference)["spans"])


def test_the_median_over_runs_is_compared_and_a_span_the_reference_lacks_has_no_ratio() -> None:
    reference = {"start→a": [10.0, 12.0, 11.0]}
    target = {"start→a": [20.0, 90.0, 22.0], "a→end": [5.0, 5.0, 5.0]}
    rows = {r["span"]: r for r in compare_spans(target, reference)["spans"]}
    assert rows["start→a"]["ms"] == 22.0 and rows["start→a"]["ratio"] == pytest.approx(2.0)
    assert rows["start→a"]["samples_ms"] == [20.0, 90.0, 22.0]
    assert rows["a→end"]["ratio"] is None and not rows["a→end"]["out_of_line"]
    alone = compare_spans(target, None)
    assert alone["typical_ratio"] is None and all(r["ratio"] is None for r in alone["spans"])


def test_the_warm_up_is_shown_not_judged_and_the_typical_ratio_follows_the_steady_work() -> None:
    # the reference spends its time in setup; the target's steps are 5x quicker, its setup and
    # first step (first-use costs) not
    reference = _ms(start_a=150.0, a_b=4.0, b_c=4.0, c_d=4.0, d_e=4.0, e_end=4.0)
    target = _ms(start_a=600.0, a_b=40.0, b_c=300.8, c_d=0.8, d_e=0.8, e_end=0.8)
    compared = compare_spans(target, reference)
    assert compared["typical_ratio"] == pytest.approx(0.2)
    assert [r["span"] for r in compared["spans"] if r["warmup"]] == ["start→a", "a→b"]
    assert [r["span"] for r in compared["spans"] if r["out_of_line"]] == ["b→c"]  # 75x, not the 10x first step
    # the control: without the slow span nothing is out of line, the slow warm-up included
    clean = compare_spans({**target, "b→c": [0.8]}, reference)
    assert not any(r["out_of_line"] for r in clean["spans"])
    # only warm-up spans: their own ratio is the typical one, and none is judged
    short = compare_spans(_ms(start_a=30.0, a_end=9.0), _ms(start_a=10.0, a_end=1.0))
    assert short["typical_ratio"] == pytest.approx(3.0) and not any(r["out_of_line"] for r in short["spans"])


def test_a_slow_span_is_judged_against_the_other_spans_even_where_the_reference_hiccuped_in_it() -> None:
    # the reference spent most of its steady time in b→c (a hiccup on a loaded machine), so the
    # weighted median of all steady spans is b→c's own ratio: judged against itself, the seeded
    # 300 ms span would pass; judged against the other spans (about 0.5x), it is out of line
    reference = _ms(start_a=40.0, a_b=60.0, b_c=20.0, c_d=4.0, d_e=4.0, e_end=4.0)
    target = _ms(start_a=30.0, a_b=10.0, b_c=302.0, c_d=2.0, d_e=2.0, e_end=2.0)
    compared = compare_spans(target, reference)
    assert compared["typical_ratio"] == pytest.approx(0.5)  # the spans not out of line, not b→c's own 15.1x
    rows = {r["span"]: r for r in compared["spans"]}
    assert [name for name, r in rows.items() if r["out_of_line"]] == ["b→c"]
    assert rows["b→c"]["typical_ratio"] == pytest.approx(0.5) and rows["start→a"]["typical_ratio"] is None
    # the control: the same hiccup in the reference, the target honest (about 0.5x everywhere,
    # rounding apart): the hiccuped span is quicker than the rest, nothing is out of line
    clean = compare_spans({**target, "b→c": [2.1]}, reference)
    assert not any(r["out_of_line"] for r in clean["spans"])
    assert {r["span"]: r for r in clean["spans"]}["b→c"]["ratio"] == pytest.approx(0.105)
