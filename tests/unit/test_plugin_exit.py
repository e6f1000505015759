"""A plugin that calls ``sys.exit`` is a plugin that failed: its method's failure is kept as a line
like any exception it raises, and bakeoff's command goes on to its own exit code.

The seeded fault is a check whose every method after ``run`` calls ``sys.exit(5)`` (and a plugin
module that exits while it is imported); the control is a plain check in the same package, whose
facts are shown as usual. Ctrl-C is not a plugin's failure: it still interrupts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import py_workload

from bakeoff.checks import registry
from bakeoff.checks.registry import guarded, registered_checks
from bakeoff.scenarios.registry import registered_scenarios

ROOT = Path(__file__).resolve().parents[2]

PLUGINS = """
import sys
from dataclasses import dataclass

from bakeoff.checks.base import Check, Metric
from bakeoff.codec import Value


@dataclass(frozen=True)
class Seen(Value):
    verdict: str


class Exiting(Check):
    name = "exiting"
    title = "exiting"
    value_type = Seen

    def run(self, context):
        return Seen("seen")

    def metrics(self, value):
        sys.exit(5)

    def misses(self, value):
        sys.exit(5)

    def figures(self, results):
        sys.exit(5)

    def notes(self, value):
        sys.exit(5)

    def facts(self, value, result):
        sys.exit(5)

    def headline(self, value, result):
        sys.exit(5)

    def details(self, value, result):
        sys.exit(5)


class Interrupting(Exiting):
    name = "interrupting"

    def facts(self, value, result):
        raise KeyboardInterrupt


class Plain(Check):
    name = "plain"
    title = "plain"
    value_type = Seen

    def run(self, context):
        return Seen("seen")

    def metrics(self, value):
        return [Metric("plain", value.verdict if value else None, "verdict", {"seen": 1})]

    def facts(self, value, result):
        return [f"the plain check saw {value.verdict}"]
"""

EXITS_ON_IMPORT = """
import sys

