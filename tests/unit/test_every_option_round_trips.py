"""Every option of every command with stored settings (trial, exec, serve, sweep, dist) round-trips: typed on
the command line, given to the API, stored in a real knowledge base and read back as ``rerun``
(or a resumed sweep) reads it, it is the same setting, and it differs from the default (so the
option was carried, not lost to a default that happens to match).

The cases are generated from the commands' tables (:mod:`bakeoff.settings`), each option's
declared ``example``: a new option is covered as soon as it is declared, and one the command
line, the API or the store drops fails here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
import pytest
from tests.revisit_data import environment, make_run, target_result

from bakeoff.cli.main import cli
from bakeoff.settings import (
    EXEC_OPTIONS,
    LOCALIZE_OPTIONS,
    PLAN_OPTIONS,
    SWEEP_OPTIONS,
    TRIAL_OPTIONS,
    ExecSettings,
    Option,
    TrialSettings,
    read_options,
)
from bakeoff.settings.dist import DIST_OPTIONS
from bakeoff.settings.exec import run_settings
from bakeoff.settings.serve import SERVE_OPTIONS, ServeSettings
from bakeoff.settings.serve import run_settings as serve_run_settings
from bakeoff.settings.sweep import sweep_keywords
from bakeoff.store.db import Store

#: Each command with stored settings: its table and the arguments it needs besides the option.
COMMANDS: dict[str, tuple[Mapping[str, Option], list[str]]] = {
    "trial": (TRIAL_OPTIONS, ["arch:llama"]),
    "exec": (EXEC_OPTIONS, ["train.py"]),
    "sweep": (SWEEP_OPTIONS, ["arch:base"]),
    "serve": (SERVE_OPTIONS, ["python app.py --port {port}"]),
    "dist": (DIST_OPTIONS, ["collectives"]),
}
#: Commands whose own settings are not stored (a plan's stages store theirs as trials; a
#: localisation stores its result): the command line and the API must still agree.
UNSTORED: dict[str, tuple[Mapping[str, Option], list[str]]] = {
    "plan": (PLAN_OPTIONS, ["arch:llama"]),
    "localize": (LOCALIZE_OPTIONS, ["3f2a"]),
}

CASES = [
    pytest.param(command, keyword, id=f"{command} {option.flag}")
    for command, (table, _) in (COMMANDS | UNSTORED).items()
    for keyword, option in table.items()
]


def _typed(option: Option) -> list[str]:
    """The option's example as a user types it."""
    if isinstance(option.default, bool):
        return [option.flag]
    values = option.example if option.multiple else [option.example]
    return [word for value in values for word in (option.flag, str(value))]


def _from_the_command_line(command: str, keyword: str) -> Any:
    """The value the command's own parser gives its function for the example."""
    table, positionals = (COMMANDS | UNSTORED)[command]
    ctx = cli.commands[command].make_context(command, [*_typed(table[keyword]), *positionals])
    return ctx.params[keyword]


@pytest.mark.parametrize(("command", "keyword"), CASES)
def test_every_option_has_an_example_that_is_not_its_default(command: str, keyword: str) -> None:
    table = (COMMANDS | UNSTORED)[command][0]
    option = table[keyword]
    assert option.example is not None, f"{command} {option.flag} declares no example"
    assert (list(option.example) != list(option.default or ())) if option.multiple else option.example != option.default
    param = next(p for p in cli.commands[command].params if p.name == keyword)  # named as the API keyword
    assert option.flag in param.opts and bool(getattr(param, "multiple", False)) == option.multiple


@pytest.mark.parametrize(("command", "keyword"), [c for c in CASES if c.values[0] in UNSTORED])
def test_an_unstored_commands_option_reads_the_same_from_the_command_line_and_the_api(command, keyword) -> None:
    table = UNSTORED[command][0]
    typed = read_options(table, {keyword: _from_the_command_line(command, keyword)}, command)
    assert typed == read_options(table, {keyword: table[keyword].example}, command) != read_options(table, {}, command)


