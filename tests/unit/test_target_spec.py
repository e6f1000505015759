"""Target spec parsing: ``DEVICE[:INDEX][+BACKEND][?option=value&...]``."""

from __future__ import annotations

import pytest

from bakeoff.errors import SpecError
from bakeoff.target.spec import DTYPE_ALIASES, KNOWN_DEVICES, Target, parse_target, parse_targets

# -- successful parses ------------------------------------------------------------------


def test_plain_cpu() -> None:
    t = parse_target("cpu")
    assert t == Target(device="cpu")
    assert t.index is None and t.backend is None and t.dtype is None
    assert t.dynamic is None and t.mode is None and t.fullgraph is False and t.threads is None
    assert not t.is_compiled
    assert t.torch_device == "cpu"
    assert t.spec == "cpu"
    assert str(t) == "cpu"


def test_device_with_index() -> None:
    t = parse_target("cuda:1")
    assert t.device == "cuda"
    assert t.index == 1
    assert t.torch_device == "cuda:1"
    assert t.spec == "cuda:1"


def test_index_zero_is_kept_distinct_from_no_index() -> None:
    assert parse_target("cuda:0").index == 0
    assert parse_target("cuda:0") != parse_target("cuda")
    assert parse_target("cuda:0").torch_device == "cuda:0"


def test_backend() -> None:
    t = parse_target("cpu+inductor")
    assert t.device == "cpu"
    assert t.backend == "inductor"
    assert t.is_compiled
    assert t.torch_device == "cpu"
    assert t.spec == "cpu+inductor"


def test_backend_with_options() -> None:
    t = parse_target("cpu+inductor?dynamic=false&mode=max-autotune")
    assert t == Target(device="cpu", backend="inductor", dynamic=False, mode="max-autotune")
    # canonical order and spelling
    assert t.spec == "cpu+inductor?dynamic=false&mode=max-autotune"


def test_all_options_together() -> None:
    t = parse_target("cuda:2+inductor?threads=3&fullgraph=yes&mode=reduce-overhead&dynamic=on&dtype=half")
    assert t == Target(
        device="cuda",
        index=2,
        backend="inductor",
        dtype="float16",
        dynamic=True,
        mode="reduce-overhead",
        fullgraph=True,
        threads=3,
    )
    assert t.spec == "cuda:2+inductor?dtype=float16&dynamic=true&mode=reduce-overhead&fullgraph=true&threads=3"


@pytest.mark.parametrize(
    ("alias", "expected"),
    [
        ("bf16", "bfloat16"),
        ("BF16", "bfloat16"),
        ("bfloat16", "bfloat16"),
        ("fp16", "float16"),
        ("half", "float16"),
        ("float16", "float16"),
        ("fp32", "float32"),
        ("float", "float32"),
        ("float32", "float32"),
        ("fp64", "float64"),
        ("double", "float64"),
    ],
)
def test_dtype_aliases(alias: str, expected: str) -> None:
    t = parse_target(f"cpu?dtype={alias}")
    assert t.dtype == expected
    assert t.spec == f"cpu?dtype={expected}"


def test_every_dtype_alias_maps_to_a_canonical_name() -> None:
    canonical = {"float32", "float16", "bfloat16", "float64"}
    assert set(DTYPE_ALIASES.values()) == canonical
    for alias in DTYPE_ALIASES:
        assert parse_target(f"cpu?dtype={alias}").dtype in canonical


def test_dynamic_auto_means_pytorch_default() -> None:
    assert parse_target("cpu+inductor?dynamic=auto").dynamic is None
    assert parse_target("cpu+inductor?dynamic=none").dynamic is None
    assert parse_target("cpu+inductor?dynamic=auto").spec == "cpu+inductor"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", True),
        ("true", True),
        ("Yes", True),
        ("on", True),
        ("0", False),
        ("FALSE", False),
        ("no", False),
        ("off", False),
    ],
)
def test_bool_spellings(text: str, value: bool) -> None:
    assert parse_target(f"cpu+inductor?fullgraph={text}").fullgraph is value


