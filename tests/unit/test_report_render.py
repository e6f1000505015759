"""The report renderers on fixed evidence: a golden Markdown file, the HTML's structure, the JSON's
round trip. Regenerate the golden file with BAKEOFF_UPDATE_GOLDEN=1 after an intended change."""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path

from tests.revisit_data import REQUIREMENTS, environment, failed_result, make_run, target_result

from bakeoff.report.evidence import build_evidence, render_json
from bakeoff.report.html import render_html
from bakeoff.report.markdown import render_markdown
from bakeoff.results.codec import run_from_json
from bakeoff.results.values import ScenarioResult

SCENARIOS = (
    ScenarioResult(
        "offline",
        "ok",
        series={"batch=1": (1.0, 1.2, 1.1), "batch=8": (4.0, 4.4, 4.2)},
        facts={
            "best_batch": 8,
            "tokens_per_item": None,
            "batches": [
                {"batch": 1, "error": "", "p50_ms": 1.1, "items_per_s": 909.1},
                {"batch": 8, "error": "", "p50_ms": 4.2, "items_per_s": 1904.8},
            ],
        },
    ),
    ScenarioResult("generation", "not_applicable", reason="not a causal language model"),
)

GOLDEN = Path(__file__).parent.parent / "golden" / "report.md"


def _evidence():
    old, new = environment("2.13.0"), environment("2.14.0", OMP_NUM_THREADS="1")
    runs = [
        make_run(
            "aaaa00000001",
            "2025-01-01T10:00:00+00:00",
            old,
            (target_result("cpu", 2.0, seed=1), target_result("cpu+inductor", 1.0, seed=2), target_result("cuda", 0.5)),
        ),
        make_run(
            "bbbb00000002",
            "2025-01-02T10:00:00+00:00",
            new,
            (
                target_result("cpu", 2.0, seed=3),
                target_result("cpu+inductor", 1.5, seed=4, requirements=REQUIREMENTS, scenarios=SCENARIOS),
                failed_result("cuda", "device lost | retry"),
            ),
        ),
    ]
    return build_evidence(
        runs,
        notes={"bbbb00000002": ["driver 560 installed"]},
        tags={"bbbb00000002": ["nightly"]},
        selection="all runs",
        database="kb.db",
        generated_at="2025-01-03T00:00:00+00:00",
    )


def test_markdown_matches_the_golden_file():
    text = render_markdown(_evidence())
    if os.environ.get("BAKEOFF_UPDATE_GOLDEN"):
        # rewriting the golden file under CI would make this test pass whatever the renderer does
        assert not os.environ.get("CI"), "BAKEOFF_UPDATE_GOLDEN is set under CI: the golden test cannot fail"
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_html_structure():
    evidence = _evidence()
    page = render_html(evidence)
    for section in ("how-to-read", "summary", "regressions", "runs", "environments"):
        assert f'<section id="{section}">' in page
    glance = page[page.index('<section id="summary">') : page.index('<section id="regressions">')]
    assert glance.count("<tr>") == 1 + 3  # header + the latest run's three targets
    outcomes = re.findall(r'<span class="outcome" style="color: #[0-9a-f]+">([a-z ]+)</span>', glance)
    assert outcomes == ["unchanged", "regressed", "failed"]
    assert page.count('<article class="run"') == 2 and page.count('<details id="env-') == 2
    assert "<th>env OMP_NUM_THREADS</th><td>1</td>" in page
    assert (
        "<tr><td>offline</td><td>ok</td><td>best batch 8: 1,904.8/s [1,818.2/s-2,000.0/s] (n=3); batches 1-8 tried</td>"
        "<td>ran 0 ms, peak RSS -</td></tr>"
    ) in page
    assert "<td>generation</td><td>not applicable: not a causal language model</td>" in page
    blocks = re.findall(r'<script type="application/json" class="figure-data" data-plot="(fig\d+)-plot">', page)
    for plot in blocks:  # every figure has its place on the page
        assert f'<div class="plot" id="{plot}-plot"></div>' in page
    # histories of cpu and cpu+inductor (cuda has one timed run); run 1: latency, speed, placement (cuda) and
    # first calls per shape; run 2: no placement plot (cuda failed, the rest are CPU targets)
    assert len(blocks) == 2 + 4 + 3


