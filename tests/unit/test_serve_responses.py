"""Response parity (bakeoff.serve.responses): each target response against the reference's.

Load runs are built directly as values: no processes, no network. Every verdict has a seeded
fault it must catch and an honest control it must pass; every explanation is checked against
the figures beside it.
"""

from __future__ import annotations

import json
import re
import struct
from typing import Any

import pytest

from bakeoff.errors import SpecError
from bakeoff.serve.load import LoadRun, Sent
from bakeoff.serve.responses import ResponseParity, compare_responses

ULP32 = 2.0**-24


def run(bodies: list[Any], failed: dict[int, str] | None = None) -> LoadRun:
    """A load run whose request ``i`` answered ``bodies[i]`` (JSON unless bytes), or failed."""
    failed = failed or {}
    requests = []
    for i, body in enumerate(bodies):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        if i in failed:
            requests.append(Sent(i, i * 0.1, i * 0.1, None, 0, failed[i], b""))
        else:
            requests.append(Sent(i, i * 0.1, i * 0.1, i * 0.1 + 0.05, 200, None, data))
    return LoadRun(tuple(requests), len(bodies) * 0.1)


def response(i: int) -> dict[str, Any]:
    return {
        "id": f"req-{i}",
        "logits": [0.4512 + 0.01 * i, -1.25 - 0.1 * i, 3.5 + i],
        "choices": [{"index": 0, "text": "hello world", "token_ids": [11, 12, 13], "finish_reason": "length"}],
        "usage": {"completion_tokens": 3},
    }


def scaled(body: Any, factor: float) -> Any:
    """``body`` with every float multiplied by ``factor`` (integers and text kept)."""
    if isinstance(body, dict):
        return {k: scaled(v, factor) for k, v in body.items()}
    if isinstance(body, list):
        return [scaled(v, factor) for v in body]
    return body * factor if isinstance(body, float) else body


def float32(body: Any) -> Any:
    """``body`` with every float rounded to float32 (another engine, computing in float32)."""
    if isinstance(body, dict):
        return {k: float32(v) for k, v in body.items()}
    if isinstance(body, list):
        return [float32(v) for v in body]
    return struct.unpack("f", struct.pack("f", body))[0] if isinstance(body, float) else body


def consistent(parity: ResponseParity) -> ResponseParity:
    """Assert the one-line reason says what the fields say (and each difference's percentage
    what its values say), and that the value round-trips through JSON; return it."""
    reason = parity.reason
    skipped = parity.not_compared_reference + parity.not_compared_target
    if skipped:
        assert (
            f"{skipped} not compared ({parity.not_compared_reference} failed on the reference, "
            f"{parity.not_compared_target} on the target alone)" in reason
        )
    else:
        assert "not compared" not in reason
    if parity.verdict == "fail":
        assert reason.startswith(f"{parity.differing} of {parity.compared} responses differ")
        for d in parity.first:
            assert f"request {d.index} at {d.path} ({d.reference} vs {d.target}, {d.reason})" in reason
        more = parity.differing - len(parity.first)
        assert (f"and {more} more" in reason) is (more > 0)
    elif parity.verdict == "pass":
        assert reason.startswith(f"all {parity.compared} responses match")
        assert (f"{parity.near_ties} of them at a near tie" in reason) is (parity.near_ties > 0)
    elif parity.compared:  # too few compared: the reference failed on the rest
        asked = parity.compared + parity.not_compared_reference
        assert reason.startswith(f"only {parity.compared} of {asked} requests could be compared (under 90%)")
        assert parity.compared < 0.9 * asked
    else:
        assert reason.startswith("no response compared") and parity.compared == 0
    for d in parity.first:
        shown = re.fullmatch(r"(\d+\.\d)% off", d.reason)
        if shown:
            r, t = float(d.reference), float(d.target)
            assert float(shown.group(1)) == pytest.approx(abs(t - r) / abs(r) * 100, abs=0.05)
    data = json.loads(json.dumps(parity.to_dict()))
    assert data["verdict"] == parity.verdict and data["reason"] == parity.reason
    assert ResponseParity.from_dict(data) == parity
    return parity


# -- numbers: the seeded fault and the honest controls ------------------------------------------