def test_threads() -> None:
    t = parse_target("cpu?threads=4")
    assert t.threads == 4
    assert t.effective_threads == 4
    assert t.spec == "cpu?threads=4"


def test_effective_threads_defaults() -> None:
    assert parse_target("cpu").effective_threads == 1
    assert parse_target("cpu+inductor").effective_threads == 1
    assert parse_target("cuda").effective_threads is None
    # the test device computes with the host's CPU kernels: one thread, as the CPU targets
    assert parse_target("emu", extra_devices=("emu",)).effective_threads == 1
    assert parse_target("cuda?threads=2").effective_threads == 2


def test_surrounding_whitespace_is_ignored() -> None:
    assert parse_target("  cpu+inductor  ") == parse_target("cpu+inductor")


# -- canonical spec round trip ----------------------------------------------------------

ROUND_TRIP = [
    "cpu",
    "cuda:1",
    "cuda:0",
    "cpu+inductor",
    "cpu+inductor?dynamic=false&mode=max-autotune",
    "neuron+neuron?dtype=bf16",
    "cuda+inductor?mode=max-autotune-no-cudagraphs&fullgraph=1&dynamic=true",
    "cpu?threads=2&dtype=fp16",
    "cpu+inductor?fullgraph=false",
    "xpu:3+openvino?dtype=double&threads=7&dynamic=auto",
    "mps+my.backend-v2",
]


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_spec_round_trip(text: str) -> None:
    t = parse_target(text)
    again = parse_target(t.spec)
    assert again == t
    assert again.spec == t.spec  # canonical is a fixed point


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_dict_round_trip(text: str) -> None:
    t = parse_target(text)
    data = t.to_dict()
    assert data["spec"] == t.spec
    assert Target.from_dict(data) == t


def test_equivalent_spellings_have_one_canonical_spec() -> None:
    a = parse_target("cpu+inductor?mode=max-autotune&dtype=bf16")
    b = parse_target("cpu+inductor?dtype=bfloat16&mode=max-autotune")
    assert a == b
    assert a.spec == b.spec == "cpu+inductor?dtype=bfloat16&mode=max-autotune"


# -- errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "CPU",  # upper case device
        "cpu:",  # index missing
        "cpu:x",  # non-numeric index
        "cpu+",  # backend missing
        "cpu+a+b",  # two backends
        "1cpu",  # starts with a digit
        "cpu inductor",  # space
        "cuda:-1",
        ":0",
    ],
)
def test_malformed_head(text: str) -> None:
    with pytest.raises(SpecError, match="malformed target") as info:
        parse_target(text)
    assert info.value.hint and "DEVICE" in info.value.hint


@pytest.mark.parametrize("text", ["", "   ", "?dtype=fp32"])
def test_empty_head(text: str) -> None:
    with pytest.raises(SpecError, match="empty target spec"):
        parse_target(text)


def test_unknown_device_lists_valid_devices() -> None:
    with pytest.raises(SpecError) as info:
        parse_target("tpu")
    message = str(info.value)
    assert "unknown device 'tpu'" in message
    for device in KNOWN_DEVICES:
        assert device in message
    assert "bakeoff targets" in (info.value.hint or "")


def test_unknown_device_message_includes_extra_devices() -> None:
    with pytest.raises(SpecError) as info:
        parse_target("tpu", extra_devices=("npu",))
    assert "npu" in str(info.value)


def test_unknown_option() -> None:
    with pytest.raises(SpecError, match="unknown option 'accuracy'") as info:
        parse_target("cpu?accuracy=fp32")
    assert "dtype" in (info.value.hint or "")


def test_precision_option() -> None:
    assert parse_target("cpu+openvino?precision=F32").precision == "f32"
    assert parse_target("cpu+openvino?precision=bf16").spec == "cpu+openvino?precision=bf16"
    with pytest.raises(SpecError, match="unknown precision"):
        parse_target("cpu+openvino?precision=fp8")
    with pytest.raises(SpecError, match="needs a compile backend"):
        parse_target("cpu?precision=f32")