def test_json_report_round_trips_its_runs():
    evidence = _evidence()
    doc = json.loads(render_json(evidence))
    assert (doc["schema"], doc["schema_version"]) == ("bakeoff.report", 1)
    for stored, original in zip(doc["runs"], evidence.runs, strict=True):
        assert run_from_json(stored) == original
    assert doc["runs"][1]["notes"][0]["text"] == "driver 560 installed" and doc["runs"][1]["tags"] == ["nightly"]
    assert doc["runs"][1]["answers"]["cpu+inductor|as-is"]["requirements"] == {
        "state": "no",
        "word": "1 of 2 met",
        "text": "1 of 2 met; not met: throughput>=2000/s",
    }
    assert {c["target"]: c["outcome"] for c in doc["regressions"]} == {
        "cpu": "unchanged",
        "cpu+inductor": "regressed",
        "cuda": "failed",
    }
    assert doc["thresholds"]["latency"] == 0.10


def test_reports_show_a_single_observation_and_the_load_a_server_verdict_was_judged_at():
    single = {**REQUIREMENTS[0], "text": "first_result<=2s", "metric": "first_result", "value": 1500.0}
    single.update(low=None, high=None, samples=1, confident=False, reason="single observation: no interval")
    judged = {**REQUIREMENTS[0], "text": "server.p99<=50ms", "metric": "server.p99", "value": 31.8, "samples": 100}
    judged["reason"] = "judged at 50.0/s, the reference's highest rate within server.p99<=50ms"
    run = make_run(
        "cccc00000003",
        "2025-01-02T10:00:00+00:00",
        environment(),
        (target_result("cpu", 2.0, seed=3, requirements=(single, judged)),),
    )
    evidence = build_evidence([run], selection="all runs", database="kb.db", generated_at="2025-01-03T00:00:00+00:00")
    text = render_markdown(evidence)
    said = "- requirement first\\_result&lt;=2s: **met** (measured 1500 ms, single observation, not confident)\n"
    assert said in text
    assert "95% interval 1500 ms" not in text  # never a zero-width interval
    assert "judged at 50.0/s, the reference's highest rate within server.p99&lt;=50ms)" in text
    page = render_html(evidence)
    assert '<td class="num">single observation</td>' in page
    assert "judged at 50.0/s, the reference&#39;s highest rate within server.p99&lt;=50ms" in page


def test_at_a_glance_keeps_the_full_comparison_when_a_smaller_run_follows():
    from bakeoff.report.html import glance_runs

    evidence = _evidence()
    follow_up = make_run("cccc00000003", "2025-01-03T10:00:00+00:00", environment("2.14.0"), (target_result("cpu"),))
    other = make_run(
        "dddd00000004", "2025-01-03T11:00:00+00:00", environment("2.14.0"), (target_result("cpu"),), spec="arch:gpt2"
    )
    runs = [*evidence.runs, follow_up, other]
    assert glance_runs(runs) == ["bbbb00000002", "dddd00000004"]  # not the smaller, later cccc run
    page = render_html(build_evidence(runs, generated_at="2025-01-04T00:00:00+00:00"))
    glance = page[page.index('<section id="summary">') : page.index('<section id="regressions">')]
    assert "#run-bbbb00000002" in glance and "#run-cccc00000003" not in glance
    assert glance.count('<p class="decision">') == 2  # a decision for each workload
    # the control: a later run as large as the first replaces it
    bigger = make_run("eeee00000005", "2025-01-05T10:00:00+00:00", environment("2.14.0"), evidence.runs[1].results)
    assert glance_runs([*runs, bigger])[0] == "eeee00000005"