@pytest.mark.parametrize(("command", "keyword"), [c for c in CASES if c.values[0] == "trial"])
def test_a_trial_option_round_trips_through_the_store_and_rerun(command: str, keyword: str, tmp_path) -> None:
    from bakeoff.api import rerun_keywords

    typed = TrialSettings.from_options(**{keyword: _from_the_command_line(command, keyword)})
    assert typed == TrialSettings.from_options(**{keyword: TRIAL_OPTIONS[keyword].example})  # CLI == API
    assert typed != TrialSettings.from_options()
    store = Store.open(tmp_path / "kb.db")
    stored = _stored(typed)
    store.save_run(make_run("r1", "2026-01-01T00:00:00+00:00", environment(), (target_result("cpu"),), settings=stored))
    keywords = rerun_keywords(store.get_run("r1"))
    again = TrialSettings.from_options(**{k: v for k, v in keywords.items() if k not in ("workload", "on")})
    if TRIAL_OPTIONS[keyword].repeated:  # the rerun stores the same settings, not the defaults'
        assert _stored(again) == stored != _stored(TrialSettings.from_options())
    else:  # decided anew by each rerun
        assert keyword not in keywords and getattr(again, keyword) == TRIAL_OPTIONS[keyword].default


def _stored(settings: TrialSettings) -> dict[str, Any]:
    """What a trial with ``settings`` stores (with a reference and no bucket plan)."""
    return settings.to_run_dict(
        reference="cpu", bucket_plan=None, scenarios=settings.scenarios, requirements=list(settings.requirements or ())
    )


#: What a script run stores under ``settings.exec`` (a key renamed or dropped would need a new
#: version of the run format: see docs/architecture.md, "The result format's rule").
STORED_EXEC_KEYS = sorted(
    ["argv", "map", "strict", "captures", "capture_modules", "repeats", "seed", "timeout_s", "as_written", "audit",
     "workdir", "files", "nproc", "nodes"]
)  # fmt: skip


@pytest.mark.parametrize(("command", "keyword"), [c for c in CASES if c.values[0] == "exec"])
def test_an_exec_option_round_trips_through_the_store_and_rerun(command: str, keyword: str, tmp_path) -> None:
    from bakeoff.api import rerun_keywords
    from bakeoff.api.scripts import resolve_reference

    typed = ExecSettings.from_options(**{keyword: _from_the_command_line(command, keyword)})
    assert typed == ExecSettings.from_options(**{keyword: EXEC_OPTIONS[keyword].example})  # CLI == API
    assert typed != ExecSettings.from_options()
    reference, as_written = resolve_reference(typed)  # as exec_script resolves it
    stored = run_settings(typed, argv=["--steps", "3"], workdir=str(tmp_path), reference=reference.spec,
                          as_written=as_written)  # fmt: skip
    assert sorted(stored["exec"]) == STORED_EXEC_KEYS  # the versioned format's names, which older releases read
    run = make_run("s1", "2026-01-01T00:00:00+00:00", environment(), (target_result("cpu"),),
                   spec="script:train.py --steps 3", settings=stored)  # fmt: skip
    store = Store.open(tmp_path / "kb.db")
    store.save_run(dataclasses.replace(run, workload={**run.workload, "details": {"script": "train.py"}}))
    keywords = rerun_keywords(store.get_run("s1"))["exec"]
    assert (keywords["script"], keywords["args"], keywords["workdir"]) == ("train.py", ["--steps", "3"], str(tmp_path))
    again = ExecSettings.from_options(**{k: v for k, v in keywords.items() if k in EXEC_OPTIONS})
    # the reference comes back as resolved: the device it ran on, or the script's own when it ran as written
    assert again == dataclasses.replace(typed, reference=None if as_written else reference.spec)
    assert getattr(again, keyword) == getattr(typed, keyword) or keyword == "reference"


@pytest.mark.parametrize(("command", "keyword"), [c for c in CASES if c.values[0] == "serve"])
def test_a_serve_option_round_trips_through_the_store_and_rerun(command: str, keyword: str, tmp_path) -> None:
    from bakeoff.api import rerun_keywords

    needs = {"slo": ("p90<=1s",)} if keyword in ("search", "peak") else {}  # a search needs an objective
    typed = ServeSettings.from_options(**{keyword: _from_the_command_line(command, keyword)}, **needs)
    assert typed == ServeSettings.from_options(**{keyword: SERVE_OPTIONS[keyword].example}, **needs)  # CLI == API
    assert typed != ServeSettings.from_options(**needs)
    stored = serve_run_settings(typed, command="python app.py --port {port}", reference=typed.reference or "cpu")
    run = make_run("v1", "2026-01-01T00:00:00+00:00", environment(), (target_result("cpu"),),
                   spec="service:python app.py --port {port}", settings=stored)  # fmt: skip
    store = Store.open(tmp_path / "kb.db")
    store.save_run(dataclasses.replace(run, workload={**run.workload, "kind": "service"}))
    keywords = rerun_keywords(store.get_run("v1"))["serve"]
    assert keywords["command"] == "python app.py --port {port}"
    again = ServeSettings.from_options(**{k: v for k, v in keywords.items() if k in SERVE_OPTIONS})
    if keyword == "traffic":  # stored by its absolute path, so that a rerun from elsewhere finds it
        assert again.traffic == str((Path.cwd() / typed.traffic).resolve())
    elif keyword == "reference":
        assert again.reference == typed.reference
    else:
        assert again == dataclasses.replace(typed, reference="cpu") and getattr(again, keyword) == getattr(
            typed, keyword
        )