@pytest.mark.parametrize("value", ["int8", "fp8", "float128", "bf"])
def test_bad_dtype(value: str) -> None:
    with pytest.raises(SpecError, match="unknown dtype"):
        parse_target(f"cpu?dtype={value}")


@pytest.mark.parametrize("option", ["dynamic", "fullgraph"])
@pytest.mark.parametrize("value", ["maybe", "2", "yep", "tru"])
def test_bad_bool(option: str, value: str) -> None:
    with pytest.raises(SpecError, match="not a boolean"):
        parse_target(f"cpu+inductor?{option}={value}")


def test_bad_mode() -> None:
    with pytest.raises(SpecError, match="unknown compile mode"):
        parse_target("cpu+inductor?mode=fast")


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5", "+2"])
def test_bad_threads(value: str) -> None:
    with pytest.raises(SpecError, match="not a positive integer"):
        parse_target(f"cpu?threads={value}")


def test_threads_unicode_digit_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="is not a positive integer"):
        parse_target("cpu?threads=²")


@pytest.mark.parametrize(
    "text",
    ["cpu?dynamic=false", "cpu?mode=default", "cpu?fullgraph=true", "cuda:0?dynamic=auto", "cpu?fullgraph=false"],
)
def test_compile_only_option_without_backend(text: str) -> None:
    with pytest.raises(SpecError, match="needs a compile backend"):
        parse_target(text)


def test_compile_only_option_error_names_the_option() -> None:
    with pytest.raises(SpecError, match="'mode'") as info:
        parse_target("cpu?mode=max-autotune")
    assert "+BACKEND" in (info.value.hint or "")


@pytest.mark.parametrize(
    "text", ["cpu?", "cpu?dtype", "cpu?dtype=", "cpu?=fp32", "cpu?dtype=fp32&", "cpu?1x=2", "cpu?dtype=fp32&&threads=1"]
)
def test_malformed_options(text: str) -> None:
    with pytest.raises(SpecError, match=r"ends with '\?' but has no options|malformed option"):
        parse_target(text)


def test_duplicate_key() -> None:
    with pytest.raises(SpecError, match="given twice"):
        parse_target("cpu?dtype=fp32&dtype=bf16")


def test_errors_are_bakeoff_errors_with_hints() -> None:
    from bakeoff.errors import BakeoffError

    for text in ["CPU", "tpu", "cpu?x=1", "cpu?dtype=int8", "cpu?mode=default", "cpu?dtype=fp32&dtype=fp32"]:
        with pytest.raises(BakeoffError) as info:
            parse_target(text)
        assert info.value.hint, text
        assert info.value.one_line().endswith(f"({info.value.hint})")


# -- lists ------------------------------------------------------------------------------


def test_parse_targets_comma_lists_and_singles() -> None:
    targets = parse_targets(["cpu,cpu+inductor", "cuda:1", "cpu+aot_eager?dynamic=false"])
    assert [t.spec for t in targets] == ["cpu", "cpu+inductor", "cuda:1", "cpu+aot_eager?dynamic=false"]


def test_parse_targets_tolerates_spaces_after_commas() -> None:
    assert [t.spec for t in parse_targets(["cpu, cpu+inductor"])] == ["cpu", "cpu+inductor"]


def test_parse_targets_deduplicates_by_canonical_spec_keeping_first() -> None:
    targets = parse_targets(["cpu+inductor?dtype=bf16,cpu", "cpu+inductor?dtype=bfloat16", "cpu,cuda"])
    assert [t.spec for t in targets] == ["cpu+inductor?dtype=bfloat16", "cpu", "cuda"]


@pytest.mark.parametrize("specs", [["cpu,,cuda"], ["cpu,"], [",cpu"], ["cpu", ""], ["cpu, ,cuda"]])
def test_parse_targets_empty_item(specs: list[str]) -> None:
    with pytest.raises(SpecError, match="empty target"):
        parse_targets(specs)


def test_parse_targets_nothing_given() -> None:
    with pytest.raises(SpecError, match="no targets"):
        parse_targets([])


def test_parse_targets_propagates_item_errors() -> None:
    with pytest.raises(SpecError, match="unknown device 'tpu'"):
        parse_targets(["cpu,tpu"])