sys.exit(3)
"""

ENTRY_POINTS = """
[bakeoff.checks]
exiting = tiny_exiting_plugins:Exiting
plain = tiny_exiting_plugins:Plain
gone = tiny_exits_on_import:Anything
"""


def install(site: Path) -> Path:
    (site / "tiny_exiting_plugins.py").write_text(textwrap.dedent(PLUGINS))
    (site / "tiny_exits_on_import.py").write_text(textwrap.dedent(EXITS_ON_IMPORT))
    info = site / "tiny_exiting_plugins-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tiny-exiting-plugins\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(ENTRY_POINTS))
    return site


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    install(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    registered_scenarios.cache_clear()
    registered_checks.cache_clear()
    yield tmp_path
    monkeypatch.undo()
    sys.modules.pop("tiny_exiting_plugins", None)
    registered_scenarios.cache_clear()
    registered_checks.cache_clear()


def test_a_plugin_that_exits_on_import_is_left_out_with_one_line(installed: Path, capsys) -> None:
    names = [c.name for c in registered_checks()]
    assert "exiting" in names and "plain" in names and "gone" not in names
    err = capsys.readouterr().err
    assert "bakeoff: check plugin 'gone' (tiny_exits_on_import:Anything) left out: it called sys.exit(3)" in err


def test_a_plugin_methods_sys_exit_is_its_failure_and_ctrl_c_still_interrupts(installed: Path) -> None:
    exiting, plain = registry.check_named("exiting"), registry.check_named("plain")
    assert exiting is not None and plain is not None
    value = exiting.value_type("seen")
    for method, args in [("facts", (value, None)), ("details", (value, None)), ("notes", (value,))]:
        assert guarded(exiting, method, *args, fallback=[]) == [f"the exiting check's {method} called sys.exit(5)"]
    assert guarded(exiting, "headline", value, None, fallback=[]) == []
    assert guarded(exiting, "metrics", value, fallback=[]) == []
    assert guarded(exiting, "misses", value, fallback=([], ["unread"])) == ([], ["unread"])
    assert guarded(exiting, "figures", (), fallback=[]) == []
    assert guarded(plain, "facts", value, None, fallback=[]) == ["the plain check saw seen"]  # the control
    interrupting = sys.modules["tiny_exiting_plugins"].Interrupting()
    with pytest.raises(KeyboardInterrupt):
        guarded(interrupting, "facts", value, None, fallback=[])


def _bakeoff(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT / "src"), str(ROOT)])}
    return subprocess.run(
        [sys.executable, "-m", "bakeoff", *args], capture_output=True, text=True, timeout=600, env=env, cwd=site
    )


@pytest.mark.isolated
def test_trial_show_and_report_go_on_when_a_plugins_facts_call_sys_exit(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    install(site)
    db = str(tmp_path / "kb.db")
    fast = ["--samples", "3", "--min-time", "0", "--in-process"]
    trial = _bakeoff(site, "trial", py_workload("mlp"), "--on", "cpu", "--db", db, *fast)
    assert trial.returncode == 0, (trial.returncode, trial.stdout[-2000:], trial.stderr[-2000:])
    said = " ".join(trial.stdout.split())
    assert "cpu: the plain check saw seen; the exiting check's notes called sys.exit(5)" in said
    assert "left out: it called sys.exit(3)" in trial.stderr
    listed = _bakeoff(site, "history", "--db", db, "--format", "json")
    assert listed.returncode == 0, listed.stderr[-2000:]
    (run,) = json.loads(listed.stdout)
    run_id = run["run_id"]
    shown = _bakeoff(site, "show", run_id, "--db", db, "--verbose")
    assert shown.returncode == 0, (shown.returncode, shown.stderr[-2000:])
    said = " ".join(shown.stdout.split())
    assert "the exiting check's facts called sys.exit(5); the plain check saw seen" in said
    html, markdown = tmp_path / "report.html", tmp_path / "report.md"
    report = _bakeoff(site, "report", run_id, "--db", db, "--html", str(html), "--markdown", str(markdown))
    assert report.returncode == 0, (report.returncode, report.stderr[-2000:])
    assert "the exiting check&#39;s details called sys.exit(5)" in html.read_text()
    assert "the exiting check's facts called sys.exit(5)" in markdown.read_text()
    assert "the plain check saw seen" in markdown.read_text()


def test_a_plugin_validate_that_calls_sys_exit_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from bakeoff.checks.base import Check
    from bakeoff.errors import SpecError

    class Quits(Check):
        name = "quits"
        title = "quits"

        def validate(self, options: dict, text: str) -> None:
            sys.exit(4)

    monkeypatch.setattr(registry, "registered_checks", lambda: (*registry.BUILTIN, Quits()))
    with pytest.raises(SpecError) as said:
        registry.parse_check("quits")
    assert said.value.one_line().startswith("the quits check could not read 'quits': it called sys.exit(4)")


def test_a_plugin_scenarios_sys_exit_is_its_own_error_and_a_builtin_one_is_left_to_the_session(monkeypatch):
    from bakeoff.scenarios import registry as scenarios
    from bakeoff.scenarios.base import Scenario, ScenarioContext, ScenarioSpec
    from bakeoff.target.spec import Target

    class Exits(Scenario):
        name = "exits"

        def run(self, context, options):
            raise SystemExit(4)

    plugin = Exits()
    monkeypatch.setattr(scenarios, "scenario_named", lambda name: plugin)
    ctx = ScenarioContext(None, None, Target("cpu"), lambda: None, None, [1e-3], [])
    result = scenarios.run_scenario(ScenarioSpec("exits"), ctx)
    assert (result.status, result.reason) == ("error", "called sys.exit(4)")
    # the control: in bakeoff's own scenario a sys.exit comes from the workload, and goes on to the session
    monkeypatch.setattr(scenarios, "BUILTIN", (*scenarios.BUILTIN, plugin))
    with pytest.raises(SystemExit):
        scenarios.run_scenario(ScenarioSpec("exits"), ctx)
