"""What a target would take: each kind of evidence gives its item with its figure, a remedy the
run measured says what it did, and a clean target gets no item."""

from __future__ import annotations

from dataclasses import replace

from tests.revisit_data import environment, make_run, target_result

from bakeoff.checks.compilation import Compilation
from bakeoff.checks.correctness import Correctness
from bakeoff.checks.placement import Placement
from bakeoff.target.spec import parse_target
from bakeoff.verdicts.remedies import remedies_for, what_it_takes

WHEN = "2025-01-01T00:00:00+00:00"


def _run(*results, settings=None):
    return make_run("r1", WHEN, environment(), results, settings=settings)


def _with(result, **checks):
    return replace(result, checks={**result.checks, **checks})


def test_a_clean_target_takes_nothing():
    clean = _with(target_result("cpu+inductor"), compilation=Compilation(graphs=1))
    run = _run(target_result("cpu"), clean)
    assert remedies_for(run, clean) == [] and what_it_takes(run) == {}


def test_recompiles_with_the_padded_variant_measured():
    as_is = _with(
        target_result("cpu+inductor", 2.0), compilation=Compilation(graphs=9, recompiles=8, recompile_limit_hits=2)
    )
    padded = replace(
        _with(target_result("cpu+inductor", 1.0), compilation=Compilation(graphs=2, recompiles=1)),
        variant="bucketed",
        profile={"padding_waste": 0.18},
    )
    run = _run(target_result("cpu"), as_is, padded, settings={"buckets": {"chosen": [64, 128], "waste": 0.18}})
    (item,) = remedies_for(run, as_is)
    assert item.kind == "recompiles"
    assert (
        item.finding
        == "8 recompilation(s) over the request shapes, the recompile limit hit 2 time(s) (those shapes ran eagerly)"
    )
    assert item.measured.startswith("padded to buckets [64, 128]: 1 recompilation(s), p90 ")
    assert item.measured.endswith("padding waste 18.0%, correctness pass")
    # without the padded variant the same finding is a suggestion, marked as not measured
    (alone,) = remedies_for(_run(target_result("cpu"), as_is), as_is)
    assert alone.measured == "" and "--pad-to-buckets auto" in alone.change
    # a script's inputs are its own: exec has no --pad-to-buckets to suggest
    script = replace(_run(target_result("cpu"), as_is), workload={"kind": "script", "spec": "script:train.py"})
    (scripted,) = remedies_for(script, as_is)
    assert scripted.change == "pad the script's inputs to a few fixed lengths, or compile with dynamic shapes"


def test_host_ops_host_state_and_stray_parameters_each_name_their_figure():
    placement = Placement(
        "left_on_host",
        "host state",
        host_ops={"aten::nonzero": 2},
        fallback_ops={"aten::index": 8},
        host_state_copies=({"module": "model.rotary", "count": 2, "bytes": 4096},),
        stray_parameters=("lm_head.weight",),
    )
    device = _with(target_result("neuron"), placement=placement)
    items = remedies_for(_run(target_result("cpu"), device), device)
    assert [i.kind for i in items] == ["placement"] * 3
    assert items[0].finding == "10 op call(s) per forward pass ran on the host: aten::index x8, aten::nonzero x2"
    assert items[1].finding == "model.rotary copies host state to the device 2 time(s) per forward pass (4.0 KiB)"
    assert "register_buffer" in items[1].change
    assert items[2].finding == "1 parameter(s) or buffer(s) left on the host: lm_head.weight"
    # a script's audit (bakeoff exec) covers the whole run, not a forward pass: the words say so
    script = _with(target_result("neuron"), placement=replace(placement, signals={"script": {"audit_s": 0.1}}))
    words = [i.finding for i in remedies_for(_run(target_result("cpu"), script), script)]
    assert words[0] == "10 op call(s) in the script run ran on the host: aten::index x8, aten::nonzero x2"
    assert words[1] == "model.rotary copies host state to the device 2 time(s) in the script run (4.0 KiB)"


def test_a_missed_requirement_says_by_how_much_and_wrong_outputs_come_first():
    missed = {"text": "p90<=5ms", "verdict": "not_met", "value": 7.5, "threshold": 5.0, "op": "<=", "unit": "ms"}
    met = {**missed, "text": "p50<=9ms", "verdict": "met", "value": 4.0, "threshold": 9.0}
    slow = replace(_with(target_result("cpu+inductor"), compilation=Compilation(graphs=1),
                         correctness=Correctness("fail", "output.logits off by 5%", "eager:float32", 1e-4)),
                   requirements=(missed, met))  # fmt: skip
    items = remedies_for(_run(target_result("cpu"), slow), slow)
    assert [i.kind for i in items] == ["wrong", "requirement"]
    assert items[0].finding == "outputs differ from the reference: output.logits off by 5%"
    assert items[1].finding == "p90<=5ms: measured 7.5 ms: 1.50x too high"


def test_a_reduced_engine_precision_points_at_the_option_and_its_measured_effect():
    def openvino(spec, verdict):
        placement = Placement(
            "not_applicable", "", signals={"openvino": {"precision": "bf16" if "f32" not in spec else "f32"}}
        )
        correctness = Correctness(verdict, "rms error 5e-3 > 2x floor")
        return _with(
            target_result(spec), correctness=correctness, placement=placement, compilation=Compilation(graphs=1)
        )

    bf16, f32 = openvino("cpu+openvino", "fail"), openvino("cpu+openvino?precision=f32", "pass")
    (item,) = remedies_for(_run(target_result("cpu"), bf16, f32), bf16)
    assert item.kind == "precision" and item.finding.startswith("openvino ran in bf16: rms error")
    assert item.change == "pass the engine's precision option (cpu+openvino?precision=f32)"
    assert item.measured == "cpu+openvino?precision=f32: correctness pass"
    assert remedies_for(_run(target_result("cpu"), bf16, f32), f32) == []  # the control


def test_an_overflowing_dtype_is_an_item_and_the_reference_takes_nothing():
    half = replace(target_result("cpu"), target=parse_target("cpu?dtype=fp16"), is_reference=False)
    half = _with(half, correctness=Correctness("pass", drift={"reference": "eager:float32", "max_abs_err": 1.8e308}))
    ref = target_result("cpu")
    run = _run(ref, half)
    (item,) = remedies_for(run, half)
    assert item.finding == "outputs overflow in float16: not finite where eager:float32 is"
    assert remedies_for(run, ref) == []


def test_wrong_outputs_point_at_the_localised_origin_or_at_the_command_that_finds_it():
    from bakeoff.checks.localization import Localization, Origin

    wrong = _with(target_result("xpu"), correctness=Correctness("fail", "output.logits off", "eager:float32", 1e-4))
    run = _run(target_result("cpu"), wrong)
    item = remedies_for(run, wrong)[0]
    assert item.kind == "wrong" and item.change.startswith("find where the target diverges (`bakeoff localize r1:xpu`)")
    origin = Origin("model.layers.0.mlp.act_fn", "SiLUActivation", 0, 4, 0.01, 2e-7, 2.5e4, 2.0, 16, "confirmed",
                    op_suspect="aten.silu (op 1 of 1)")  # fmt: skip
    localised = _with(wrong, localization=Localization("localized", "hooks", origins=(origin,)))
    item = remedies_for(_run(target_result("cpu"), localised), localised)[0]
    assert item.kind == "wrong" and item.change == (
        "report it to the backend: the divergence starts in model.layers.0.mlp.act_fn (SiLUActivation), first wrong "
        "op aten.silu (op 1 of 1) (confirmed by replay); a wrong result is not tunable"
    )
