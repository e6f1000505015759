"""Mixed precision as a target option (``amp=bf16``): real autocast, seeded faults, clean controls.

A target with ``amp`` runs its whole session under ``torch.autocast`` and is judged against the
eager CPU run under CPU autocast in the same dtype (``amp:bfloat16``). The seeded faults are
real: a model that adds 0.05 to its logits under torch.compile only, and the emu test device's
wrong-result switch. The emu test device has no autocast by default (PyTorch refuses it) and
bfloat16 autocast only with ``BAKEOFF_EMU_AUTOCAST=bf16``: real devices whose autocast would be
silently off.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.conftest import EMU_ENV, FIXTURES, cli_trial, fresh_process_json, py_workload

from bakeoff.target.detect import autocast_problem, unavailable_reason
from bakeoff.target.spec import parse_target

EMU_AMP_ENV = {**EMU_ENV, "BAKEOFF_EMU_AUTOCAST": "bf16"}


def _results(workload: str, on: str, tmp_path: Path, env: dict | None = None) -> tuple[dict, dict[str, dict]]:
    ran = cli_trial(workload, on, tmp_path, env=env)
    assert ran.returncode == 0, ran.stderr[-3000:]
    run = json.loads(ran.stdout)
    return run, {r["target"]: r for r in run["results"]}


# -- the probe: a device whose autocast would be silently off ----------------------------------


@pytest.mark.parametrize("device", ["meta", "nosuchdevice"])
def test_a_device_without_autocast_is_named(device: str) -> None:
    assert autocast_problem(device, "bfloat16") == (
        f"{device} has no autocast: amp=bfloat16 would silently run in full precision"
    )


def test_the_cpu_has_both_half_precision_autocasts() -> None:
    assert autocast_problem("cpu", "bfloat16") is None
    assert autocast_problem("cpu", "float16") is None
    assert unavailable_reason(parse_target("cpu+aot_eager?amp=bf16")) is None


def test_an_export_engine_with_amp_is_skipped_with_the_reason() -> None:
    from bakeoff.target.engines import registry

    exporting = [name for name, e in registry().items() if not e.dynamo_backend and e.status("cpu") is None]
    if not exporting:
        pytest.skip("no export engine is installed here")
    name = exporting[0]
    assert unavailable_reason(parse_target(f"cpu+{name}")) is None
    assert unavailable_reason(parse_target(f"cpu+{name}?amp=bf16")) == (
        f"backend '{name}' exports the model ahead of the call, outside autocast: "
        "amp=bfloat16 would silently run in full precision"
    )


# -- trials: correctness against the autocast reference -----------------------------------------


@pytest.mark.compile
@pytest.mark.emu
def test_clean_amp_targets_pass_against_the_autocast_reference(tmp_path: Path) -> None:
    run, results = _results(
        py_workload("mlp"), "cpu?amp=bf16,cpu+aot_eager?amp=bf16,emu?amp=bf16,emu?amp=fp16", tmp_path, EMU_AMP_ENV
    )
    assert "baseline created" in run["workload"]["notes"]
    for spec in ("cpu?amp=bfloat16", "cpu+aot_eager?amp=bfloat16", "emu?amp=bfloat16"):
        result = results[spec]
        correctness = result["correctness"]
        assert (result["status"], correctness["verdict"]) == ("ok", "pass"), (spec, correctness["reason"])
        assert correctness["reference"] == "amp:bfloat16"
        # autocast really ran the timed calls (under torch.compile too): the linear layers' outputs are bf16
        assert {o["dtype"] for o in correctness["outputs"]} == {"bfloat16"}, spec
        assert all(o["rule"] == "golden" for o in correctness["outputs"])
        assert correctness["drift"]["reference"] == "eager:float32"
        assert {"name": "autocast", "value": "bfloat16"} in result["adjustments"]
    skipped = results["emu?amp=float16"]
    assert skipped["status"] == "skipped"
    assert skipped["reason"] == "emu has no float16 autocast: amp=float16 would silently run in full precision"
    # the plain reference is untouched by its neighbours' autocast
    assert results["cpu"]["correctness"]["reference"] == "eager:float32"
    assert {o["dtype"] for o in results["cpu"]["correctness"]["outputs"]} == {"float32"}


@pytest.mark.compile
def test_a_backend_that_computes_wrong_under_amp_fails(tmp_path: Path) -> None:
    _, results = _results(py_workload("perturbed_when_compiled"), "cpu?amp=bf16,cpu+aot_eager?amp=bf16", tmp_path)
    clean = results["cpu?amp=bfloat16"]["correctness"]
    assert clean["verdict"] == "pass", clean["reason"]  # eager: the perturbation is off
    wrong = results["cpu+aot_eager?amp=bfloat16"]["correctness"]
    assert wrong["verdict"] == "fail" and wrong["reference"] == "amp:bfloat16"
    failed = {o["name"] for o in wrong["outputs"] if not o["passed"]}
    assert failed == {"output.logits"}, wrong["reason"]


# -- training parity under autocast ---------------------------------------------------------------

CLASSIFIER = f"py:{FIXTURES / 'training_models.py'}:classifier"

SCRIPT = """
import json, sys
from bakeoff import emu
emu.enable()
from bakeoff.checks.base import CheckContext
from bakeoff.checks.training import TrainingCheck
from bakeoff.runner.job import TargetJob
from bakeoff.target.detect import unavailable_reason
from bakeoff.target.spec import parse_target
from bakeoff.workload.registry import build_workload

