"""A compiled target's failed captures where its graphs draw random numbers (exec): not
comparable, named by capture; the seeded controls stay ``fail``: a graph that draws nothing, a
missing file beside the draws, and a run whose audit was off (which says it did not look)."""

from __future__ import annotations

import dataclasses

from bakeoff.checks.compilation import Compilation
from bakeoff.checks.correctness import Correctness, TensorComparison
from bakeoff.checks.script_outputs import drawn_in_graphs
from bakeoff.runner.script import ScriptRun
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
    # a draw moves finite values; it does not make them NaN, change a shape or drop an output
    for problem in ("non-finite values differ", "shape (5, 2) != reference (4, 2)", "integer output differs"):
        broken = _failed()
        outputs = (broken.outputs[0], dataclasses.replace(broken.outputs[1], problem=problem))
        broken = Correctness("fail", f"loss[1]: {problem}", "the script on cpu", None, outputs)
        assert drawn_in_graphs(broken, _run({"dropout": 1})).verdict == "fail", problem
    assert drawn_in_graphs(_failed("missing outputs: loss[2]"), _run({"dropout": 1})).verdict == "fail"
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


def test_the_compile_watch_counts_the_random_draws_a_graph_makes_in_training_only():
    import torch
    import torch.nn.functional as F

    from bakeoff.target.dynamo import CompileWatch

    def step(q: torch.Tensor, training: bool) -> torch.Tensor:
        attended = F.scaled_dot_product_attention(q, q, q, dropout_p=0.1 if training else 0.0)
        return F.dropout(attended, 0.2, training) + F.rrelu(q, 0.1, 0.3, training)

    found = []
    for training in (True, False):  # the control: the same graph in eval draws nothing
        torch._dynamo.reset()
        watch = CompileWatch()
        torch.compile(step, backend="eager")(torch.randn(1, 2, 4, 8), training)
        found.append(watch.summary()["signals"])
        watch.close()
    assert found[0]["random_ops"] == {"scaled_dot_product_attention": 1, "dropout": 1, "rrelu": 1}
    assert found[0]["random_site"].endswith(f"test_drawn_in_graphs.py:{_line_of('attended = F.')}")
    assert found[1]["random_ops"] == {} and found[0]["backends"] == {"eager": 1}


def _line_of(text: str) -> int:
    from pathlib import Path

    return next(i for i, line in enumerate(Path(__file__).read_text().splitlines(), 1) if text in line)
