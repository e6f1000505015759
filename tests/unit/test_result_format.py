"""The run document's compatibility rule, both ways: adding is compatible, readers ignore what they
do not know (and keep it); removing a key or changing its meaning bumps the version.

- new reader, old document: the version-1 fixture (written by the first release) reads back into
  today's values with nothing left over, and writing it again keeps every key it had;
- old reader, new document: a document carrying a check and keys this reader does not know
  (written by a newer bakeoff, or by a plugin not installed here) is read, the unknown parts
  kept aside, written back unchanged and named in the reports; unknown keys inside a known
  value are skipped; a newer *version* is refused.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from bakeoff.checks.correctness import Correctness
from bakeoff.checks.placement import Placement
from bakeoff.checks.registry import registered_checks
from bakeoff.errors import BakeoffError
from bakeoff.report.evidence import build_evidence
from bakeoff.report.markdown import render_markdown
from bakeoff.report.terminal import run_view
from bakeoff.results.values import RunResult, TargetResult

V1 = json.loads((Path(__file__).parents[1] / "fixtures" / "kb_v1.json").read_text())["runs"]


def _missing_keys(old: Any, new: Any, path: str = "") -> list[str]:
    """Keys of ``old`` (recursively through objects and lists) that ``new`` lacks."""
    if isinstance(old, list):
        if not isinstance(new, list) or len(new) != len(old):
            return [path or "."]
        return [m for i, (a, b) in enumerate(zip(old, new, strict=True)) for m in _missing_keys(a, b, f"{path}[{i}]")]
    if not isinstance(old, dict):
        return []
    if not isinstance(new, dict):
        return [path or "."]
    missing = []
    for key, value in old.items():
        if key not in new:
            missing.append(f"{path}.{key}")
        else:
            missing += _missing_keys(value, new[key], f"{path}.{key}")
    return missing


@pytest.mark.parametrize("index", range(len(V1)))
def test_a_version_1_document_reads_with_nothing_unknown_and_writes_back_every_key(index):
    document = V1[index]
    run = RunResult.from_dict(document)
    assert all(result.unknown == {} for result in run.results)
    assert any(isinstance(result.correctness, Correctness) for result in run.results)
    assert any(isinstance(result.placement, Placement) for result in run.results)
    written = run.to_dict()
    assert _missing_keys(document, written) == []  # an old reader finds everything it read before
    assert RunResult.from_dict(json.loads(json.dumps(written))) == run


def test_the_key_check_catches_a_removed_key():
    # control for the check above: a key the writer dropped is found
    document = copy.deepcopy(V1[0])
    written = RunResult.from_dict(document).to_dict()
    del written["results"][0]["correctness"]["reference"]
    assert _missing_keys(document, written) == [".results[0].correctness.reference"]


def _newer(document: dict[str, Any]) -> dict[str, Any]:
    newer = copy.deepcopy(document)
    result = newer["results"][0]
    result["vendor_fallbacks"] = {"verdict": "clean", "ops": 0}  # a check this reader does not have
    result["energy_joules"] = 1.5  # a run-level key added later
    result["correctness"]["added_later"] = True  # a key inside a known value
    return newer


def test_a_newer_document_keeps_what_this_reader_does_not_know():
    run = RunResult.from_dict(_newer(V1[0]))
    result = run.results[0]
    assert result.unknown == {"vendor_fallbacks": {"verdict": "clean", "ops": 0}, "energy_joules": 1.5}
    # what it knows reads as before; the unknown key inside correctness is skipped
    assert result.correctness == RunResult.from_dict(V1[0]).results[0].correctness
    written = result.to_dict()
    assert written["vendor_fallbacks"] == {"verdict": "clean", "ops": 0} and written["energy_joules"] == 1.5
    assert "added_later" not in written["correctness"]
    assert "unknown" not in written and "checks" not in written  # no key of the reader's own making


def test_the_reports_name_what_a_newer_bakeoff_wrote():
    run = RunResult.from_dict(_newer(V1[0]))
    console = Console(width=400, record=True, highlight=False)
    console.print(run_view(run, width=400, verbose=True))
    assert "written by a newer bakeoff or an absent plugin: energy_joules, vendor_fallbacks" in console.export_text()
    markdown = render_markdown(build_evidence([run], selection="one run", database="kb.db"))
    assert "- written by a newer bakeoff or an absent plugin: energy\\_joules, vendor\\_fallbacks" in markdown
    # control: the same run as written by this release names nothing
    plain = render_markdown(build_evidence([RunResult.from_dict(V1[0])], selection="one run", database="kb.db"))
    assert "newer bakeoff" not in plain


def test_a_newer_version_is_refused_not_misread():
    newer = {**V1[0], "schema_version": 2}
    with pytest.raises(BakeoffError, match="schema version 2 is newer"):
        RunResult.from_dict(newer)


def test_every_registered_check_stands_under_its_name_in_the_document():
    result = RunResult.from_dict(V1[0]).results[0]
    written = result.to_dict()
    for check in registered_checks():
        assert check.name in written  # null where the check has no value
        value = result.checks.get(check.name)
        assert written[check.name] == (None if value is None else check.encode(value))
    assert TargetResult.from_dict(written) == result


def test_no_check_can_take_a_run_level_key():
    from dataclasses import fields

    from bakeoff.checks.registry import RUN_LEVEL_KEYS

    # the registry refuses plugin checks by this list: it must name every run-level key
    assert {f.name for f in fields(TargetResult)} | {"target_detail"} == RUN_LEVEL_KEYS
    assert not RUN_LEVEL_KEYS & {check.name for check in registered_checks()}