emu.enable(autocast=[])
out = {"without autocast": unavailable_reason(parse_target("emu?amp=bf16", extra_devices=("emu",)))}
for name, spec, target_spec, wrong in json.loads(sys.argv[1]):
    emu.enable(wrong=wrong, autocast=["bf16"])
    target = parse_target(target_spec, extra_devices=("emu",))
    built = build_workload(spec)
    job = TargetJob(workload_spec=spec, target=target, fingerprint=built.fingerprint, baseline_path=None)
    context = CheckContext(job, target, None, {}, None, target.dtype or "float32", "float32", built.fingerprint)
    context.options = {"steps": 4, "optimizer": "adamw", "lr": 1e-3}
    emu.counters(reset=True)
    value = TrainingCheck().run(context)
    out[name] = {**value.to_dict(), "wrong_calls": sum(emu.counters()["wrong_ops"].values())}
print(json.dumps(out))
"""

#: (name, workload, target, ops made wrong on the device and by how much). A 1% wrong tanh
#: (the other training tests' fault) stays inside bfloat16's noise here (its rounding floor is
#: about 1.6%): the seeded fault is 5%.
CASES = [
    ("clean emu amp", CLASSIFIER, "emu?amp=bf16", {}),
    ("wrong tanh emu amp", CLASSIFIER, "emu?amp=bf16", {"aten::tanh": 1.05}),
    ("clean cpu amp", CLASSIFIER, "cpu?amp=bf16", {}),
]


@pytest.fixture(scope="module")
def trained() -> dict[str, dict]:
    return fresh_process_json(SCRIPT, CASES, timeout=600)


@pytest.mark.emu
@pytest.mark.parametrize("name", ["clean emu amp", "clean cpu amp"])
def test_clean_amp_training_passes_in_the_autocast_band(trained, name):
    value = trained[name]
    assert value["verdict"] == "pass", value["reason"]
    assert (value["dtype"], value["multiple"]) == ("bfloat16", 3.0)  # bfloat16's band, not float32's
    golden, reference, target = value["curve"][0]["loss"]
    # the reference and the target both ran under autocast: far from float64, as bf16 is
    assert abs(reference - golden) > 1e-5 and abs(target - golden) > 1e-5


@pytest.mark.emu
def test_cpu_amp_target_matches_its_cpu_autocast_reference_exactly(trained):
    _golden, reference, target = trained["clean cpu amp"]["curve"][0]["loss"]
    assert target == reference  # the same autocast on the same device: the same arithmetic


@pytest.mark.emu
def test_a_device_without_autocast_skips_an_amp_target(trained):
    assert trained["without autocast"] == "emu has no autocast: amp=bfloat16 would silently run in full precision"


@pytest.mark.emu
def test_a_wrong_op_under_amp_fails_training(trained):
    value = trained["wrong tanh emu amp"]
    assert (value["verdict"], value["first_step"]) == ("fail", 1), value["reason"]
    assert value["error"] > value["band"] and value["wrong_calls"] > 0


# -- the baseline keeps the autocast references ---------------------------------------------------


def test_the_baseline_is_extended_with_autocast_references_and_keeps_them(tmp_path: Path) -> None:
    from bakeoff.env import capture_environment
    from bakeoff.runner.keeping import ensure_baseline
    from bakeoff.store.db import Store
    from bakeoff.workload.registry import build_workload

    store, workload, env = Store.open(tmp_path / "b.db"), build_workload(py_workload("mlp")), capture_environment()
    first, _ = ensure_baseline(store, workload, env, ["float32"])
    assert not any(name.startswith("amp:") for name in first.references)
    extended, notes = ensure_baseline(store, workload, env, ["float32"], amp_dtypes=["bfloat16"])
    assert notes == ["baseline extended with autocast references for bfloat16"]
    assert "amp:bfloat16" in extended.references and extended.id != first.id
    again, notes = ensure_baseline(store, workload, env, ["float32"], amp_dtypes=["bfloat16"])
    assert (again.id, notes) == (extended.id, [])  # reused
    widened, notes = ensure_baseline(store, workload, env, ["float32", "bfloat16"])
    assert notes == ["baseline extended with eager references for bfloat16"]
    assert {"amp:bfloat16", "eager:bfloat16"} <= set(widened.references)  # the autocast reference is kept
