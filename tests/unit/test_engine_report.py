"""How an engine's work and precision are reported: never a precision it did not run in, and
shares that agree with the audit's own counts."""

from __future__ import annotations

from bakeoff.checks.placement import engine_notes as placement_engine_notes
from bakeoff.report.evidence import answers_for
from bakeoff.report.figures import placement_share
from bakeoff.results.values import Correctness, Placement, TargetResult, TensorComparison
from bakeoff.target.spec import parse_target

SIGNALS = {"openvino": {"precision": "bf16", "runtime_fallbacks": 4}}
IDLE = {"engine": "openvino", "op_calls": 18890, "op_calls_in_engine": 0, "share": 0.0, "partitions": 4,
        "partitions_failed": 4}  # fmt: skip
BUSY = {**IDLE, "op_calls_in_engine": 18890, "share": 1.0, "partitions_failed": 0}


def engine_notes(result: TargetResult) -> list[str]:
    return placement_engine_notes(result.placement, result)


def correct(err: float) -> Correctness:
    return Correctness("pass", outputs=(TensorComparison("logits", (1, 8, 128), "float32", err, err, 1.0, True),))


def openvino(
    work: dict | None, err: float, verdict: str = "engine_did_not_run", explanation: str = "x"
) -> TargetResult:
    placement = Placement(
        verdict, explanation, ops_total=306, ops_on_device=306, device_op_share=work and work["share"],
        signals=SIGNALS, engine_work=work,
    )  # fmt: skip
    return TargetResult(
        parse_target("cpu+openvino"), "ok", checks={"correctness": correct(err), "placement": placement}
    )


def test_an_engine_that_did_not_run_is_not_said_to_run_in_its_precision():
    notes = engine_notes(openvino(IDLE, 0.0))
    assert notes[0] == "openvino did not run: its bf16 setting was never used"
    assert not any("ran in bf16" in n for n in notes)
    assert "outputs are bit-identical to eager although openvino was set to bf16" in notes[1]


def test_an_engine_that_ran_states_its_precision_without_alarm():
    notes = engine_notes(openvino(BUSY, 3.4e-3, "not_applicable"))
    assert notes == ["openvino ran in bf16"]
    partly = {**BUSY, "op_calls_in_engine": 15112, "share": 0.8}
    assert engine_notes(openvino(partly, 2e-3, "fallbacks")) == [
        "openvino ran 80% of its op calls, in bf16; PyTorch ran the rest"
    ]


def test_bit_identical_is_only_news_under_a_reduced_precision():
    f32 = openvino(BUSY, 0.0, "not_applicable")
    f32 = TargetResult(
        f32.target, "ok",
        checks={
            "correctness": f32.correctness,
            "placement": Placement("not_applicable", "", signals={"openvino": {"precision": "f32"}}, engine_work=BUSY),
        },
    )  # fmt: skip
    assert engine_notes(f32) == ["openvino ran in f32"]


def test_the_reports_share_is_the_engines_not_the_hosts():
    idle = openvino(IDLE, 0.0, explanation="openvino ran 0% of the work handed to it")
    assert placement_share(idle) == "openvino ran 0% of the op calls handed to it (0 of 18890)"
    answer = answers_for(idle).placement
    assert answer.state == "no"
    assert "100%" not in answer.text and "0 of 18890" in answer.text and "never used" in answer.text
    # an old stored CPU result without the engine's counts shows no share at all, not "100% on the device"
    old = TargetResult(
        parse_target("cpu+openvino"), "ok",
        checks={"placement": Placement("fallbacks", "1 op call(s) did not run in the backend", device_op_share=1.0)},
    )  # fmt: skip
    assert placement_share(old) == "" and "100%" not in answers_for(old).placement.text


def test_placement_reads_documents_with_and_without_the_new_fields():
    new = openvino(IDLE, 0.0).placement
    assert Placement.from_dict(new.to_dict()) == new
    old = {k: v for k, v in new.to_dict().items() if k not in ("engine_work", "host_state_copies")}
    assert Placement.from_dict(old).engine_work is None and Placement.from_dict(old).host_state_copies == ()
    newer = {**new.to_dict(), "a_field_from_the_future": 1}
    assert Placement.from_dict(newer) == new
