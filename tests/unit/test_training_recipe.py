"""How workloads train (the recipe each kind gives) and how the training check is asked for."""

from __future__ import annotations

import pytest
import torch
from tests.conftest import FIXTURES, py_workload

from bakeoff.checks.base import CheckContext
from bakeoff.checks.registry import parse_check
from bakeoff.checks.training import TrainingCheck
from bakeoff.errors import SpecError
from bakeoff.runner.job import TargetJob
from bakeoff.runner.session import TargetSession
from bakeoff.target.spec import parse_target
from bakeoff.workload.registry import build_workload

CLASSIFIER = f"py:{FIXTURES / 'training_models.py'}:classifier"


def test_a_py_workload_with_its_own_loss_and_batches_trains_on_them():
    recipe = build_workload(CLASSIFIER).training_recipe()
    assert recipe.kind == "workload"
    (args0, kwargs0), (_again, kwargs_again), (_, kwargs1) = recipe.batch(0), recipe.batch(0), recipe.batch(1)
    assert torch.equal(kwargs0["x"], kwargs_again["x"]) and not torch.equal(kwargs0["x"], kwargs1["x"])
    loss = recipe.loss({"logits": torch.zeros(8, 4)}, args0, kwargs0)
    assert loss.item() == pytest.approx(torch.log(torch.tensor(4.0)).item())


def test_a_workload_without_a_loss_falls_back_to_the_synthetic_loss_and_names_it():
    built = build_workload(py_workload("mlp"))
    recipe = built.training_recipe()
    assert recipe.kind == "synthetic" and "not what the model learns" in recipe.described
    args, _kwargs = recipe.batch(5)
    assert args is built.args  # its own input, every step


def test_a_language_model_trains_on_fresh_tokens_with_labels():
    recipe = build_workload("arch:llama?layers=1&hidden=32&vocab=128").training_recipe()
    assert recipe.kind == "causal_lm"
    _, first = recipe.batch(0)
    _, second = recipe.batch(1)
    assert torch.equal(first["labels"], first["input_ids"]) and not torch.equal(first["input_ids"], second["input_ids"])
    assert torch.equal(recipe.batch(0)[1]["input_ids"], first["input_ids"])


def test_the_synthetic_loss_is_said_next_to_a_passing_verdict():
    spec = py_workload("mlp")
    built = build_workload(spec)
    target = parse_target("cpu?dtype=float32")
    context = CheckContext(
        TargetJob(spec, target, built.fingerprint, None),
        target,
        None,
        {},
        None,
        "float32",
        "float32",
        built.fingerprint,
    )
    context.options = {"steps": 2, "optimizer": "sgd", "lr": 0.1}
    check = TrainingCheck()
    value = check.run(context)
    assert value.verdict == "pass" and value.loss_kind == "synthetic"
    assert check.notes(value) == [
        "training parity used a synthetic loss (mean square of the floating outputs (a fallback: it exercises the "
        "step, not what the model learns)); give the workload its own loss"
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("training?optimizer=lion", "unknown optimizer 'lion'"),
        ("training?lr=0", "lr must be positive"),
        ("training?steps=0", "steps"),
        ("training?steps=ten", "steps"),
    ],
)
def test_bad_options_are_refused_in_one_line(text, message):
    with pytest.raises(SpecError, match=message):
        parse_check(text)


def test_the_training_check_runs_only_when_asked_and_never_on_the_reference():
    target = parse_target("cpu+aot_eager")
    plain = TargetSession(TargetJob("arch:llama", target, "f", None))
    asked = TargetSession(TargetJob("arch:llama", target, "f", None, checks=(parse_check("training?steps=2"),)))
    reference = TargetSession(
        TargetJob("arch:llama", parse_target("cpu"), "f", None, is_reference=True, checks=(parse_check("training"),))
    )
    try:
        assert "training" not in [c.name for c in plain.checks] and "training" not in plain.skipped_checks
        assert "training" in [c.name for c in asked.checks]
        assert reference.skipped_checks["training"] == "the reference is what the target's training is compared with"
    finally:
        for session in (plain, asked, reference):
            session._close()


def test_an_inference_only_engine_is_skipped_with_the_reason():
    said = TrainingCheck().not_applicable(parse_target("cpu+openvino_export"), False)
    assert said == "the openvino_export engine is inference only"