def test_one_percent_off_on_three_requests_fails_naming_exactly_those() -> None:
    reference = [response(i) for i in range(20)]
    target = [scaled(b, 1 + 4 * ULP32) for b in reference]  # every request a few roundoffs off
    for i in (3, 7, 11):
        target[i]["logits"][2] *= 1.01
    parity = consistent(compare_responses(run(reference), run(target), dtype="float32"))
    assert parity.verdict == "fail"
    assert (parity.compared, parity.differing) == (20, 3)
    assert [d.index for d in parity.first] == [3, 7, 11]
    assert {d.path for d in parity.first} == {"$.logits[2]"}
    assert {d.reason for d in parity.first} == {"1.0% off"}
    assert "3 of 20 responses differ" in parity.reason and "request 7 at $.logits[2]" in parity.reason


@pytest.mark.parametrize("honest", [lambda b: scaled(b, 1 + 4 * ULP32), lambda b: scaled(b, 1 - 3 * ULP32), float32])
def test_rounding_level_differences_on_every_request_pass(honest: Any) -> None:
    reference = [response(i) for i in range(20)]
    target = [honest(b) for b in reference]
    assert any(t != r for t, r in zip(target, reference, strict=True))  # not bit-identical
    parity = consistent(compare_responses(run(reference), run(target)))
    assert parity.verdict == "pass" and (parity.compared, parity.differing) == (20, 0)
    assert "1e-4" in parity.rule or "0.0001" in parity.rule


def test_bfloat16_is_looser_than_float32() -> None:
    reference = [{"value": 0.8}]
    target = [{"value": 0.8 * 1.005}]
    assert consistent(compare_responses(run(reference), run(target), dtype="bfloat16")).verdict == "pass"
    tight = consistent(compare_responses(run(reference), run(target), dtype="float32"))
    assert tight.verdict == "fail" and tight.first[0].reason == "0.5% off"
    assert (
        "float32" in tight.rule and "bfloat16" in compare_responses(run(reference), run(target), dtype="bfloat16").rule
    )


def test_an_integer_written_as_a_float_is_a_number_and_nans_agree() -> None:
    parity = compare_responses(run([{"x": 1, "y": float("nan")}]), run([{"x": 1.0, "y": float("nan")}]))
    assert consistent(parity).verdict == "pass"


# -- exact parts: token ids, text, keys, lengths, kinds -----------------------------------------


@pytest.mark.parametrize(
    ("change", "path", "reason"),
    [
        (lambda b: b["choices"][0]["token_ids"].__setitem__(2, 99), "$.choices[0].token_ids[2]", "differs"),
        (lambda b: b["choices"][0].__setitem__("text", "hello World"), "$.choices[0].text", "differs"),
        (lambda b: b["usage"].__setitem__("completion_tokens", 4), "$.usage.completion_tokens", "differs"),
        (lambda b: b["choices"][0].pop("finish_reason"), "$.choices[0].finish_reason", "missing on the target"),
        (lambda b: b.__setitem__("extra", 1), "$.extra", "extra on the target"),
        (lambda b: b["logits"].pop(), "$.logits", "3 items vs 2"),
        (
            lambda b: b["usage"].__setitem__("completion_tokens", "3"),
            "$.usage.completion_tokens",
            "an integer vs a string",
        ),
        (
            lambda b: b["usage"].__setitem__("completion_tokens", True),
            "$.usage.completion_tokens",
            "an integer vs a boolean",
        ),
    ],
)
def test_an_exact_difference_is_caught_with_its_path(change: Any, path: str, reason: str) -> None:
    reference = [response(i) for i in range(4)]
    target = [response(i) for i in range(4)]
    change(target[2])
    parity = consistent(compare_responses(run(reference), run(target)))
    assert parity.verdict == "fail" and parity.differing == 1
    (d,) = parity.first
    assert (d.index, d.path, d.reason) == (2, path, reason)


def test_bodies_that_are_not_json_are_compared_as_bytes() -> None:
    same = compare_responses(run([b"plain text", b"ok"]), run([b"plain text", b"ok"]))
    assert consistent(same).verdict == "pass"
    parity = consistent(compare_responses(run([b"plain text", b"ok"]), run([b"plain text", b"ok!"])))
    assert parity.verdict == "fail" and (parity.first[0].index, parity.first[0].path) == (1, "$")
    assert parity.first[0].reason == "bytes differ (not JSON)"