# -- PrivateUse1 devices ----------------------------------------------------------------


def test_privateuse1_device_rejected_without_extra_devices() -> None:
    with pytest.raises(SpecError, match="unknown device 'npu'"):
        parse_target("npu:0")


def test_privateuse1_device_accepted_via_extra_devices() -> None:
    t = parse_target("npu:0+inductor?dtype=bf16", extra_devices=["npu"])
    assert t == Target(device="npu", index=0, backend="inductor", dtype="bfloat16")
    assert t.effective_threads is None  # not a CPU target
    assert parse_target(t.spec, extra_devices=["npu"]) == t


def test_parse_targets_extra_devices_from_a_generator() -> None:
    # the iterable is consumed once but must serve every item of the list
    targets = parse_targets(["npu,npu:1", "cpu"], extra_devices=(d for d in ["npu"]))
    assert [t.spec for t in targets] == ["npu", "npu:1", "cpu"]


def test_mode_only_with_inductor() -> None:
    with pytest.raises(SpecError, match="applies only to the inductor backend"):
        parse_target("cpu+aot_eager?mode=max-autotune")


def test_precision_and_engine_options_are_checked_where_they_apply() -> None:
    for spec in ("cpu+inductor?precision=f32", "cpu+onnxrt?precision=bf16"):
        with pytest.raises(SpecError, match="applies only to OpenVINO"):
            parse_target(spec)
    with pytest.raises(SpecError, match="not to the export engine 'onnxrt'"):
        parse_target("cpu+onnxrt?dynamic=true")
    assert parse_target("cpu+openvino_export?precision=f32").precision == "f32"


# -- mixed precision (amp) ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "amp", "spec"),
    [
        ("xpu?amp=bf16", "bfloat16", "xpu?amp=bfloat16"),
        ("cpu+inductor?amp=BF16", "bfloat16", "cpu+inductor?amp=bfloat16"),
        ("cuda?amp=half", "float16", "cuda?amp=float16"),
        ("cuda?amp=fp16&dtype=fp32", "float16", "cuda?dtype=float32&amp=float16"),
    ],
)
def test_amp_option_takes_half_precisions_and_round_trips(text: str, amp: str, spec: str) -> None:
    t = parse_target(text)
    assert t.amp == amp and t.spec == spec
    assert parse_target(t.spec) == t
    assert Target.from_dict(t.to_dict()) == t


def test_amp_is_the_last_field_and_defaults_to_none() -> None:
    from dataclasses import fields

    assert [f.name for f in fields(Target)][-1] == "amp"
    assert parse_target("cpu").amp is None
    # a document written before amp existed still reads
    assert Target.from_dict({"device": "cpu", "dtype": "bfloat16"}).amp is None


@pytest.mark.parametrize("value", ["fp32", "float64", "double"])
def test_amp_refuses_full_precisions(value: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_target(f"cpu?amp={value}")
    assert info.value.message == f"amp={value} in target 'cpu?amp={value}' is not a half precision"
    assert "amp=bf16" in info.value.hint


def test_amp_refuses_an_unknown_dtype() -> None:
    with pytest.raises(SpecError, match="unknown amp dtype 'int8'"):
        parse_target("cpu?amp=int8")


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_amp_with_half_precision_weights_is_refused(dtype: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_target(f"cpu?amp=bf16&dtype={dtype}")
    assert info.value.message == (
        f"amp with dtype={dtype} in target 'cpu?amp=bf16&dtype={dtype}' does nothing: "
        "the weights are already half precision"
    )


def test_amp_with_float64_weights_is_refused() -> None:
    with pytest.raises(SpecError, match="autocast does not lower float64 weights"):
        parse_target("cpu?dtype=fp64&amp=bf16")


def test_amp_is_in_the_ledger_of_adjustments() -> None:
    from bakeoff.runner.job import adjustments_for

    assert adjustments_for(parse_target("cpu+inductor?amp=bf16")) == ({"name": "autocast", "value": "bfloat16"},)
    assert adjustments_for(parse_target("cpu")) == ()
