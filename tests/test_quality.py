"""The quality check on real models: a seeded fault (the argmax moved on 3% of examples off the
CPU) it must catch at a 1-point allowed drop and pass at 5, honest controls (a bf16 target, a
compiled one, bf16 perplexity that differs on every example by rounding) it must not flag, and
the errors a team's evaluation can make.

The direct cases run the check in one fresh process (the emu device is process-wide); the
requirement and decision path runs ``bakeoff trial`` as a user would.
"""

from __future__ import annotations

import json

import pytest
from tests.conftest import EMU_ENV, FIXTURES, cli_trial, fresh_process_json

MODELS = FIXTURES / "quality_models.py"
CLASSIFIER = f"py:{MODELS}:classifier"
LLAMA = "arch:llama?layers=1&hidden=32&intermediate=64&vocab=128"

#: (name, workload, target, options)
CASES = [
    ("perplexity bf16", LLAMA, "cpu?dtype=bf16", {}),
    ("exact match emu", LLAMA, "emu", {"task": "exact_match"}),
    ("flip, tensor scores", CLASSIFIER + "?flip=1", "emu", {"eval": f"{MODELS}:tensor_scores"}),
    ("one score too few", CLASSIFIER, "emu", {"eval": f"{MODELS}:wrong_count"}),
    ("raises on the target", CLASSIFIER, "emu", {"eval": f"{MODELS}:raises"}),
    ("scores outside [0, 1]", CLASSIFIER, "emu", {"eval": f"{MODELS}:out_of_range"}),
    ("scores as returned", CLASSIFIER, "emu", {"eval": f"{MODELS}:out_of_range", "unit": "score"}),
    ("not a language model", CLASSIFIER, "emu", {}),
    ("text too short", LLAMA, "cpu?dtype=bf16", {"text": "SHORT"}),
    ("perplexity amp", LLAMA, "cpu?amp=bf16", {}),
    ("answers that read as false", LLAMA, "cpu?dtype=bf16", {"task": "exact_match", "prompts": "ANSWERS"}),
]

SCRIPT = """
import json, sys
import torch
from bakeoff import emu
emu.enable()
from bakeoff.checks.base import CheckContext
from bakeoff.checks.quality import QualityCheck
from bakeoff.runner.job import TargetJob
from bakeoff.target.execute import prepare
from bakeoff.target.spec import parse_target
from bakeoff.workload.registry import build_workload
check = QualityCheck()
out = {}
for name, spec, target_spec, given in json.loads(sys.argv[1]):
    target = parse_target(target_spec, extra_devices=("emu",))
    built = build_workload(spec, device=target.torch_device)
    fingerprint = built.fingerprint  # before preparing casts the model
    prepared = prepare(built, target)
    job = TargetJob(workload_spec=spec, target=target, fingerprint=fingerprint, baseline_path=None)
    context = CheckContext(job, target, prepared, {}, None, target.dtype or "float32", "float32", fingerprint)
    context.options = {key: option.default for key, option in check.options.items()} | given
    amp = torch.autocast("cpu", dtype=getattr(torch, target.amp or "bfloat16"), enabled=bool(target.amp))
    with torch.no_grad(), amp:  # as a trial runs its checks: the session keeps a target's autocast on
        out[name] = check.run(context).to_dict()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory) -> dict[str, dict]:
    folder = tmp_path_factory.mktemp("quality")
    files = {"SHORT": folder / "short.txt", "ANSWERS": folder / "answers.jsonl"}
    files["SHORT"].write_text("too short")
    files["ANSWERS"].write_text('{"prompt": "A loaf", "answer": 0}\n{"prompt": "The oven", "answer": false}\n')
    cases = [(*case[:3], {k: str(files.get(v, v)) for k, v in case[3].items()}) for case in CASES]
    return fresh_process_json(SCRIPT, cases, timeout=600)


@pytest.mark.emu
def test_bf16_perplexity_differs_on_every_row_by_rounding_and_is_not_lower_by_a_point(verdicts):
    value = verdicts["perplexity bf16"]
    assert value["verdict"] in ("same", "lower", "higher"), value["reason"]
    assert value["examples"] == 200 and value["changed"] == 200  # an honest control, not bit-identical
    assert value["low"] > -1 and abs(value["difference"]) < 0.5
    assert value["reference_perplexity"] == pytest.approx(value["target_perplexity"], rel=0.01)
    assert value["task"] == (
        "perplexity on the bundled quality_sample.txt: 200 rows of 16 tokens (UTF-8 bytes modulo its 128 tokens)"
    )
    shown = f"perplexity {value['reference_perplexity']:.4g} on the reference"
    assert shown in value["reason"]


@pytest.mark.emu
def test_greedy_exact_match_on_the_device_is_the_same(verdicts):
    value = verdicts["exact match emu"]
    assert value["verdict"] == "same" and value["difference"] == 0 and value["examples"] == 33, value["reason"]
    assert "greedy exact match over 33 prompts of the bundled quality_prompts.jsonl (0 answers" in value["task"]
    assert value["low"] < -5 and value["high"] > 5  # no prompt moved: an exact bound, not a zero-width interval


@pytest.mark.emu
def test_the_seeded_flip_is_three_points_lower_with_its_interval_and_examples(verdicts):
    value = verdicts["flip, tensor scores"]
    assert value["verdict"] == "lower"
    assert value["difference"] == pytest.approx(-3.0) and value["changed"] == 30
    assert -5 < value["low"] < -3 < value["high"] < -1
    assert value["reference_score"] == 100.0 and value["target_score"] == pytest.approx(97.0)
    assert value["moved"] == [0, 33, 66, 99, 132]
    assert value["reason"].startswith("-3 points (")


@pytest.mark.emu
@pytest.mark.parametrize(
    ("name", "verdict", "said"),
    [
        ("one score too few", "error", "1000 scores on the reference and 999 on the target: they cannot be paired"),
        ("raises on the target", "error", "scoring on the target raised RuntimeError: the evaluation cannot run here"),
        (
            "scores outside [0, 1]",
            "not_comparable",
            "scores outside [0, 1] cannot be counted in points: add unit=score",
        ),
        ("not a language model", "not_comparable", "the quality check's perplexity task needs a language model"),
        ("text too short", "not_comparable", "holds 9 tokens: fewer than 2 rows of 16"),
    ],
)
def test_an_evaluation_that_cannot_be_compared_says_why(verdicts, name, verdict, said):
    """The target's own failure is an error (it rules the target out); what no target did (the
    task, the reference, the scores' unit) is not comparable (a doubt)."""
    value = verdicts[name]
    assert value["verdict"] == verdict and said in value["reason"], value["reason"]