def test_long_values_are_clipped_and_only_the_first_shown_are_kept() -> None:
    reference = [{"text": "a" * 500} for _ in range(8)]
    target = [{"text": "b" * 500} for _ in range(8)]
    parity = consistent(compare_responses(run(reference), run(target), shown=5))
    assert parity.differing == 8 and [d.index for d in parity.first] == [0, 1, 2, 3, 4]
    assert all(len(d.reference) <= 80 and d.reference.endswith("...") for d in parity.first)
    assert parity.reason.endswith("and 3 more")


# -- near ties -----------------------------------------------------------------------------------


def generation(ids: list[int], top: list[dict[str, float]], text: str) -> dict[str, Any]:
    return {"choices": [{"token_ids": ids, "top_logprobs": top, "text": text, "finish_reason": "length"}]}


REF_TOP = [{"5": -0.1, "9": -2.0}, {"6": -0.2, "1": -3.0}, {"7": -0.69310, "3": -0.69315}, {"8": -0.5, "2": -1.0}]
TGT_TOP = [{"5": -0.1, "9": -2.0}, {"6": -0.2, "1": -3.0}, {"3": -0.69312, "7": -0.69313}, {"2": -0.1, "4": -2.0}]


def test_parting_at_a_near_tie_is_reported_not_failed() -> None:
    reference = [generation([5, 6, 7, 8], REF_TOP, "abcd"), generation([5, 6], REF_TOP[:2], "ab")]
    target = [generation([5, 6, 3, 2], TGT_TOP, "abxy"), generation([5, 6], REF_TOP[:2], "ab")]
    parity = consistent(compare_responses(run(reference), run(target)))
    assert parity.verdict == "pass" and (parity.compared, parity.differing, parity.near_ties) == (2, 0, 1)
    (tie,) = parity.ties
    assert (tie.index, tie.path, tie.reference, tie.target) == (0, "$.choices[0].token_ids[2]", "7", "3")
    assert tie.reason.startswith("near tie")


def test_parting_where_the_reference_clearly_prefers_a_token_fails() -> None:
    clear = [*REF_TOP[:2], {"7": -0.1, "3": -2.5}, REF_TOP[3]]
    parity = consistent(
        compare_responses(
            run([generation([5, 6, 7, 8], clear, "abcd")]), run([generation([5, 6, 3, 2], TGT_TOP, "abxy")])
        )
    )
    assert parity.verdict == "fail" and parity.near_ties == 0
    assert parity.first[0].path == "$.choices[0].token_ids[2]"


def test_logprobs_before_a_near_tie_are_still_compared() -> None:
    off = [{"5": -0.1 * 1.01, "9": -2.0}, *TGT_TOP[1:]]
    parity = consistent(
        compare_responses(
            run([generation([5, 6, 7, 8], REF_TOP, "abcd")]), run([generation([5, 6, 3, 2], off, "abxy")])
        )
    )
    assert parity.verdict == "fail" and parity.first[0].path == "$.choices[0].top_logprobs[0].5"


def test_at_a_near_tie_a_token_that_was_no_candidate_or_an_answer_of_another_shape_fails() -> None:
    reference = [generation([5, 6, 7, 8], REF_TOP, "abcd")]
    junk = consistent(compare_responses(run(reference), run([generation([5, 6, 999, 999], TGT_TOP, "abxy")])))
    assert junk.verdict == "fail" and junk.near_ties == 0  # 999 is neither of the tied 7 and 3
    assert junk.first[0].path == "$.choices[0].token_ids[2]"
    garbage = {"choices": [{"token_ids": [5, 6, 3], "text": "garbage", "finish_reason": 3}]}
    shape = consistent(compare_responses(run(reference), run([garbage])))
    assert shape.verdict == "fail"  # the tie itself is fine; the logprobs gone and a number for a reason are not
    assert [(d.path, d.reason) for d in shape.first] == [("$.choices[0].top_logprobs", "missing on the target")]
    assert shape.differing == 1 and "finish_reason" not in shape.reason  # one request; its first difference shown
    # the control: the tied runner-up taken, the rest of the object in its shape: a near tie
    tied = consistent(compare_responses(run(reference), run([generation([5, 6, 3, 2], TGT_TOP, "abxy")])))
    assert tied.near_ties == 1


