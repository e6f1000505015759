"""Issue 29 ("exec on real scripts"): what a stored run shows of a failed target and of a long
error.

Three seeded faults, each with an honest control:

* placement: a script that crashed after its audit saw only on-device ops must not read
  ``on_device`` anywhere (JSON document, report JSON, terminal table); a target that ran to the
  end keeps its verdict.
* a script's output: a traceback whose frames repeat reads in its order, indented; a line said
  many times in a row is one line; a long output keeps its beginning and its end.
* cutting: a long error is cut at a word and marked "…"; a short one is left as it is.
"""

from __future__ import annotations

import io
import json
from typing import Any

from rich.console import Console
from tests.revisit_data import environment, make_run

from bakeoff.checks.placement import Placement
from bakeoff.report.evidence import answers_for, build_evidence, render_json
from bakeoff.report.terminal import run_view
from bakeoff.results.codec import run_from_json, run_to_json
from bakeoff.results.librarylog import DROPPED, LibraryLog, OutputLog
from bakeoff.results.values import ErrorInfo, Latency, TargetResult
from bakeoff.target.spec import parse_target
from bakeoff.units import clip
from bakeoff.verdicts.decision import decide_run

ON_DEVICE = Placement(
    "on_device", "every op ran on the target device; nothing left on the host", "the script run", 40, 40, 1.0
)
CRASH = ErrorInfo("RuntimeError", "CUDA error: an illegal memory access was encountered", "exception", "script")


def _terminal(renderable: Any) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def _run(*results: TargetResult):
    reference = TargetResult(parse_target("cpu"), "ok", is_reference=True, latency=Latency((1.0,)))
    return make_run("exec00000029", "2025-01-01T10:00:00+00:00", environment(), (reference, *results))


def _crashed() -> TargetResult:
    return TargetResult(parse_target("cuda"), "error", error=CRASH, checks={"placement": ON_DEVICE})


# -- 1. a crashed target's placement ---------------------------------------------------------------


def test_a_crashed_target_is_not_on_device_in_any_format():
    run = _run(_crashed())
    crashed = run.results[1]
    assert crashed.placement is not None and crashed.placement.verdict == "unknown"
    assert "partial" in crashed.placement.scope and "not measured" in crashed.placement.explanation
    document = run_to_json(run)
    assert document["results"][1]["placement"]["verdict"] == "unknown"
    assert run_from_json(document) == run  # the stored document reads back the same
    report = json.loads(render_json(build_evidence([run])))
    assert "on_device" not in json.dumps(report["runs"][0]["results"][1]["placement"]["verdict"])
    assert report["runs"][0]["answers"]["cuda|as-is"]["placement"]["word"] == "unknown"
    assert answers_for(crashed).placement.word == "unknown"
    table = _terminal(run_view(run, verbose=True))
    row = next(line for line in table.splitlines() if line.lstrip("│ ").startswith("cuda"))
    assert "unknown" in row and "100% ops" not in row and "on device" not in row
    standing = next(s for s in decide_run(run).standings if s.target == "cuda")
    assert not any("work left the device" in m for m in standing.misses)  # the crash is the miss


def test_a_target_that_ran_to_the_end_keeps_its_verdict():
    finished = TargetResult(parse_target("cuda"), "ok", latency=Latency((0.5,)), checks={"placement": ON_DEVICE})
    run = _run(finished)
    assert run.results[1].placement == ON_DEVICE
    assert run_to_json(run)["results"][1]["placement"]["verdict"] == "on_device"
    assert answers_for(run.results[1]).placement.word == "on device"


# -- 2. a script's output, in order -----------------------------------------------------------

WRAPPED = '  File "/venv/torch/nn/modules/module.py", line 1775, in _wrapped_call_impl'
CALL = "    return self._call_impl(*args, **kwargs)"
TRACEBACK = [
    "step 0 loss 2.31",
    "Traceback (most recent call last):",
    '  File "/work/train.py", line 40, in <module>',
    "    logits = model(x)",
    WRAPPED,
    CALL,
    '  File "/work/train.py", line 21, in forward',
    "    return self.head(self.block(x))",
    WRAPPED,  # the same two lines again, for the next module down
    CALL,
    "RuntimeError: shape mismatch",
]


def test_a_scripts_traceback_reads_in_its_order_with_its_indentation():
    log = OutputLog()
    for line in TRACEBACK:
        log.add("stderr", "script", line)
    assert [line["text"] for line in log.entries()] == TRACEBACK
    # the libraries' log counts each distinct line once, where it first came: no traceback
    counted = LibraryLog()
    for line in TRACEBACK:
        counted.add("stderr", "script", line)
    assert [line["text"] for line in counted.entries()] != TRACEBACK


def test_a_line_said_many_times_in_a_row_is_one_line_and_a_long_output_keeps_both_ends():
    log = OutputLog()
    for _ in range(1000):
        log.add("stderr", "script", "UserWarning: TypedStorage is deprecated")
    log.add("stdout", "script", "done")
    assert [(line["text"], line["count"]) for line in log.entries()] == [
        ("UserWarning: TypedStorage is deprecated", 1000),
        ("done", 1),
    ]
    long = OutputLog(max_lines=10)
    for i in range(100):
        long.add("stdout", "script", f"step {i}")
    long.add("stderr", "script", "RuntimeError: the end")
    texts = [line["text"] for line in long.entries()]
    assert texts[:5] == [f"step {i}" for i in range(5)] and texts[-1] == "RuntimeError: the end"
    assert texts[5] == DROPPED and long.entries()[5]["count"] == 91  # the 101 lines less 5 at each end
    assert len(texts) == 11


# -- 3. cutting text at a word ---------------------------------------------------------------------


def test_a_long_error_is_cut_at_a_word_and_marked():
    message = "CUDA error: an illegal memory access was encountered while launching the kernel"
    assert clip(message, 40) == "CUDA error: an illegal memory access…"
    assert clip("short message", 40) == "short message"  # the control: nothing cut, nothing added
    assert clip("x" * 50, 10) == "x" * 9 + "…"  # one long word: cut where it must be
    crashed = TargetResult(
        parse_target("cuda"), "error", error=ErrorInfo("RuntimeError", "word " * 100, "exception", "script")
    )
    table = _terminal(run_view(_run(crashed), verbose=True))
    assert "…" in table