@pytest.mark.parametrize(("command", "keyword"), [c for c in CASES if c.values[0] == "dist"])
def test_a_dist_option_round_trips_through_the_store_and_rerun(command: str, keyword: str, tmp_path) -> None:
    from bakeoff.api import rerun_keywords
    from bakeoff.distributed.record import dist_run
    from bakeoff.scenarios.dist import DistResult
    from bakeoff.target.spec import parse_target

    typed = read_options(DIST_OPTIONS, {keyword: _from_the_command_line(command, keyword)}, "dist")
    assert typed == read_options(DIST_OPTIONS, {keyword: DIST_OPTIONS[keyword].example}, "dist")  # CLI == API
    assert typed != read_options(DIST_OPTIONS, {}, "dist")
    run = dist_run(DistResult("collectives", "cpu", "collectives"), parse_target("cpu"), typed)
    store = Store.open(tmp_path / "kb.db")
    store.save_run(run)
    keywords = rerun_keywords(store.get_run(run.run_id))["dist"]
    assert (keywords.pop("workload"), keywords.pop("on")) == ("collectives", "cpu")
    assert keywords == typed


@pytest.mark.parametrize(("command", "keyword"), [c for c in CASES if c.values[0] == "sweep"])
def test_a_sweep_option_round_trips_through_the_store_and_a_resume(command: str, keyword: str, tmp_path) -> None:
    from bakeoff.sweep.population import Population
    from bakeoff.sweep.run import _settings, create_sweep
    from bakeoff.target.spec import parse_target

    typed = sweep_keywords(**{keyword: _from_the_command_line(command, keyword)})
    assert typed == sweep_keywords(**{keyword: SWEEP_OPTIONS[keyword].example})  # CLI == API
    population = Population("test", "model", "a list", ("arch:llama",), None, "2026-01-01T00:00:00+00:00")
    store = Store.open(tmp_path / "kb.db")
    ran = [
        _settings(store.get_sweep(create_sweep(store, population, [parse_target("cpu")], options).id))
        for options in (typed, sweep_keywords())
    ]  # what a resume runs each cell with, read back from the stored sweep
    assert ran[0] == TrialSettings.from_options(**{**typed, "checks": ["greedy", *typed["checks"]]})
    assert ran[0] != ran[1]


def test_a_value_the_table_refuses_is_refused_by_the_command_line_before_anything_runs() -> None:
    from bakeoff.errors import SpecError

    for command, keyword, bad in (("exec", "capture", "nocolon"), ("exec", "map_devices", "9x"), ("sweep", "env", "A")):
        option = COMMANDS[command][0][keyword]
        with pytest.raises((SpecError, click.BadParameter)):
            cli.commands[command].make_context(command, [option.flag, bad, *COMMANDS[command][1]])


def test_a_sweep_stores_only_what_its_table_gives(tmp_path) -> None:
    from bakeoff.errors import SpecError
    from bakeoff.settings.sweep import STORED_KEYWORDS
    from bakeoff.sweep.population import Population
    from bakeoff.sweep.run import create_sweep
    from bakeoff.target.spec import parse_target

    every = sweep_keywords(**{keyword: option.example for keyword, option in SWEEP_OPTIONS.items()})
    assert set(every) <= set(STORED_KEYWORDS) and set(sweep_keywords(timing="none")) == set(STORED_KEYWORDS)
    population = Population("test", "model", "a list", ("arch:llama",), None, "2026-01-01T00:00:00+00:00")
    store = Store.open(tmp_path / "kb.db")
    with pytest.raises(SpecError, match="a sweep does not take 'isolate'"):
        create_sweep(store, population, [parse_target("cpu")], {**every, "isolate": False})
    assert store.list_sweeps(5) == []  # refused before anything is stored
