"""The library log's counting and bounds, and the one fact the terminal shows about it."""

from __future__ import annotations

from bakeoff.report.figures import log_fact
from bakeoff.results.librarylog import DROPPED, MAX_CHARS, LibraryLog, merge_logs, normalise
from bakeoff.results.values import TargetResult
from bakeoff.target.spec import Target


def test_lines_are_counted_per_phase_and_source_with_time_stamps_and_colours_removed():
    log = LibraryLog()
    for stamp in ("2025-01-09 10:22:33.123456789", "2025-01-09 10:22:34.000000001"):
        log.add("stderr", "timing", f"{stamp} [W:onnxruntime:, x.cc:1] Evaluation failed\n")
    log.add("stderr", "checks", "\x1b[1;31m[W:onnxruntime:, x.cc:1] Evaluation failed\x1b[0m")
    log.add("warnings", "timing", "UserWarning: two\nlines")
    log.add("stderr", "timing", "   ")  # blank: nothing
    assert log.entries() == (
        {"text": "[W:onnxruntime:, x.cc:1] Evaluation failed", "count": 2, "source": "stderr", "phase": "timing"},
        {"text": "[W:onnxruntime:, x.cc:1] Evaluation failed", "count": 1, "source": "stderr", "phase": "checks"},
        {"text": "UserWarning: two | lines", "count": 1, "source": "warnings", "phase": "timing"},
    )


def test_the_log_is_bounded_and_counts_what_it_did_not_keep():
    log = LibraryLog(max_lines=3)
    for i in range(10):
        log.add("stderr", "timing", f"line {i}")
    log.add("stderr", "timing", "line 0")  # a kept line still counts
    lines = log.entries()
    assert [line["text"] for line in lines] == ["line 0", "line 1", "line 2", DROPPED]
    assert lines[0]["count"] == 2 and lines[-1]["count"] == 7
    assert len(normalise("x" * 10_000)) == MAX_CHARS
    # merging keeps the bound and adds up what was dropped
    merged = merge_logs(lines, lines)
    assert merged[0]["count"] == 4 and merged[-1] == {"text": DROPPED, "count": 14, "source": "bakeoff", "phase": ""}


def test_one_fact_sums_a_line_over_its_phases_and_a_quiet_target_has_none():
    said = (
        {"text": "WARNING torch._dynamo: recompile limit", "count": 30, "source": "logging", "phase": "timing"},
        {"text": "WARNING torch._dynamo: recompile limit", "count": 10, "source": "logging", "phase": "checks"},
        {"text": "Evaluation failed", "count": 1, "source": "stderr", "phase": "timing"},
    )
    result = TargetResult(Target("cpu"), "ok", log=said)
    assert log_fact(result, "abc") == (
        "41 library messages (2 distinct: WARNING torch._dynamo: recompile limit x40, Evaluation failed x1); "
        "`bakeoff show abc --log`"
    )
    assert log_fact(TargetResult(Target("cpu"), "ok")) is None
    assert TargetResult.from_dict(result.to_dict()) == result
