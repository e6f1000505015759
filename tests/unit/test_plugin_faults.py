"""Broken or grabbing plugins: each seeded fault is contained, and bakeoff's own evidence stays true.

Plugins are installed for real (a ``.dist-info`` with ``entry_points.txt`` on ``sys.path``), as
``pip install`` leaves them; the registries are read again for each test.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import ClassVar

import pytest
from tests.conftest import py_workload

from bakeoff.checks import registry
from bakeoff.checks.base import Check, Metric
from bakeoff.checks.determinism import Determinism
from bakeoff.checks.registry import registered_checks
from bakeoff.errors import SpecError
from bakeoff.metrics import find_metric, parse_requirement
from bakeoff.runner.job import TargetJob
from bakeoff.runner.session import TargetSession, run_steps
from bakeoff.scenarios.registry import registered_scenarios
from bakeoff.specsyntax import Option, typed_options
from bakeoff.target.spec import Target
from bakeoff.verdicts.regressions import Thresholds
from bakeoff.verdicts.regressions.rules import _check_metric

PLUGINS = """
from bakeoff.checks.base import Check
from bakeoff.scenarios.base import MetricSpec, Scenario


class Shadow(Scenario):
    name = "shadow"
    metrics = (MetricSpec("", "time", "a fake single-stream family", series="fake"),
               MetricSpec("ttft", "time", "a fake ttft", series="fake", bare=True))


class Decent(Scenario):
    name = "decent"
    metrics = (MetricSpec("decent", "time", "its own", series="call", bare=True),)


class Grabby(Check):
    name = "grabby"
    title = "grabby"
    value_type = dict
    offers = {"recompiles": ("count", "not its own")}
"""

ENTRY_POINTS = """
[bakeoff.scenarios]
shadow = tiny_bakeoff_plugins:Shadow
decent = tiny_bakeoff_plugins:Decent

