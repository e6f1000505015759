"""The grade ladder, failure clusters and expectations, on results with seeded faults."""

from __future__ import annotations

import pytest

from bakeoff.checks.compilation import Compilation
from bakeoff.checks.correctness import Correctness
from bakeoff.checks.greedy import Greedy
from bakeoff.checks.placement import Placement
from bakeoff.errors import SpecError
from bakeoff.results.values import ErrorInfo, TargetResult
from bakeoff.sweep.expect import classify, read_expectations, write_expectations
from bakeoff.target.spec import parse_target
from bakeoff.verdicts.coverage import GRADES, Coverage, cluster_reasons, grade_cell, reason_key

CLEAN = {
    "placement": Placement("on_device", "every op on the device"),
    "correctness": Correctness("pass", "", "eager:float32"),
    "compilation": Compilation(graphs=1),
    "greedy": Greedy("same", "8 greedy tokens identical", 8, 8),
}


def result(target: str = "cpu+aot_eager", status: str = "ok", error: ErrorInfo | None = None, **checks) -> TargetResult:
    values = {**CLEAN, **checks}
    return TargetResult(
        target=parse_target(target),
        status=status,
        error=error,
        checks={k: v for k, v in values.items() if v is not None},
    )


def test_a_clean_compiled_target_reaches_the_top():
    cell = grade_cell("arch:x", result())
    assert cell.grade == GRADES[-1] == "generates_same" and cell.reason == ""


def test_an_eager_target_passes_compiles_clean_through():
    assert grade_cell("arch:x", result("cpu", compilation=None)).grade == "generates_same"


@pytest.mark.parametrize(
    ("greedy", "grade", "key"),
    [
        (Greedy("tie", "tokens part at a near tie"), "generates_same", ""),
        (Greedy("not_applicable", "not a language model"), "generates_same", ""),
        (Greedy("differs", "tokens differ from step 3"), "compiles_clean", "greedy tokens differ"),
        (Greedy("error", "decoding on the target raised RuntimeError: size 17 > 16"), "compiles_clean",
         "greedy decoding error: decoding on the target raised RuntimeError: size N > N"),
        (None, "compiles_clean", "greedy decoding not compared"),
    ],
)  # fmt: skip
def test_greedy_tokens_are_the_top_of_the_ladder(greedy, grade, key):
    cell = grade_cell("arch:x", result(greedy=greedy))
    assert cell.grade == grade and cell.key == key, cell


def test_a_compiled_target_without_its_compile_watch_is_not_called_clean():
    cell = grade_cell("arch:x", result(compilation=None))
    assert cell.grade == "correct" and "not watched" in cell.reason


@pytest.mark.parametrize(
    ("checks", "grade", "key"),
    [
        (
            {"compilation": Compilation(graphs=2, graph_breaks=1, graph_break_reasons=({"reason": "call to print"},))},
            "correct",
            "graph break: call to print",
        ),
        (
            {"compilation": Compilation(graphs=2, recompiles=3, recompile_reasons=("size mismatch at index 1",))},
            "correct",
            "recompile: size mismatch at index N",
        ),
        (
            {"correctness": Correctness("fail", "logits: max abs err 0.1 > tol 1e-05", "eager:float32")},
            "on_device",
            "correctness fail: logits",
        ),
        (
            {"correctness": Correctness("not_comparable", "nondeterministic", "")},
            "on_device",
            "correctness not_comparable: nondeterministic",
        ),
        (
            {"placement": Placement("fallbacks", "3 ops on the host", fallback_ops={"aten::nonzero": 3})},
            "runs",
            "placement fallbacks: aten::nonzero",
        ),
        ({"placement": None}, "runs", "placement not audited"),
    ],
)
def test_each_seeded_fault_stops_the_ladder_where_it_is(checks, grade, key):
    cell = grade_cell("arch:x", result(**checks))
    assert cell.grade == grade and cell.key == key, cell
    assert not cell.reached(GRADES[GRADES.index(grade) + 1])


@pytest.mark.parametrize(
    ("phase", "grade"),
    [("build", None), ("prepare", None), ("worker (start)", None), ("first call", "builds"),
     ("compile and first call", "builds"), ("timing", "runs"), ("placement", "runs")],
)  # fmt: skip
def test_an_error_counts_what_ran_before_it(phase, grade):
    error = ErrorInfo("RuntimeError", "boom", "exception", phase)
    assert grade_cell("arch:x", result(status="error", error=error)).grade == grade


