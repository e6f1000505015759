"""The terminal run table on narrow and wide terminals."""

from __future__ import annotations

from rich.console import Console

from bakeoff.env import Environment
from bakeoff.report.terminal import run_view
from bakeoff.results.values import Compilation, Correctness, Latency, RunResult, TargetResult
from bakeoff.target.spec import parse_target

RUN = RunResult(
    run_id="abc123abc123",
    created_at="2026-01-01T00:00:00+00:00",
    workload={"spec": "arch:llama", "fingerprint": "f" * 16, "dtype": "float32", "details": {}},
    environment=Environment({"torch": "2.13.0", "cpu": "test cpu"}),
    results=(
        TargetResult(parse_target("cpu"), "ok", is_reference=True,
                     latency=Latency((1.0, 1.1, 1.2)), speedup=1.0, checks={"correctness": Correctness("pass")}),
        TargetResult(parse_target("cpu+aot_eager"), "ok", latency=Latency((2.0, 2.1, 2.2)),
                     checks={"correctness": Correctness("pass"), "compilation": Compilation(graphs=4, recompiles=3)}),
    ),
)  # fmt: skip


def render(width: int | None, console_width: int, verbose: bool = True) -> str:
    console = Console(width=console_width, record=True, highlight=False)
    console.print(run_view(RUN, width=width, verbose=verbose))
    return console.export_text()


def test_a_narrow_terminal_keeps_the_target_names_and_says_what_it_left_out():
    text = render(80, 80)
    assert "cpu+aot_eager" in text  # the target column is never squeezed away
    assert all(len(line) <= 80 for line in text.splitlines())
    assert "narrow terminal: max abs err, on device, p90, first call, graphs, peak RSS" in text
    header = next(line for line in text.splitlines() if "target" in line)
    assert "p50" in header and "speed vs cpu" in header and "max abs err" not in header


def test_a_wide_terminal_shows_every_column():
    text = render(200, 200)
    header = next(line for line in text.splitlines() if "target" in line)
    for column in ("max abs err", "on device", "graphs", "4 (3 recompiles)"):
        assert column in (header if column != "4 (3 recompiles)" else text)
    assert "narrow terminal" not in text
    assert render(None, 200) == text


def test_the_requirements_table_calls_one_reading_a_single_observation_and_only_intervals_inconclusive():
    from dataclasses import replace

    from bakeoff.analysis.requirements import check_requirements
    from bakeoff.metrics import parse_requirement
    from bakeoff.report.terminal import requirements_view
    from bakeoff.stats import Estimate

    reqs = [parse_requirement("first_result<=2s"), parse_requirement("p50<=5ms")]
    measured = {"first_result": Estimate(1.5e3, 1.5e3, 1.5e3, 1), "p50": Estimate(4.9, 4.5, 5.5, 200)}
    checks = tuple(c.to_dict() for c in check_requirements(reqs, measured))
    run = replace(RUN, results=(replace(RUN.results[0], requirements=checks),))
    console = Console(width=200, record=True, highlight=False)
    console.print(requirements_view(run))
    lines = console.export_text().splitlines()
    first = next(line for line in lines if "first_result" in line)
    assert "single observation" in first and "straddles" not in first  # one reading has no interval to straddle
    assert " met " in first
    p50 = next(line for line in lines if "p50<=5ms" in line)
    # one word per fact: the verdict column says what the decision says, not "met" beside a doubt
    assert "4.5 ms-5.5 ms" in p50 and "not conclusive" in p50 and " met " not in p50.replace("estimate: met", "")
    assert "the interval straddles the threshold (the estimate: met)" in p50


def test_the_requirements_answer_counts_only_conclusive_mets():
    from dataclasses import replace

    from bakeoff.analysis.requirements import check_requirements
    from bakeoff.metrics import parse_requirement
    from bakeoff.report.evidence import answers_for
    from bakeoff.stats import Estimate

    reqs = [parse_requirement("p50<=5ms")]
    straddling = tuple(c.to_dict() for c in check_requirements(reqs, {"p50": Estimate(4.9, 4.5, 5.5, 200)}))
    clear = tuple(c.to_dict() for c in check_requirements(reqs, {"p50": Estimate(4.0, 3.8, 4.2, 200)}))
    assert straddling[0]["verdict"] == "met"  # the point estimate: the stored verdict keeps it
    answer = answers_for(replace(RUN.results[0], requirements=straddling)).requirements
    assert (answer.state, answer.word) == ("unknown", "0 of 1 met, 1 not conclusive")
    assert "1 not conclusive" in answer.text
    answer = answers_for(replace(RUN.results[0], requirements=clear)).requirements
    assert (answer.state, answer.word) == ("yes", "1 of 1 met")