def test_a_plans_stage_runs_get_one_decision_in_every_report():
    """Two stage runs tagged plan-X: the reports decide over both (the second stage's variant
    is faster and wins), and the eager reference the trial added is shown, never chosen."""
    added = {"reference": "cpu", "reference_added": True}
    first = make_run(
        "eeee00000001",
        "2025-02-01T10:00:00+00:00",
        environment(),
        (target_result("cpu", 2.0, seed=1), target_result("cpu+inductor", 1.5, seed=2)),
        settings=added,
    )
    second = make_run(
        "eeee00000002",
        "2025-02-01T10:05:00+00:00",
        environment(),
        (target_result("cpu", 2.0, seed=3), target_result("cpu+inductor?dynamic=true", 0.5, seed=4)),
        settings=added,
    )
    tag = "plan-eeee00000001"
    evidence = build_evidence(
        [first, second], tags={first.run_id: (tag,), second.run_id: (tag,)}, selection=f"tag {tag}", database="kb"
    )
    run_ids, decision = evidence.plans[tag]
    assert run_ids == ("eeee00000001", "eeee00000002")
    assert (decision.outcome, decision.target) == ("recommended", "cpu+inductor?dynamic=true")
    assert any(line.startswith("cpu (for comparison, not a candidate)") for line in decision.lines)
    markdown = render_markdown(evidence)
    assert f"## Plan {tag.replace('_', chr(92) + '_')}" in markdown
    assert "recommended: **cpu+inductor?dynamic=true**" in markdown
    page = render_html(evidence)
    assert f"<strong>plan {tag}</strong>" in page and '<a href="#run-eeee00000002">' in page
    doc = json.loads(render_json(evidence))
    assert doc["plans"][0]["tag"] == tag and doc["plans"][0]["decision"]["target"] == "cpu+inductor?dynamic=true"
    # a run the user listed the reference in (no reference_added) keeps the reference a candidate, and
    # runs without a plan tag make no plan
    listed = build_evidence([replace(first, settings={"reference": "cpu"})], tags={first.run_id: (tag,)})
    assert not any("not a candidate" in line for line in listed.plans[tag][1].lines)
    assert build_evidence([first, second]).plans == {}


def _large_run(run_id: str = "bbbb00000002", targets: int = 60, created: str = "2025-01-02T10:00:00+00:00"):
    """One run as a big exec or sweep leaves it: many targets, long ledgers, long failure reasons."""
    from bakeoff.checks.correctness import TensorComparison
    from bakeoff.results.values import Correctness

    ledger = tuple(
        {
            "name": f"torch.cuda.api_{i} (asked by a library)",
            "value": f"{i + 1}x, first at /srv/app/m{i}.py:{i}: -> xpu",
        }
        for i in range(40)
    )
    wrong = (TensorComparison("output.logits", (1, 8, 128), "float32", 0.5, 0.01, 0.99, False),)
    results = [target_result("cpu", 2.0, seed=1)]
    for i in range(targets):
        extra: dict = {"adjustments": ledger} if i % 3 == 0 else {}
        if i % 5 == 0:
            reason = "output.logits: rms error " + "much too large " * 30
            extra["correctness"] = Correctness("fail", reason, "eager:float32", 1e-4, outputs=wrong)
        spec = ("cpu+inductor" if i % 2 else "cpu+aot_eager") + f"?threads={i + 1}"
        results.append(target_result(spec, 1.0 + i / 100, seed=i + 2, **extra))
    results.append(failed_result("cuda", "device lost | " + "at frame " * 40))
    return make_run(run_id, created, environment(), tuple(results))


def _summary(text: str, run_id: str) -> str:
    """A run's summary table and decision, as rendered."""
    start = text.index(f"run {run_id}\n")
    start = text.index("| target | status |", start)
    return text[start : text.index("_\n", text.index("_Rule: ", start)) + 2]


