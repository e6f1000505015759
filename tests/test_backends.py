"""Real alternative CPU engines: OpenVINO (torch.compile and export paths) and ONNX Runtime.

Each case runs ``python -m bakeoff trial`` as a user would, in a fresh process: importing
``openvino.torch`` changes process-wide dynamo state, which must not leak into pytest's.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from tests.conftest import cli_result, cli_trial, py_workload

pytest.importorskip("openvino", reason="install the test extras: pip install -e '.[test]'")
pytest.importorskip("onnxruntime", reason="install the test extras: pip install -e '.[test]'")


def _trial(workload: str, target: str, tmp_path: Path, *prefix: str) -> dict:
    return cli_result(workload, target, tmp_path, command=list(prefix) or None)


def _openvino_default_precision() -> str:
    import openvino

    return openvino.Core().get_property("CPU", "INFERENCE_PRECISION_HINT").type_name


@pytest.mark.compile
def test_openvino_ops_left_to_pytorch_are_reported(tmp_path):
    result = _trial(py_workload("bessel"), "cpu+openvino?precision=f32", tmp_path)
    assert result["status"] == "ok" and result["correctness"]["verdict"] == "pass"
    placement = result["placement"]
    assert placement["verdict"] == "fallbacks"
    assert placement["fallback_ops"] == {"aten::i0 (left to PyTorch)": 1}
    assert placement["signals"]["openvino"]["ops_left_to_pytorch"] == 1
    assert placement["signals"]["openvino"]["ops_converted"] > 0
    # one op left out of each call, the rest ran in OpenVINO: most of the work, not engine_did_not_run
    assert 0.5 < placement["engine_work"]["share"] < 1


@pytest.mark.compile
def test_openvino_whose_partition_failed_did_not_run(tmp_path):
    """Seeded: a llama called with use_cache=True makes OpenVINO's only partition fail at run time
    (a real conversion failure of the cache's list, not a stand-in), so PyTorch runs everything."""
    result = _trial(py_workload("llama_with_cache"), "cpu+openvino", tmp_path)
    placement = result["placement"]
    assert placement["verdict"] == "engine_did_not_run", placement["explanation"]
    work = placement["engine_work"]
    assert work["share"] == 0.0 and work["op_calls_in_engine"] == 0 and work["op_calls"] > 0
    assert work["partitions"] == work["partitions_failed"] == 1
    assert placement["explanation"].startswith(f"openvino ran 0% of the work handed to it (0 of {work['op_calls']}")
    # the fallbacks are the partition's ops, per forward pass, not one entry per partition
    failed = {k: v for k, v in placement["fallback_ops"].items() if k.endswith("(failed partition, ran in PyTorch)")}
    assert failed.get("aten::mm (failed partition, ran in PyTorch)", 0) > 0
    assert work["op_calls"] % sum(failed.values()) == 0  # each call ran the whole partition in PyTorch
    assert placement["device_op_share"] == 0.0  # the report's share is the engine's
    # the giveaway the audit exists to replace: PyTorch ran it, so it matches eager exactly
    assert result["correctness"]["max_abs_err"] == 0.0
    from bakeoff.checks.placement import engine_notes
    from bakeoff.results.values import TargetResult

    read = TargetResult.from_dict(result)
    notes = engine_notes(read.placement, read)
    precision = placement["signals"]["openvino"]["precision"]
    assert f"openvino did not run: its {precision} setting was never used" in notes
    assert not any(n.startswith("openvino ran in") for n in notes)
    if precision in ("bf16", "f16"):
        assert any("bit-identical to eager" in n for n in notes)


@pytest.mark.compile
def test_openvino_that_converted_is_not_reported_and_precision_is_recorded(tmp_path):
    result = _trial("arch:llama?layers=1&hidden=32", "cpu+openvino", tmp_path)
    placement = result["placement"]
    assert placement["verdict"] == "not_applicable" and placement["fallback_ops"] == {}
    signals = placement["signals"]["openvino"]
    assert signals["graphs"] >= 1 and signals["ops_left_to_pytorch"] == 0 and signals["runtime_fallbacks"] == 0
    work = placement["engine_work"]  # control: OpenVINO really ran every op call handed to it
    assert work["share"] == 1.0 and work["op_calls_in_engine"] == work["op_calls"] > 0
    assert work["partitions_failed"] == 0
    default = _openvino_default_precision()
    assert signals["precision"] == default
    from bakeoff.checks.placement import engine_notes
    from bakeoff.results.values import TargetResult

    read = TargetResult.from_dict(result)
    assert engine_notes(read.placement, read) == [f"openvino ran in {default}"]
    if default == "bf16":  # bf16 inference is visibly less precise than the fp32 reference
        assert result["correctness"]["verdict"] == "fail"
        assert 1e-4 < result["correctness"]["max_abs_err"] < 0.1


@pytest.mark.compile
@pytest.mark.parametrize("target", ["cpu+onnxrt", "cpu+openvino_export?precision=f32"])
def test_export_engines_run_and_match(tmp_path, target):
    result = _trial("arch:llama?layers=1&hidden=32", target, tmp_path)
    assert result["status"] == "ok", result["error"]
    assert result["correctness"]["verdict"] == "pass"
    assert result["correctness"]["max_abs_err"] < 1e-5
    engine = target.split("+")[1].split("?")[0]
    assert result["placement"]["signals"][engine]["compilations"] == 1
    if engine == "openvino_export":
        assert result["placement"]["signals"][engine]["precision"] == "f32"


BLOCK = textwrap.dedent("""
    import sys
    sys.modules["openvino"] = sys.modules["onnxruntime"] = None  # as if not installed
    from bakeoff.cli.main import main
    main()
""")


def test_missing_engine_library_is_skipped_with_install_hint(tmp_path):
    wanted = {"cpu+openvino": "openvino", "cpu+onnxrt": "onnx", "cpu+openvino_export": "openvino"}
    ran = cli_trial(py_workload("mlp"), ",".join(wanted), tmp_path, command=[sys.executable, "-c", BLOCK])
    assert ran.returncode == 0, ran.stderr
    results = {r["target"]: r for r in json.loads(ran.stdout)["results"]}
    for target, extra in wanted.items():  # one trial, every engine missing at once
        assert results[target]["status"] == "skipped"
        assert f"pip install 'bakeoff[{extra}]'" in results[target]["reason"]
