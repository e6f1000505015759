"""Training that is non-finite everywhere (the float64 run too) is a float64 run that diverged, not
training that draws random numbers: NaN is not equal to NaN, yet two seeds that both give NaN
agree.

The seeded fault is a classifier whose logits are NaN from the first step, on every run; the
controls are the same classifier without the NaN (it passes) and with dropout (it still draws
random numbers).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from tests.conftest import FIXTURES

from bakeoff.checks.base import CheckContext
from bakeoff.checks.training import TrainingCheck
from bakeoff.checks.training_runs import stochastic_reason
from bakeoff.runner.job import TargetJob
from bakeoff.target.spec import parse_target
from bakeoff.workload.registry import build_workload

CLASSIFIER = f"py:{FIXTURES / 'training_models.py'}:classifier"

NAN_MODEL = """
import torch
from torch import nn


class Poisoned(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 4)

    def forward(self, x, target=None):
        return {"logits": self.fc(x) * float("nan")}


def poisoned():
    return Poisoned(), {"x": torch.randn(8, 16), "target": torch.randint(0, 4, (8,))}


def training_batch(step):
    return {"x": torch.randn(8, 16), "target": torch.randint(0, 4, (8,))}


def training_loss(output, args, kwargs):
    return nn.functional.cross_entropy(output["logits"], kwargs["target"])
"""


@pytest.fixture
def poisoned(tmp_path: Path) -> str:
    path = tmp_path / "nan_models.py"
    path.write_text(textwrap.dedent(NAN_MODEL))
    return f"py:{path}:poisoned"


def _training(spec: str, steps: int = 3) -> dict:
    target = parse_target("cpu")
    built = build_workload(spec)
    job = TargetJob(workload_spec=spec, target=target, fingerprint=built.fingerprint, baseline_path=None)
    context = CheckContext(job, target, None, {}, None, "float32", "float32", built.fingerprint)
    context.options = {"steps": steps, "optimizer": "adamw", "lr": 1e-3}
    return TrainingCheck().run(context).to_dict()


def test_nan_under_both_seeds_is_not_randomness(poisoned: str) -> None:
    built = build_workload(poisoned)
    assert stochastic_reason(built.model, built.training_recipe(), built.seed) is None
    dropout = build_workload(CLASSIFIER + "?dropout=0.1")  # the control: real randomness is still named
    said = stochastic_reason(dropout.model, dropout.training_recipe(), dropout.seed)
    assert said is not None and said.startswith("training draws random numbers (Dropout with p > 0)")


def test_training_nan_on_every_side_says_the_float64_run_diverged(poisoned: str) -> None:
    value = _training(poisoned)
    assert value["verdict"] == "not_comparable"
    assert value["reason"].startswith("the float64 run itself diverged: its loss is non-finite (nan) at step 1")
    assert "random" not in value["reason"]
    assert len(value["curve"]) == 3  # the figures are kept


def test_a_finite_training_run_is_judged_as_before() -> None:
    value = _training(CLASSIFIER)
    assert value["verdict"] == "pass", value["reason"]
    assert "diverged" not in value["reason"] and "random" not in value["reason"]