def test_a_markdown_report_too_long_for_a_comment_fits_it_and_says_what_it_left_out():
    from bakeoff.report.markdown import GITHUB_LIMIT, MIN_LINE, github_length

    run = _large_run()
    note = "the nightly machine was rebooted " * 150
    evidence = build_evidence(
        [run], notes={run.run_id: [note, "driver 560 installed"]}, selection="all runs", database="kb.db",
        generated_at="2025-01-03T00:00:00+00:00",
    )  # fmt: skip
    whole = render_markdown(evidence, limit=10**9)
    assert len(whole) > GITHUB_LIMIT  # the seeded fault: as rendered before, 117 KB
    text = render_markdown(evidence)
    assert len(text) < GITHUB_LIMIT and github_length(text) <= GITHUB_LIMIT
    assert text.startswith(whole[: whole.index("> the nightly")])  # the head, whole
    assert _summary(whole, run.run_id) in text  # every target's row and the decision, whole
    closing = text.splitlines()[-1]
    assert closing.startswith("_Left out to fit GitHub's 65,536-character limit for a comment: ")
    assert "long line(s) shortened to " in closing and "bakeoff show bbbb00000002 --verbose" in closing
    assert "`bakeoff report --html FILE` with the same selection" in closing
    # the longest lines are shortened first, and no further than they must be: the short ones stay
    shortened = [line for line in text.splitlines() if line.endswith(" … (shortened)")]
    cap = int(closing.split("shortened to ")[1].split()[0])
    assert MIN_LINE <= cap and all(len(line) <= cap for line in shortened)
    assert f"{len(shortened)} long line(s) shortened to {cap} characters" in closing
    assert any(line.startswith("> the nightly machine") for line in shortened)
    assert any(line.startswith("- adjustments: torch.cuda.api\\_0") for line in shortened)
    kept = [line for line in whole.splitlines() if len(line) <= cap]
    assert all(line in text for line in kept)
    assert "driver 560 installed" in text and "**cpu+inductor?threads=60**" in text


def test_when_shortening_is_not_enough_the_largest_details_then_older_runs_go_first():
    from bakeoff.report.markdown import GITHUB_LIMIT, github_length

    older = _large_run("aaaa00000001", 100, "2025-01-01T10:00:00+00:00")
    newest = _large_run("bbbb00000002", 150)
    evidence = build_evidence([older, newest], selection="all runs", generated_at="2025-01-03T00:00:00+00:00")
    whole = render_markdown(evidence, limit=10**9)
    text = render_markdown(evidence)
    assert github_length(text) <= GITHUB_LIMIT < github_length(whole)
    assert _summary(whole, "bbbb00000002") in text  # the newest run's summary and decision stay whole
    assert "run aaaa00000001" not in text
    closing = text.splitlines()[-1]
    assert "; 1 older run(s): aaaa00000001" in closing
    # the details that went are the largest: every one kept is smaller than every one left out
    section = whole[: whole.index("## arch:llama: run aaaa00000001")]
    blocks = {m[1]: len(m[0]) for m in re.finditer(r"^\*\*([^*\n]+)\*\*\n\n(?:- .*\n)+", section, re.M)}
    kept = {label: size for label, size in blocks.items() if f"\n**{label}**\n" in text}
    gone = {label: size for label, size in blocks.items() if label not in kept}
    assert kept and gone and max(kept.values()) <= min(gone.values())
    assert f"the details of {len(gone)} target(s): " in closing


def test_a_summary_longer_than_the_limit_is_cut_at_a_line_and_says_so():
    from bakeoff.report.markdown import github_length

    run = _large_run(targets=40)
    text = render_markdown(build_evidence([run], generated_at="2025-01-03T00:00:00+00:00"), limit=4_000)
    assert github_length(text) <= 4_000
    assert text.startswith("# bakeoff evidence report\n")
    closing = text.splitlines()[-1]
    assert closing.startswith("_Left out to fit 4,000 characters: the details of 42 target(s): ")
    assert "(the summary alone is longer than the limit)" in closing


def test_a_report_within_the_limit_is_left_as_it_is():
    text = render_markdown(_evidence())
    assert text == render_markdown(_evidence(), limit=len(text) + text.count("\n"))
    assert "Left out" not in text and "(shortened)" not in text


def test_an_undecided_requirement_says_so_in_the_short_word_too():
    from dataclasses import replace

    from tests.revisit_data import target_result

    from bakeoff.report.evidence import answers_for

    few = {"text": "p90<=100ms", "metric": "p90", "verdict": "met", "enough": False, "confident": False}
    answer = answers_for(replace(target_result("cpu+inductor", 1.0), requirements=(few,))).requirements
    assert (answer.state, answer.word) == ("unknown", "0 of 1 met, 1 too few samples")
    assert answer.text == "0 of 1 met; 1 too few samples"
    # the control: a conclusive miss keeps its short word
    miss = {**few, "verdict": "not_met", "enough": True, "confident": True}
    answer = answers_for(replace(target_result("cpu+inductor", 1.0), requirements=(miss,))).requirements
    assert (answer.state, answer.word) == ("no", "0 of 1 met")