def test_candidates_near_equal_at_the_cut_may_fall_either_side_of_it_and_one_clearly_above_fails() -> None:
    # bfloat16 ranks the second and third candidates (near-equal) the other way: 585 drops out, 176 comes in
    ref = {"token_ids": [11, 12], "logprobs": [{"11": -0.3, "585": -6.4954}, {"12": -0.1, "4": -3.0}]}
    honest = {"token_ids": [11, 12], "logprobs": [{"11": -0.3004, "176": -6.4970}, {"12": -0.1001, "4": -3.002}]}
    parity = consistent(compare_responses(run([ref]), run([honest]), dtype="bfloat16"))
    assert parity.verdict == "pass", parity.reason
    # a candidate the reference ranks well above the target's lowest, missing on the target
    dropped = {"token_ids": [11, 12], "logprobs": [{"11": -0.3, "176": -9.0}, {"12": -0.1, "4": -3.0}]}
    fault = consistent(compare_responses(run([ref]), run([dropped]), dtype="bfloat16"))
    assert fault.verdict == "fail"
    assert (fault.first[0].path, fault.first[0].reference, fault.first[0].target) == ("$.logprobs[0].585", "-6.4954",
                                                                                      "(missing)")  # fmt: skip
    assert fault.first[0].reason == "not among the target's candidates, whose lowest is -9"
    # a shared candidate's number is still compared at the tolerance
    off = {"token_ids": [11, 12], "logprobs": [{"11": -0.36, "176": -6.4970}, {"12": -0.1, "4": -3.0}]}
    assert consistent(compare_responses(run([ref]), run([off]), dtype="bfloat16")).first[0].path == "$.logprobs[0].11"


def test_openai_style_top_logprobs_are_candidates_and_a_token_field_is_no_candidate() -> None:
    def chat(top: list[dict[str, Any]], token: str = "a") -> dict[str, Any]:
        return {"logprobs": {"content": [{"token": token, "logprob": -0.1, "top_logprobs": top}]}}

    ref = [{"token": "a", "logprob": -0.1}, {"token": "b", "logprob": -4.00}, {"token": "c", "logprob": -4.001}]
    swapped = [{"token": "a", "logprob": -0.1}, {"token": "c", "logprob": -4.0005}, {"token": "b", "logprob": -4.0}]
    assert consistent(compare_responses(run([chat(ref)]), run([chat(swapped)]), dtype="bfloat16")).verdict == "pass"
    wrong = [{"token": "a", "logprob": -0.1}, {"token": "b", "logprob": -4.0}, {"token": "z", "logprob": -9.0}]
    parity = consistent(compare_responses(run([chat(ref)]), run([chat(wrong)]), dtype="bfloat16"))
    assert parity.verdict == "fail" and parity.first[0].path == "$.logprobs.content[0].top_logprobs.c"
    # one position's own object (its token and number) is walked as an object: its token id exactly
    one = {"logprobs": [{"token": 1000, "logprob": -0.3}]}
    other = {"logprobs": [{"token": 1001, "logprob": -0.3}]}
    parity = consistent(compare_responses(run([one]), run([other]), dtype="bfloat16"))
    assert parity.verdict == "fail" and parity.first[0].path == "$.logprobs[0].token"


# -- failed requests and nothing compared ------------------------------------------------------


def test_failed_requests_are_counted_apart_and_not_compared() -> None:
    reference = [response(i) for i in range(6)]
    target = [response(i) for i in range(6)]
    for i in (0, 1, 2):
        target[i]["logits"][0] = 99.0  # would differ, but a side failed
    parity = consistent(
        compare_responses(
            run(reference, failed={0: "timeout", 2: "http"}), run(target, failed={1: "connection", 2: "timeout"})
        )
    )
    assert (parity.compared, parity.not_compared_reference, parity.not_compared_target) == (3, 2, 1)
    # the reference answered 3 of 5 requests the target could be checked on: too few for a pass
    assert parity.verdict == "not_compared" and parity.differing == 0