[bakeoff.checks]
grabby = tiny_bakeoff_plugins:Grabby
"""


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "tiny_bakeoff_plugins.py").write_text(textwrap.dedent(PLUGINS))
    info = tmp_path / "tiny_bakeoff_plugins-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tiny-bakeoff-plugins\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(ENTRY_POINTS))
    monkeypatch.syspath_prepend(str(tmp_path))
    registered_scenarios.cache_clear()
    registered_checks.cache_clear()
    yield tmp_path
    monkeypatch.undo()
    registered_scenarios.cache_clear()
    registered_checks.cache_clear()


def test_a_plugin_cannot_take_a_built_in_metric_name(installed: Path, capsys: pytest.CaptureFixture) -> None:
    names = [s.name for s in registered_scenarios()]
    assert "shadow" not in names and "decent" in names  # the grabbing one out, the decent one in
    assert "grabby" not in [c.name for c in registered_checks()]
    err = capsys.readouterr().err
    assert "scenario plugin 'shadow' left out: its metric names ['', 'ttft'] are taken" in err
    assert "check plugin 'grabby' left out: its metric names ['recompiles'] are taken" in err
    # the built-in names still measure what they did
    assert (find_metric("p90").scenario, find_metric("ttft").scenario) == ("single-stream", "generation")
    assert find_metric("recompiles").check == "compilation"
    assert parse_requirement("decent.p90<=5ms").scenario == "decent"  # the control: its own name works


def test_flag_options_read_true_and_false() -> None:
    declared = {"flag": Option(bool, False)}
    read = [typed_options("x", {"flag": text}, declared, "check", "x")["flag"] for text in ("false", "0", "no", "off")]
    assert read == [False] * 4
    read = [typed_options("x", {"flag": text}, declared, "check", "x")["flag"] for text in ("true", "1", "YES", "on")]
    assert read == [True] * 4
    with pytest.raises(SpecError, match="is not true or false"):
        typed_options("x", {"flag": "maybe"}, declared, "check", "x?flag=maybe")
    assert typed_options("x", {"n": "8"}, {"n": Option(int, 1)}, "check", "x?n=8") == {"n": 8}


def test_a_plugin_checks_validate_that_breaks_is_one_line_not_a_traceback(monkeypatch) -> None:
    class Picky(Check):
        name = "picky"
        title = "picky"
        value_type = Determinism
        options: ClassVar[Mapping[str, Option]] = {"level": Option(int, 1)}

        def validate(self, options: dict, text: str) -> None:
            if options["level"] > 3:
                raise SpecError(f"level in {text!r} is at most 3", hint="e.g. picky?level=2")
            raise KeyError("oops")

    monkeypatch.setattr(registry, "registered_checks", lambda: (*registry.BUILTIN, Picky()))
    with pytest.raises(SpecError) as said:
        registry.parse_check("picky?level=5")
    assert said.value.one_line() == "level in 'picky?level=5' is at most 3 (e.g. picky?level=2)"  # its own words
    with pytest.raises(SpecError) as broke:
        registry.parse_check("picky?level=2")
    assert broke.value.one_line().startswith("the picky check could not read 'picky?level=2': KeyError")


def test_a_non_finite_check_metric_is_not_comparable() -> None:
    nan = _check_metric(Metric("x_share", math.nan, "share"), Metric("x_share", math.nan, "share"), Thresholds())
    assert nan is not None and nan.outcome == "not_comparable"
    inf = _check_metric(Metric("x_count", math.inf, "count"), Metric("x_count", 3, "count"), Thresholds())
    assert inf is not None and inf.outcome == "not_comparable"
    same = _check_metric(Metric("x_count", 3, "count"), Metric("x_count", 3, "count"), Thresholds())
    assert same is not None and same.outcome == "unchanged"  # the control


class Raises(Check):
    name = "raises"
    title = "raises"
    value_type = Determinism

    def run(self, context):
        raise RuntimeError("boom")


class WrongType(Check):
    name = "wrong_type"
    title = "wrong type"
    value_type = Determinism

    def run(self, context):
        return {"verdict": "deterministic"}


class Exits(Check):
    name = "exits"
    title = "exits"
    value_type = Determinism

    def run(self, context):
        raise SystemExit(5)


def test_a_failing_plugin_check_fails_alone() -> None:
    job = TargetJob(py_workload("mlp"), Target("cpu"), "0", None)
    session = TargetSession(job)
    session.checks = [*session.checks, Raises(), WrongType(), Exits()]
    result = run_steps(session)
    assert result.status == "ok" and result.latency is not None and result.latency.count
    assert result.correctness is not None and result.correctness.verdict == "not_comparable"  # no baseline given
    assert "correctness" in result.checks and "determinism" in result.checks  # bakeoff's own kept
    assert "raises" not in result.checks and "wrong_type" not in result.checks
    assert "the raises check failed: RuntimeError: boom" in result.notes
    assert any(n.startswith("the wrong_type check failed: TypeError: returned dict") for n in result.notes)
    assert "the exits check called sys.exit(5)" in result.notes  # the plugin's failure, not the target's


def test_a_kept_requirement_on_an_absent_plugins_metric_is_noted_not_fatal(tmp_path: Path) -> None:
    from bakeoff.runner.keeping import resolve_requirements
    from bakeoff.store import Store

    store = Store.open(str(tmp_path / "kb.db"))
    store.save_requirements("arch:llama", ["p90<=50ms", "repeat.p90<=10ms"], "2025-01-01T00:00:00+00:00")
    kept, notes = resolve_requirements(store, "arch:llama", None)
    assert [r.text for r in kept] == ["p90<=50ms"]
    assert notes[0] == "requirements kept for this workload checked: p90<=50ms"
    assert notes[1].startswith("kept requirement repeat.p90<=10ms not checked: unknown requirement metric 'repeat.p90'")
    # given on the command line, the same metric is bad input
    with pytest.raises(SpecError, match=r"unknown requirement metric 'repeat\.p90'"):
        resolve_requirements(store, "arch:llama", ["repeat.p90<=10ms"])