def test_the_notes_give_the_correctness_sensitivity_beside_the_verdict():
    from bakeoff.report.evidence import answers_for
    from bakeoff.results.values import TensorComparison

    figures = dict(rule="golden", golden_err=5.6e-3, floor=5.7e-3, bias=2e-4, sensitivity=2.8e-3)
    logits = TensorComparison("output.logits", (1, 16, 1024), "bfloat16", 3.9e-3, 1e-3, 1.0, True, **figures)
    judged = Correctness("pass", "", "eager:bfloat16", 1e-2, (logits,))
    bf16 = TargetResult(parse_target("cpu?dtype=bf16"), "ok", latency=Latency((1.0,)), checks={"correctness": judged})
    console = Console(width=200, record=True, highlight=False)
    console.print(run_view(RunResult(**{**RUN.__dict__, "results": (*RUN.results, bf16)}), width=200, verbose=True))
    text = console.export_text()
    assert "correctness flags a relative bias above 0.0028" in text
    assert text.count("correctness flags") == 1  # targets judged without a golden have no figure
    assert answers_for(bf16).correct.text == (
        "outputs match the reference eager:bfloat16 as closely as eager matches float64 "
        "(it flags a relative bias above 0.0028) (largest difference 3.90e-03)"
    )


def _summary_run() -> RunResult:
    from dataclasses import replace

    from bakeoff.checks.determinism import Determinism

    flaky = Determinism("nondeterministic", calls=3, inputs=1, differing=("output.logits",), max_abs_diff=2e-7)
    steady = Determinism("deterministic", calls=3, inputs=1)
    said = ({"phase": "first call", "source": "warnings", "count": 22, "text": "Evaluation failed"},)
    reference, compiled = RUN.results
    return replace(
        RUN,
        results=(
            replace(reference, checks={**reference.checks, "determinism": steady}),
            replace(compiled, checks={**compiled.checks, "determinism": flaky}, log=said, first_call_ms=4008.1),
        ),
    )


def test_the_summary_keeps_one_table_the_decision_and_the_problems_and_points_to_the_detail():
    run = _summary_run()
    console = Console(width=200, record=True, highlight=False)
    console.print(run_view(run, width=200))
    summary = console.export_text()
    console = Console(width=200, record=True, highlight=False)
    console.print(run_view(run, width=200, verbose=True))
    detail = console.export_text()
    header = next(line for line in summary.splitlines() if "target" in line)
    assert header.split() == "┃ target ┃ correct ┃ placement ┃ p50 ┃ speed vs cpu ┃ first result ┃".split()
    # the seeded problem (nondeterministic outputs) is in the summary; the clean control is not named with one
    assert "cpu+aot_eager: nondeterministic: output.logits differed between 3 calls" in summary
    assert "cpu: nondeterministic" not in summary
    # library messages: one line with the count, never the raw text repeated
    assert "22 library messages from 1 target(s), most from cpu+aot_eager (22)" in summary
    assert summary.count("Evaluation failed") == 0
    # detail stays in --verbose, and the summary says where
    assert "time to first result" in detail and "time to first result" not in summary
    assert "bakeoff show abc123abc123 --verbose" in summary
    assert "4010 ms" in summary  # human units: three figures, seconds only past 10,000 ms
    assert "rule: A target qualifies" in detail and "(the full rule: --verbose)" in summary
    assert len(summary.splitlines()) < len(detail.splitlines())


def test_one_word_per_fact_in_every_format():
    """A CPU target's placement is "host is device" in the terminal, Markdown, HTML and JSON alike."""
    import json
    from dataclasses import replace

    from bakeoff.checks.placement import Placement
    from bakeoff.report.evidence import build_evidence, render_json
    from bakeoff.report.html import render_html
    from bakeoff.report.markdown import render_markdown

    cpu = Placement("not_applicable", "a CPU target")
    run = replace(RUN, results=tuple(replace(r, checks={**r.checks, "placement": cpu}) for r in RUN.results))
    console = Console(width=200, record=True, highlight=False)
    console.print(run_view(run, width=200))
    terminal = console.export_text()
    evidence = build_evidence([run], selection="one run", database="kb.db")
    markdown, page = render_markdown(evidence), render_html(evidence)
    answers = json.loads(render_json(evidence))["runs"][0]["answers"]
    assert terminal.count("host is device") == 2 and "not_applicable" not in terminal
    assert "| host is device |" in markdown and "placement: host is device:" in markdown
    assert page.count(">host is device</span>") >= 2
    assert {a["placement"]["word"] for a in answers.values()} == {"host is device"}
    assert {a["correct"]["word"] for a in answers.values()} == {"pass"}
    assert "| pass |" in markdown and "┃ correct" in terminal


def test_a_check_asked_for_that_ran_on_no_target_says_why():
    from dataclasses import replace

    from bakeoff.report.terminal.run import _asked_not_run

    reference = replace(
        RUN.results[0], skipped_checks={"checkpoint": "the reference's weights are what a checkpoint is compared with"}
    )
    asked = replace(RUN, results=(reference,), settings={"checks": ["checkpoint?steps=0"]})
    console = Console(width=200, record=True, highlight=False)
    console.print(run_view(asked, width=200))
    text = console.export_text()
    assert "--check checkpoint ran on no target (cpu: the reference's weights are what a checkpoint is compared" in text
    ran = replace(asked, results=(replace(reference, checks={**reference.checks, "checkpoint": object()}),))
    assert _asked_not_run(ran) == []  # it ran: nothing to say
