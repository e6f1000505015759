"""Result values round-trip through dicts, and a run through the versioned JSON document."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from bakeoff.env import Environment
from bakeoff.errors import BakeoffError
from bakeoff.results.codec import SCHEMA, SCHEMA_VERSION, run_from_json, run_to_json
from bakeoff.results.values import (
    BaselineInfo,
    Correctness,
    ErrorInfo,
    Latency,
    RunResult,
    TargetResult,
    TensorComparison,
)
from bakeoff.target.spec import Target, parse_target

ENV = Environment(
    {
        "python": "3.11.7",
        "torch": "2.13.0",
        "packages": {"torch": "2.13.0", "transformers": "5.0.0"},
        "threads": {"intra_op": 4, "inter_op": 4},
        "captured_at": "2025-01-01T00:00:00+00:00",
        "load_average": [0.5, 0.25, 0.125],
    }
)

LOGITS = TensorComparison("output.logits", (1, 16, 1024), "float32", 2.5e-6, 1.25e-7, 0.9999999, True, "allclose")
HIDDEN = TensorComparison("output.hidden", (1, 16, 64), "float32", 3e-3, 1e-3, 0.999, True, "fp64")
BAD = TensorComparison(
    "output.logits", (1, 16, 1024), "bfloat16", 0.75, 0.5, 0.9, False, problem="max abs error 0.75 > tol 0.01"
)
SHAPE = TensorComparison(
    "output.x", (2, 3), "float32", math.inf, math.inf, 0.0, False, problem="shape (2, 3) != reference (3, 2)"
)


def _results() -> tuple[TargetResult, ...]:
    return (
        TargetResult(
            target=parse_target("cpu"),
            status="ok",
            is_reference=True,
            latency=Latency((1.5, 1.25, 1.75, 1.0, 2.0)),
            first_call_ms=3.5,
            warmup_calls=2,
            settled=True,
            speedup=1.0,
            peak_host_rss_bytes=123_456_789,
            threads=1,
            load_average=(0.5, 0.25, 0.125),
            duration_s=0.75,
            notes=("first note", "second note"),
            checks={"correctness": Correctness("pass", "", "eager:float32", 1e-4, (LOGITS, HIDDEN))},
        ),
        TargetResult(
            target=parse_target("cpu+inductor?dtype=bf16&mode=max-autotune&fullgraph=true&threads=2"),
            status="ok",
            latency=Latency((0.5, 0.75)),
            first_call_ms=4000.0,
            warmup_calls=20,
            settled=False,
            speedup=2.5,
            device_peak_bytes=None,
            threads=2,
            checks={
                "correctness": Correctness(
                    "fail", "output.logits: max abs error 0.75 > tol 0.01", "eager:bfloat16", 1e-2, (BAD,)
                )
            },
        ),
        TargetResult(
            target=parse_target("cpu+aot_eager?dynamic=false"),
            status="error",
            error=ErrorInfo(
                "RuntimeError",
                "boom",
                category="exception",
                phase="compile",
                traceback="Traceback (most recent call last):\n  ...\nRuntimeError: boom\n",
            ),
            duration_s=0.25,
        ),
        TargetResult(target=parse_target("cuda:1"), status="skipped", reason="no CUDA device here"),
        TargetResult(
            target=parse_target("cpu?dtype=fp16"),
            status="ok",
            latency=Latency((1.0,)),
            checks={"correctness": Correctness("not_comparable", "eager runs differ", "eager:float16", 1e-3)},
        ),
        TargetResult(
            target=parse_target("cpu?threads=3"),
            status="ok",
            latency=Latency((2.0, 2.0, 2.0)),
            checks={"correctness": Correctness("fail", "output.x: shape", "eager:float32", 1e-4, (SHAPE,))},
        ),
    )


def _run(**overrides: Any) -> RunResult:
    fields: dict[str, Any] = {
        "run_id": "0123456789ab",
        "created_at": "2025-01-02T03:04:05+00:00",
        "workload": {
            "spec": "arch:llama",
            "kind": "arch",
            "fingerprint": "3d3306cea8a1a055",
            "seed": 0,
            "dtype": "float32",
            "details": {"parameters": 205120},
            "notes": [],
        },
        "environment": ENV,
        "results": _results(),
        "baseline_id": "b" * 12,
        "settings": {"min_samples": 30, "reference": "cpu", "isolate": True},
    }
    fields.update(overrides)
    return RunResult(**fields)


# -- individual values ------------------------------------------------------------------


def test_latency_round_trip_and_derived_statistics() -> None:
    lat = Latency((4.0, 1.0, 3.0, 2.0))
    data = lat.to_dict()
    assert data["samples_ms"] == [4.0, 1.0, 3.0, 2.0]  # raw and in order
    assert data["samples"] == 4
    assert data["p50_ms"] == 2.5
    assert data["p90_ms"] == pytest.approx(3.7)
    assert data["p99_ms"] == pytest.approx(3.97)
    assert data["mean_ms"] == 2.5
    assert data["min_ms"] == 1.0
    assert data["noisy"] is True
    assert Latency.from_dict(data) == lat
    assert Latency.from_dict(json.loads(json.dumps(data))) == lat
    assert lat.count == 4 and lat.p50_ms == 2.5


def test_latency_from_dict_ignores_derived_values() -> None:
    # statistics are derived, never stored: stale derived keys must not leak in
    lat = Latency.from_dict({"samples_ms": [1, 2, 3], "p50_ms": 99.0, "samples": 7})
    assert lat.samples_ms == (1.0, 2.0, 3.0)
    assert all(isinstance(x, float) for x in lat.samples_ms)
    assert lat.p50_ms == 2.0


@pytest.mark.parametrize("value", [LOGITS, HIDDEN, BAD, SHAPE])
def test_tensor_comparison_round_trip(value: TensorComparison) -> None:
    data = value.to_dict()
    assert isinstance(data["shape"], list)
    assert TensorComparison.from_dict(data) == value
    assert TensorComparison.from_dict(json.loads(json.dumps(data))) == value


def test_correctness_round_trip_and_summary_keys() -> None:
    value = Correctness("pass", "", "eager:float32", 1e-4, (LOGITS, HIDDEN))
    data = value.to_dict()
    assert data["verdict"] == "pass"
    assert data["max_abs_err"] == 3e-3
    assert data["max_rel_err"] == 1e-3
    assert data["min_cosine"] == 0.999
    assert [o["name"] for o in data["outputs"]] == ["output.logits", "output.hidden"]
    assert Correctness.from_dict(data) == value
    assert Correctness.from_dict(json.loads(json.dumps(data))) == value


def test_correctness_without_outputs() -> None:
    value = Correctness("not_comparable", "eager runs differ", "eager:float32", None)
    data = value.to_dict()
    assert data["max_abs_err"] is None and data["min_cosine"] is None
    assert Correctness.from_dict(data) == value
    assert Correctness.from_dict({"verdict": "error"}) == Correctness("error")


def test_correctness_sensitivity_is_the_largest_of_the_outputs() -> None:
    golden = dict(rule="golden", golden_err=4e-3, floor=5e-3, bias=1e-4)
    a = TensorComparison("output.a", (1, 16, 8), "bfloat16", 4e-3, 1e-2, 0.9999, True, **golden, sensitivity=2e-3)
    b = TensorComparison("output.b", (1, 8), "bfloat16", 4e-3, 1e-2, 0.9999, True, **golden, sensitivity=9e-3)
    value = Correctness("pass", "", "eager:bfloat16", 1e-2, (a, b))
    data = value.to_dict()
    assert data["sensitivity"] == 9e-3
    assert data["outputs"][0]["sensitivity"] == 2e-3 and data["outputs"][0]["floor"] == 5e-3
    assert Correctness.from_dict(json.loads(json.dumps(data))) == value
    assert Correctness("pass", "", "eager:float32", 1e-4, (LOGITS, HIDDEN)).sensitivity is None


def test_tensor_comparison_reads_documents_from_before_and_after_the_golden_figures() -> None:
    older = {k: v for k, v in HIDDEN.to_dict().items() if k not in ("golden_err", "floor", "bias", "sensitivity")}
    assert TensorComparison.from_dict(older) == HIDDEN
    assert TensorComparison.from_dict({**HIDDEN.to_dict(), "a_later_figure": 1.0}) == HIDDEN


def test_error_info_round_trip() -> None:
    value = ErrorInfo(
        "torch.OutOfMemoryError", "CUDA out of memory", category="out_of_memory", phase="first_call", traceback="tb"
    )
    assert ErrorInfo.from_dict(value.to_dict()) == value
    assert value.to_dict() == {
        "type": "torch.OutOfMemoryError",
        "message": "CUDA out of memory",
        "category": "out_of_memory",
        "phase": "first_call",
        "traceback": "tb",
    }


def test_baseline_info_round_trip() -> None:
    value = BaselineInfo(
        id="abc",
        workload_spec="arch:llama",
        fingerprint="f" * 16,
        seed=3,
        created_at="2025-01-01T00:00:00+00:00",
        environment_fingerprint=ENV.fingerprint,
        references=("golden", "eager:float32", "repeat:float32"),
        deterministic=True,
        repeat_max_abs_err=0.0,
        path="/tmp/x.safetensors",
    )
    data = value.to_dict()
    assert data["references"] == ["golden", "eager:float32", "repeat:float32"]
    assert BaselineInfo.from_dict(data) == value
    assert BaselineInfo.from_dict(json.loads(json.dumps(data))) == value


@pytest.mark.parametrize("index", range(len(_results())))
def test_target_result_round_trip(index: int) -> None:
    value = _results()[index]
    data = value.to_dict()
    assert data["target"] == value.target.spec
    assert data["target_detail"]["spec"] == value.target.spec
    assert TargetResult.from_dict(data) == value
    assert TargetResult.from_dict(json.loads(json.dumps(data))) == value


def test_target_result_verdict() -> None:
    ok, fail, error, skipped, not_comparable, _ = _results()
    assert ok.verdict == "pass"
    assert fail.verdict == "fail"
    assert error.verdict == "error"
    assert skipped.verdict is None
    assert not_comparable.verdict == "not_comparable"


def test_environment_round_trip_and_fingerprint() -> None:
    data = ENV.to_dict()
    assert data["fingerprint"] == ENV.fingerprint
    assert Environment.from_dict(data) == ENV
    # volatile keys do not change the fingerprint, stable keys do
    later = Environment({**ENV.data, "captured_at": "2026-01-01", "load_average": [9.0, 9.0, 9.0]})
    assert later.fingerprint == ENV.fingerprint
    assert Environment({**ENV.data, "torch": "2.14.0"}).fingerprint != ENV.fingerprint


def test_target_round_trip() -> None:
    t = parse_target("xpu:1+inductor?dtype=fp16&dynamic=true&threads=4")
    assert Target.from_dict(t.to_dict()) == t
    assert Target.from_dict(json.loads(json.dumps(t.to_dict()))) == t


# -- the run document -------------------------------------------------------------------


def test_run_round_trip() -> None:
    run = _run()
    assert run_from_json(run_to_json(run)) == run


def test_run_round_trip_through_json_text() -> None:
    run = _run()
    text = json.dumps(run_to_json(run))
    again = run_from_json(json.loads(text))
    assert again == run
    # and the result is stable: a second trip produces the same text
    assert json.dumps(run_to_json(again)) == text


def test_run_round_trip_with_optional_fields_absent() -> None:
    run = _run(baseline_id=None, settings={}, results=())
    data = run_to_json(run)
    assert run_from_json(data) == run
    del data["baseline_id"], data["settings"]
    assert run_from_json(data) == run


def test_run_accessors() -> None:
    run = _run()
    assert run.fingerprint == "3d3306cea8a1a055"
    assert run.result("cuda:1").status == "skipped"
    with pytest.raises(KeyError, match="mps"):
        run.result("mps")


def test_public_json_keys() -> None:
    data = json.loads(json.dumps(run_to_json(_run())))
    assert data["schema"] == "bakeoff.run" == SCHEMA
    assert data["schema_version"] == SCHEMA_VERSION == 1
    assert data["run_id"] == "0123456789ab"
    assert data["created_at"] == "2025-01-02T03:04:05+00:00"
    assert data["workload"]["fingerprint"] == "3d3306cea8a1a055"
    assert data["environment"]["fingerprint"] == ENV.fingerprint
    assert data["environment"]["torch"] == "2.13.0"
    assert data["baseline_id"] == "b" * 12

    results = data["results"]
    assert [r["target"] for r in results] == [
        "cpu",
        "cpu+inductor?dtype=bfloat16&mode=max-autotune&fullgraph=true&threads=2",
        "cpu+aot_eager?dynamic=false",
        "cuda:1",
        "cpu?dtype=float16",
        "cpu?threads=3",
    ]
    assert [r["status"] for r in results] == ["ok", "ok", "error", "skipped", "ok", "ok"]

    first = results[0]
    assert first["correctness"]["verdict"] == "pass"
    assert first["correctness"]["max_abs_err"] == 3e-3
    assert first["latency"]["p50_ms"] == 1.5
    assert first["latency"]["p90_ms"] == pytest.approx(1.9)
    assert first["latency"]["samples"] == 5
    assert isinstance(first["latency"]["samples"], int)
    assert first["latency"]["samples_ms"] == [1.5, 1.25, 1.75, 1.0, 2.0]
    assert first["error"] is None
    assert first["is_reference"] is True

    assert results[1]["correctness"]["verdict"] == "fail"
    assert results[1]["correctness"]["max_abs_err"] == 0.75

    error = results[2]
    assert error["error"]["type"] == "RuntimeError"
    assert error["error"]["message"] == "boom"
    assert error["correctness"] is None
    assert error["latency"] is None

    skipped = results[3]
    assert skipped["reason"] == "no CUDA device here"
    assert skipped["latency"] is None and skipped["error"] is None


def test_infinite_errors_survive_json() -> None:
    data = json.loads(json.dumps(run_to_json(_run())))
    assert math.isinf(data["results"][5]["correctness"]["max_abs_err"])
    assert math.isinf(run_from_json(data).results[5].correctness.outputs[0].max_abs_err)


def test_newer_schema_version_refused() -> None:
    data = run_to_json(_run())
    data["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(BakeoffError, match="newer") as info:
        run_from_json(data)
    assert "upgrade" in (info.value.hint or "")


@pytest.mark.parametrize("version", [None, "1", 1.0])
def test_non_integer_schema_version_refused(version: Any) -> None:
    data = run_to_json(_run())
    data["schema_version"] = version
    with pytest.raises(BakeoffError, match=f"run document schema version {version} is newer"):
        run_from_json(data)


def test_missing_schema_version_refused() -> None:
    data = run_to_json(_run())
    del data["schema_version"]
    with pytest.raises(BakeoffError, match="run document schema version None is newer"):
        run_from_json(data)


@pytest.mark.parametrize("schema", ["bakeoff.baseline", "", None, "BAKEOFF.RUN"])
def test_wrong_schema_refused(schema: Any) -> None:
    data = run_to_json(_run())
    data["schema"] = schema
    with pytest.raises(BakeoffError, match="not a bakeoff run document"):
        run_from_json(data)


def test_missing_schema_refused() -> None:
    data = run_to_json(_run())
    del data["schema"]
    with pytest.raises(BakeoffError, match="not a bakeoff run document"):
        run_from_json(data)


@pytest.mark.parametrize(
    ("cls", "data", "message"),
    [
        (Correctness, {"verdict": 5}, "Correctness.verdict should be a string, not int 5"),
        (
            Correctness,
            {"verdict": "pass", "tolerance": True},
            "Correctness.tolerance should be a number, not a boolean True",
        ),
        (Latency, {"samples_ms": "abc"}, "Latency.samples_ms should be a list, not a string"),
        (Latency, {"samples_ms": [1.0, "2"]}, "Latency.samples_ms[1] should be a number, not a string '2'"),
        (
            BaselineInfo,
            {**BaselineInfo("b", "w", "f", 0, "t", "e", (), True, 0.0, "p").to_dict(), "seed": 1.5},
            "BaselineInfo.seed should be an integer, not float 1.5",
        ),
        (
            BaselineInfo,
            {**BaselineInfo("b", "w", "f", 0, "t", "e", (), True, 0.0, "p").to_dict(), "seed": False},
            "BaselineInfo.seed should be an integer, not a boolean False",
        ),
        (
            BaselineInfo,
            {**BaselineInfo("b", "w", "f", 0, "t", "e", (), True, 0.0, "p").to_dict(), "deterministic": 1},
            "BaselineInfo.deterministic should be true or false, not int 1",
        ),
        (
            Correctness,
            {"verdict": "fail", "outputs": [{**LOGITS.to_dict(), "shape": [1, "16"]}]},
            "Correctness.outputs[0].shape[1] should be an integer, not a string '16'",
        ),
        (Correctness, {"verdict": "fail", "drift": [1]}, "Correctness.drift should be an object, not a list"),
        (Correctness, {"verdict": None}, "Correctness.verdict should be a string, not null"),
        (Latency, {"samples_ms": [1.0, None]}, "Latency.samples_ms[1] should be a number, not null"),
        (
            Correctness,
            {"verdict": "fail", "outputs": [{**LOGITS.to_dict(), "shape": None}]},
            "Correctness.outputs[0].shape should be given, not null",
        ),
    ],
)
def test_values_of_the_wrong_kind_are_refused_naming_the_field(cls: type, data: dict, message: str) -> None:
    with pytest.raises(TypeError) as info:
        cls.from_dict(data)
    assert str(info.value) == message


def test_values_of_their_kind_are_read() -> None:
    """The control: an integer is a number, and a field hinted ``Any`` takes anything."""
    assert Latency.from_dict({"samples_ms": [1, 2.5]}).samples_ms == (1.0, 2.5)
    assert Correctness.from_dict({"verdict": "pass", "tolerance": 0}).tolerance == 0.0
    drift = {"a": [1, "x", None, True, {"b": 1.5}]}
    assert Correctness.from_dict({"verdict": "pass", "drift": drift}).drift == drift
    assert Correctness.from_dict({"verdict": "pass", "drift": None}).drift is None  # an optional field takes null
