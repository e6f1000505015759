"""The greedy-decoding check on the test device: a clean control, a near tie, a real divergence."""

from __future__ import annotations

import pytest
from tests.conftest import EMU_ENV, FIXTURES, cli_result


def spec(fault: str) -> str:
    return f"py:{FIXTURES / 'sweep_models.py'}:greedy_lm?fault={fault}"


@pytest.mark.emu
@pytest.mark.parametrize(
    ("fault", "verdict", "words"),
    [
        ("none", "same", "8 greedy tokens identical"),
        ("tie", "tie", "tokens part at a near tie, step 1 of 8 (row 0): token 5 instead of 3: float64 logit gap 0 <="),
        ("far", "differs", "tokens differ from step 1 of 8 (row 0): token 5 instead of 3: float64 logit gap 1 >"),
    ],
)
def test_greedy_tokens_against_the_reference(tmp_path, fault, verdict, words):
    found = cli_result(spec(fault), "emu", tmp_path, "--check", "greedy", env=EMU_ENV)
    greedy = found["greedy"]
    assert greedy["verdict"] == verdict, greedy
    assert greedy["reason"].startswith(words), greedy["reason"]
    if verdict != "same":
        assert greedy["reference"][0] == 3 and greedy["target"][0] == 5
        assert greedy["first_divergence"] == 1 and greedy["steps_same"] == 0
        assert (greedy["margin"] <= greedy["allowance"]) == (verdict == "tie")