def test_a_workload_that_does_not_build_reaches_nothing_on_every_target():
    cell = grade_cell("arch:x", None, {"type": "WorkloadError", "message": "could not build"}, "cpu")
    assert cell.grade is None and cell.target == "cpu" and not cell.reached("builds")
    assert cell.key == "workload: WorkloadError: could not build"


def test_reasons_cluster_unsupported_ops_and_normalised_messages():
    assert reason_key("NotImplementedError", "Could not run 'aten::foo.out' with arguments from the 'emu' backend") == (
        "aten::foo.out not implemented (NotImplementedError)"
    )
    a = reason_key("RuntimeError", "shape '[1, 16, 4]' is invalid for input of size 96 at /x/y/z.py:12")
    b = reason_key("RuntimeError", "shape '[2, 8, 4]' is invalid for input of size 72 at /a/b/c.py:3")
    assert a == b
    assert reason_key("RuntimeError", "one thing") != reason_key("ValueError", "one thing")
    # the workload's own name is not part of the reason: two architectures failing alike are one line
    dbrx = reason_key("WorkloadError", "could not build arch:dbrx: AttributeError: 'DbrxConfig' has no 'x' (known: a)")
    other = reason_key(
        "WorkloadError", "could not build arch:m?layers=2: AttributeError: 'MConfig' has no 'y' (known: a)"
    )
    assert dbrx == other == "WorkloadError: could not build <workload>: AttributeError: '…' has no '…' (known: a)"
    assert reason_key("E", "py:/a/b/c.py:make raised E: boom") == "E: <workload> raised E: boom"
    cells = [
        grade_cell(
            f"arch:{n}", result(status="error", error=ErrorInfo("RuntimeError", f"boom {n}", "exception", "first call"))
        )
        for n in range(3)
    ] + [grade_cell("arch:ok", result())]
    (cluster,) = cluster_reasons(cells)
    assert cluster["count"] == 3 and cluster["reason"] == "RuntimeError: boom N" and cluster["stopped_at"] == ["builds"]


def _coverage(grades: dict[str, str | None]) -> Coverage:
    cells = []
    for workload, grade in grades.items():
        if grade is None:
            cells.append(grade_cell(workload, None, {"type": "E", "message": "m"}, "cpu"))
        elif grade == "generates_same":
            cells.append(grade_cell(workload, result("cpu")))
        else:
            cells.append(
                grade_cell(workload, result("cpu", correctness=Correctness("fail", "x: off", "eager:float32")))
            )
    population = {"name": "list", "unit": "workload", "size": len(grades), "specs": list(grades)}
    return Coverage("s1", "2026-01-01T00:00:00", population, ("cpu",), tuple(cells))


def test_expectations_round_trip_and_classify(tmp_path):
    path = tmp_path / "expected.toml"
    before = _coverage(
        {"arch:a": "generates_same", "arch:b": "on_device", "arch:c": None, 'arch:"q"': "generates_same"}
    )
    assert write_expectations(path, before) == 4
    expected = read_expectations(path)
    assert expected["cpu"]['arch:"q"'] == "generates_same"  # quotes survive the TOML round trip
    assert {e.status for e in classify(before, expected)} == {"pass", "expected_failure"}
    after = _coverage({"arch:a": "on_device", "arch:b": "generates_same", "arch:d": "generates_same"})
    found = {e.workload: e.status for e in classify(after, expected)}
    assert found == {
        "arch:a": "regressed",
        "arch:b": "improved",
        "arch:d": "new",
        "arch:c": "missing",
        'arch:"q"': "missing",
    }


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("not toml [", "is not valid TOML"),
        ('["cpu"]\n"arch:a" = "great"\n', "is not a grade"),
        ("cpu = 3\n", "is not a table"),
    ],
)
def test_a_bad_expectations_file_is_refused(tmp_path, text, words):
    path = tmp_path / "e.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError, match=words):
        read_expectations(path)


def test_a_sweeps_warm_imports_are_what_any_of_its_workloads_needs_but_one_architectures_own():
    from bakeoff.sweep.run import preload_for

    assert preload_for(["py:model.py:make"]) == ("torch",)
    mixed = preload_for(["py:model.py:make", "arch:llama", "arch:gpt2"])
    assert mixed == ("torch", "transformers", "transformers.models.auto.modeling_auto")
    assert preload_for(["hf:./local-model"]) == mixed
