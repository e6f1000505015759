"""A compiled target's failed captures where its graphs draw random numbers (exec): not
comparable, named by capture; the seeded controls stay ``fail``: a graph that draws nothing, a
missing file beside the draws, and a run whose audit was off (which says it did not look)."""

from __future__ import annotations

from bakeoff.checks.compilation import Compilation
from bakeoff.checks.correctness import Correctness, TensorComparison
from bakeoff.runner.script import ScriptRun, drawn_in_graphs
from bakeoff.script.compiled import SCRIPT_COMPILE


def _failed(*extra: str) -> Correctness:
    outputs = (
        TensorComparison("loss[0]", (), "float32", 1e-6, 1e-6, 1.0, True, "honest"),
        TensorComparison("loss[1]", (), "float32", 0.02, 0.01, 1.0, False, problem="rms error vs the reference"),
    )
    return Correctness(
        "fail", "; ".join(("loss[1]: rms error vs the reference", *extra)), "the script on cpu", None, outputs
    )


def _run(random_ops: dict[str, int] | None, compile: str = "aot_eager_decomp_partition", ledger=()) -> ScriptRun:
    signals = {"backends": {compile: 1}, "random_ops": random_ops or {}, "random_site": "train.py:12"}
    audit = {"compilation": Compilation(graphs=1, signals=signals)} if random_ops is not None else None
    return ScriptRun("ok", 1.0, result={"compile": compile, "ledger": list(ledger)}, audit=audit)


def test_a_fail_where_the_graphs_draw_random_numbers_is_not_comparable_naming_the_captures():
    judged = drawn_in_graphs(_failed(), _run({"dropout": 2}))
    assert judged.verdict == "not_comparable"
    assert judged.reason.startswith("not comparable: the compiled graphs draw random numbers (dropout x2) (first at "
                                    "train.py:12)")  # fmt: skip
    assert "they differ in loss[1]." in judged.reason and "model.eval()" in judged.reason


def test_a_fail_stays_a_fail_where_the_graphs_draw_nothing_or_something_else_differs():
    assert drawn_in_graphs(_failed(), _run({})).verdict == "fail"
    missing = drawn_in_graphs(_failed("missing output file out.pt"), _run({"dropout": 1}))
    assert missing.verdict == "fail"
    assert drawn_in_graphs(Correctness("pass", "", "ref"), _run({"dropout": 1})).verdict == "pass"


def test_a_compiled_run_without_the_audit_says_it_did_not_look():
    for run in (_run(None), _run(None, compile="", ledger=[{"api": SCRIPT_COMPILE, "count": 1}])):
        judged = drawn_in_graphs(_failed(), run)
        assert judged.verdict == "fail"
        assert judged.reason.endswith(
            "not looked for: random draws in the compiled graphs (the audit was off, --no-audit)"
        )
    eager = drawn_in_graphs(_failed(), _run(None, compile=""))
    assert "not looked for" not in eager.reason