@pytest.mark.emu
def test_a_mixed_precision_target_is_compared_with_a_reference_outside_its_autocast(verdicts):
    value = verdicts["perplexity amp"]
    assert value["changed"] == 200, value["reason"]  # scored under autocast, the reference would match exactly
    assert value["low"] > -1


@pytest.mark.emu
def test_an_answer_that_reads_as_false_is_still_an_answer(verdicts):
    value = verdicts["answers that read as false"]
    assert value["task"].startswith("greedy exact match over 2 prompts of answers.jsonl (their answers;")


@pytest.mark.emu
def test_scores_as_returned_are_compared_in_their_own_unit(verdicts):
    value = verdicts["scores as returned"]
    assert value["verdict"] == "same" and value["unit"] == "score" and value["reference_score"] == 2.0


@pytest.fixture(scope="module")
def trial(tmp_path_factory) -> dict:
    """One trial: the seeded flip on emu, honest bf16 and compiled controls, three allowed drops."""
    requirements = [arg for drop in (1, 3, 5) for arg in ("--require", f"quality>=-{drop}")]
    ran = cli_trial(
        CLASSIFIER + "?flip=1",
        "emu,cpu?dtype=bf16,cpu+aot_eager",
        tmp_path_factory.mktemp("quality"),
        "--check",
        f"quality?eval={MODELS}:accuracy",
        *requirements,
        env=EMU_ENV,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    return json.loads(ran.stdout)


def _states(result: dict) -> dict[str, str]:
    from bakeoff.analysis.requirements import requirement_state

    return {item["text"]: requirement_state(item) for item in result["requirements"]}


@pytest.mark.emu
@pytest.mark.compile
def test_three_points_lost_fails_at_one_is_inconclusive_at_three_and_passes_at_five(trial):
    emu = next(r for r in trial["results"] if r["target"] == "emu")
    assert emu["correctness"]["verdict"] == "pass"  # only the task's score shows the fault
    assert emu["quality"]["verdict"] == "lower" and emu["quality"]["difference"] == pytest.approx(-3.0)
    assert _states(emu) == {"quality>=-1": "not met", "quality>=-3": "not conclusive", "quality>=-5": "met"}
    assert "emu ruled out by quality>=-1 not met: -3 (-4 to -2)" in trial["decision"]["lines"]


@pytest.mark.emu
@pytest.mark.compile
@pytest.mark.parametrize("target", ["cpu?dtype=bfloat16", "cpu+aot_eager"])
def test_honest_targets_are_not_flagged_at_one_point(trial, target):
    result = next(r for r in trial["results"] if r["target"] == target)
    assert result["quality"]["verdict"] == "same", result["quality"]["reason"]
    assert set(_states(result).values()) == {"met"}
    assert trial["decision"]["outcome"] != "none"


@pytest.mark.emu
@pytest.mark.compile
def test_the_reference_is_what_quality_compares_with(trial):
    reference = trial["results"][0]
    assert reference["is_reference"] and reference["quality"] is None
    assert "quality" in reference["skipped_checks"]
    assert set(_states(reference).values()) == {"not applicable"}