@pytest.mark.parametrize(
    ("answered", "failed", "verdict"),
    [(200, 162, "not_compared"), (200, 20, "pass"), (200, 21, "not_compared"), (10, 1, "pass")],
)
def test_a_reference_that_failed_partway_leaves_a_pass_only_where_it_answered_nine_in_ten(
    answered: int, failed: int, verdict: str
) -> None:
    """A reference service that died after 38 of 200 requests: the target's 162 later answers
    (wrong, here) were never checked, and its 38 matching ones made it 'pass'."""
    reference = [response(i) for i in range(answered)]
    target = [response(i) if i < answered - failed else scaled(response(i), 1.5) for i in range(answered)]
    gone = {i: "connection" for i in range(answered - failed, answered)}
    parity = consistent(compare_responses(run(reference, failed=gone), run(target)))
    assert (parity.compared, parity.not_compared_reference, parity.differing) == (answered - failed, failed, 0)
    assert parity.verdict == verdict


def test_a_request_missing_from_the_target_is_not_compared() -> None:
    reference = run([response(i) for i in range(3)])
    target = LoadRun(run([response(i) for i in range(3)]).requests[:2], 0.2)
    parity = consistent(compare_responses(reference, target))
    assert (parity.compared, parity.not_compared_target) == (2, 1)


@pytest.mark.parametrize(
    ("reference", "target"),
    [
        (run([response(0), response(1)], failed={0: "timeout", 1: "timeout"}), run([response(0), response(1)])),
        (run([response(0)]), run([response(0)], failed={0: "http"})),
        (run([]), run([])),
    ],
)
def test_nothing_compared_is_never_a_pass(reference: LoadRun, target: LoadRun) -> None:
    parity = consistent(compare_responses(reference, target))
    assert parity.verdict == "not_compared" and parity.compared == 0


# -- a user's comparison function ----------------------------------------------------------------


def same_answer(reference: bytes, target: bytes) -> tuple[bool, str]:
    """Only the answer's text matters; the id is the server's own."""
    r, t = json.loads(reference), json.loads(target)
    ok = r["choices"][0]["text"].lower() == t["choices"][0]["text"].lower()
    return ok, "" if ok else f"answers differ: {t['choices'][0]['text']!r}"


def fragile(reference: bytes, target: bytes) -> bool:
    return json.loads(target)["missing"] == 1


def test_a_user_function_decides() -> None:
    reference = [response(i) for i in range(4)]
    target = [{**response(i), "id": "other"} for i in range(4)]
    target[1]["choices"][0]["text"] = "HELLO WORLD"  # the same answer to this function
    target[3]["choices"][0]["text"] = "goodbye"
    parity = consistent(compare_responses(run(reference), run(target), compare=same_answer))
    assert parity.verdict == "fail" and parity.differing == 1
    assert (parity.first[0].index, parity.first[0].reason) == (3, "answers differ: 'goodbye'")
    assert "same_answer" in parity.rule
    assert compare_responses(run(reference), run(reference), compare=lambda r, t: False).differing == 4


def test_a_user_functions_exception_is_a_difference_not_a_crash() -> None:
    parity = consistent(
        compare_responses(run([response(0), response(1)]), run([response(0), response(1)]), compare=fragile)
    )
    assert parity.verdict == "fail" and parity.differing == 2 and parity.compared == 2
    assert parity.first[0].reason == "the function raised KeyError: 'missing'"


def test_a_module_function_string_is_imported(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bakeoff_test_respcheck.py").write_text(
        "def same_length(reference, target):\n    return len(reference) == len(target)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(__import__("sys").modules, "bakeoff_test_respcheck", raising=False)
    spec = "bakeoff_test_respcheck:same_length"
    parity = consistent(compare_responses(run([b"abc", b"abc"]), run([b"xyz", b"abcd"]), compare=spec))
    assert (parity.verdict, parity.differing, parity.first[0].index) == ("fail", 1, 1)
    assert parity.rule == f"the user's function {spec}"


@pytest.mark.parametrize(
    "spec",
    [
        "no_colon",
        "a:b:c",
        "mod:",
        ":fn",
        "has space:fn",
        "bakeoff_surely_absent_module:fn",
        "json:no_such_fn",
        "json:__doc__",
    ],
)
def test_a_malformed_or_unimportable_spec_is_a_spec_error(spec: str) -> None:
    with pytest.raises(SpecError) as caught:
        compare_responses(run([response(0)]), run([response(0)]), compare=spec)
    assert caught.value.hint and "module:function" in caught.value.hint
