"""The trial settings: every check refuses a bad value with its one line and accepts a good one;
stored settings read back to the same document, from this version and from version 1; the
API, the CLI and rerun take their names and defaults from the one table."""

from __future__ import annotations

import inspect
import json
import math
from typing import Any

import pytest
from tests.kb.runs import V1_CONTENT
from tests.revisit_data import environment, make_run, target_result

from bakeoff.analysis.cost import Price
from bakeoff.checks.base import CheckSpec
from bakeoff.errors import SpecError
from bakeoff.measure.timing import TimingSettings
from bakeoff.scenarios.registry import parse_scenario
from bakeoff.settings import TRIAL_OPTIONS, TrialSettings
from bakeoff.workload.profile import InputProfile, Request

NO_WORKERS = "drop --in-process, or drop"
SCENARIO_HINT = "name one: offline, server?rate=20, generation or training (or drop --scenario)"


@pytest.mark.parametrize(
    ("given", "line"),
    [
        ({"min_samples": 0}, "samples must be at least 1, got 0 (e.g. --samples 30)"),
        (
            {"min_seconds": math.nan},
            "minimum timing seconds must be a finite number >= 0, got nan (e.g. --min-time 0.5)",
        ),
        (
            {"min_seconds": -1.0},
            "minimum timing seconds must be a finite number >= 0, got -1.0 (e.g. --min-time 0.5)",
        ),
        ({"timeout_s": 0.0}, "timeout must be a positive number of seconds, got 0 (e.g. --timeout 900)"),
        ({"timeout_s": math.inf}, "timeout must be a positive number of seconds, got inf (e.g. --timeout 900)"),
        ({"replicates": 0}, "replicates must be at least 1, got 0 (e.g. --replicates 3)"),
        (
            {"replicates": 2, "isolate": False},
            "replicates need worker processes (one process cannot show the spread between processes) "
            f"({NO_WORKERS} --replicates)",
        ),
        ({"process_spread": 1.0}, "process spread must be in [0, 1), got 1 (e.g. --process-spread 0.02)"),
        ({"process_spread": -0.1}, "process spread must be in [0, 1), got -0.1 (e.g. --process-spread 0.02)"),
        ({"max_buckets": 0}, "max buckets must be at least 1, got 0 (e.g. --max-buckets 4)"),
        (
            {"cold_compile_cache": True, "isolate": False},
            "a cold compile cache needs worker processes (in one process compilers keep warm caches) "
            f"({NO_WORKERS} --cold-compile-cache)",
        ),
        (
            {"profile": "seq=abc"},
            "seq='abc' is not a list of integers (e.g. --profile 'seq=16,32,64', 'seq=uniform(8,128)&n=50' "
            "or a .csv/.jsonl file of lengths)",
        ),
        (
            {"env": ["NOEQUALS"]},
            "environment switch 'NOEQUALS' is not KEY=VALUE (e.g. --env TORCHINDUCTOR_FREEZING=1)",
        ),
        ({"env": "1X=2"}, "environment switch '1X=2' is not KEY=VALUE (e.g. --env TORCHINDUCTOR_FREEZING=1)"),
        ({"scenarios": "offline,"}, f"empty scenario in 'offline,' ({SCENARIO_HINT})"),
        ({"scenarios": ["", "offline"]}, f"empty scenario in '', 'offline' ({SCENARIO_HINT})"),
        (
            {"scenarios": ["server", "server?rate=5"]},
            "scenario 'server' given twice (give each scenario once; compare rates with server?rate=sweep)",
        ),
        (
            {"scenarios": "nosuch"},
            "unknown scenario 'nosuch' (use one of single-stream, offline, server, generation, training)",
        ),
        (
            {"scenarios": "service"},
            "the service scenario is not run in a trial (bakeoff serve records it)",
        ),
        (
            {"scenarios": "fit"},
            "the fit scenario is not run in a trial (bakeoff fit records it)",
        ),
        (
            {"checks": "nosuch"},
            "unknown check 'nosuch' "
            "(use one of correctness, placement, compilation, determinism, greedy, training, checkpoint, quality, "
            "coldstart, localization)",
        ),
        (
            {"checks": "determinism?repeats=0"},
            "check option repeats in 'determinism?repeats=0' must be at least 1 (e.g. determinism?repeats=2)",
        ),
        (
            {"checks": "determinism?repeats=2.5"},
            "check option repeats='2.5' in 'determinism?repeats=2.5' is not a whole number "
            "(e.g. determinism?repeats=2)",
        ),
        ({"checks": "determinism?runs=3"}, "check 'determinism' has no option 'runs' (options: repeats)"),
        ({"checks": "correctness?tolerance=1"}, "check 'correctness' has no option 'tolerance' (options: none)"),
        (
            {"checks": ["determinism", "determinism?repeats=3"]},
            "check 'determinism' given twice (give each check once, with all its options)",
        ),
        ({"checks": "determinism,"}, "empty check in 'determinism,' (e.g. --check determinism?repeats=5)"),
        ({"prices": ["cpu=1/h", "cpu=2/h"]}, "'cpu' priced twice (give each target or device one price)"),
        (
            {"scenarios": "training?lr=nan"},
            "scenario option lr='nan' in 'training?lr=nan' is not a number (e.g. training?lr=0.0001)",
        ),
        (
            {"requirements": ["p90<<5"]},
            "malformed requirement 'p90<<5' (write METRIC OP VALUE[UNIT], e.g. 'p90<=50ms' or 'throughput>=200/s')",
        ),
    ],
)
def test_a_bad_value_is_refused_with_its_line(given: dict[str, Any], line: str) -> None:
    with pytest.raises(SpecError) as caught:
        TrialSettings.from_options(**given)
    assert caught.value.one_line() == line


def test_the_first_bad_value_in_table_order_is_the_one_reported() -> None:
    with pytest.raises(SpecError, match="samples must be at least 1"):
        TrialSettings.from_options(timeout_s=0.0, min_samples=0, env=["bad"])
    with pytest.raises(SpecError, match="max buckets"):  # checked before the profile is read
        TrialSettings.from_options(profile="seq=abc", max_buckets=0)


def test_a_keyword_that_is_not_a_setting_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="unknown trial setting 'cold_cache'"):
        TrialSettings.from_options(cold_cache=True)  # the stored name, not the keyword


@pytest.mark.parametrize(
    ("given", "field", "value"),
    [
        ({"min_samples": 1}, "timing", TimingSettings(min_samples=1)),
        ({"min_seconds": 0.0}, "timing", TimingSettings(min_seconds=0.0)),
        ({"timeout_s": 0.5}, "timeout_s", 0.5),
        ({"replicates": 3}, "replicates", 3),
        ({"process_spread": 0.0}, "process_spread", 0.0),
        ({"process_spread": 0.5}, "process_spread", 0.5),
        ({"max_buckets": 1}, "max_buckets", 1),
        ({"cold_compile_cache": True}, "cold_cache", True),
        ({"pad_to_buckets": "auto"}, "pad_to_buckets", "auto"),
        ({"pad_to_buckets": [64, 128]}, "pad_to_buckets", "64,128"),
        ({"pad_to_buckets": 32}, "pad_to_buckets", "32"),
        ({"profile": "seq=4,8"}, "profile", InputProfile((Request(1, 4), Request(1, 8)), "seq=4,8")),
        ({"env": "A=1=2"}, "env", (("A", "1=2"),)),
        ({"env": ["A=1", "B_2="]}, "env", (("A", "1"), ("B_2", ""))),
        (
            {"scenarios": "offline, server?rate=5"},
            "scenarios",
            (parse_scenario("offline"), parse_scenario("server?rate=5")),
        ),
        ({"checks": "determinism?repeats=5"}, "checks", (CheckSpec("determinism", {"repeats": 5}),)),
        ({"checks": ["determinism"]}, "checks", (CheckSpec("determinism", {"repeats": 2}),)),
        ({"prices": "cpu=0.36/h"}, "prices", (Price("cpu", 0.36, "", "cpu=0.36/h"),)),
        ({"requirements": "p90<=50ms"}, "requirements", ("p90<=50ms",)),
        ({"requirements": []}, "requirements", ()),
        ({"requirements": None}, "requirements", None),
        ({"interleave": False}, "interleave", False),
        ({"isolate": False}, "isolate", False),
        ({"refresh_baseline": True}, "refresh_baseline", True),
    ],
)
def test_a_good_value_is_accepted(given: dict[str, Any], field: str, value: Any) -> None:
    assert getattr(TrialSettings.from_options(**given), field) == value


def test_no_options_are_the_defaults() -> None:
    assert TrialSettings.from_options() == TrialSettings()
    assert TrialSettings().interleaved and not TrialSettings(isolate=False).interleaved
    assert TrialSettings().spread == 0.02 and TrialSettings(process_spread=0.05).spread == 0.05


def _stored(settings: TrialSettings) -> dict[str, Any]:
    """What a trial with ``settings`` stores, through JSON as the knowledge base keeps it."""
    document = settings.to_run_dict(
        reference="cpu",
        bucket_plan={"mode": "auto", "chosen": [4, 8], "waste": 0.1},
        scenarios=[*settings.scenarios, parse_scenario("server?bound=p99<=50ms")],
        requirements=["p90<=50ms"],
    )
    return json.loads(json.dumps(document))


FULL = {
    "min_samples": 7,
    "min_seconds": 0.1,
    "timeout_s": 60.0,
    "profile": "seq=4,8",
    "pad_to_buckets": "auto",
    "max_buckets": 2,
    "cold_compile_cache": True,
    "env": ["TORCHINDUCTOR_FREEZING=1", "A=b=c"],
    "scenarios": "offline?max_batch=8",
    "requirements": ["p90<=50ms"],
    "interleave": False,
    "replicates": 3,
    "process_spread": 0.05,
    "checks": "determinism?repeats=3",
    "prices": ["cpu=0.34/h", "cpu+inductor=0.5/min"],
}


@pytest.mark.parametrize("given", [{}, FULL, {"isolate": False, "process_spread": 0.0}])
def test_stored_settings_read_back_to_the_same_document(given: dict[str, Any]) -> None:
    stored = _stored(TrialSettings.from_options(**given))
    again = TrialSettings.from_dict(stored)
    assert json.loads(json.dumps(again.to_dict())) == {k: stored[k] for k in again.to_dict()}
    rewritten = again.to_run_dict(
        reference=stored["reference"],
        bucket_plan=stored["buckets"],
        scenarios=again.scenarios,
        requirements=stored["requirements"],
    )
    assert json.loads(json.dumps(rewritten)) == stored


def test_the_stored_keys_stay_the_ones_users_read() -> None:
    assert list(_stored(TrialSettings())) == [
        "timing",
        "isolate",
        "timeout_s",
        "profile",
        "pad_to_buckets",
        "max_buckets",
        "cold_cache",
        "env",
        "scenarios",
        "interleaved",
        "replicates",
        "process_spread",
        "checks",
        "prices",
        "reference",
        "reference_added",
        "buckets",
        "requirements",
    ]
    stored = _stored(TrialSettings.from_options(**FULL))
    assert (stored["pad_to_buckets"], stored["cold_cache"], stored["interleaved"]) == ("auto", True, False)
    assert stored["scenarios"] == ["single-stream", "offline?max_batch=8", "server?bound=p99<=50ms"]
    assert stored["process_spread"] == 0.05 and _stored(TrialSettings())["process_spread"] == 0.02
    assert stored["checks"] == ["determinism?repeats=3"] and _stored(TrialSettings())["checks"] == []
    # a check named with its defaults stores its name: the user's wish to see it, with nothing changed
    assert _stored(TrialSettings.from_options(checks="determinism?repeats=2"))["checks"] == ["determinism"]


def test_options_give_the_same_settings_again() -> None:
    for given in ({}, FULL, {"isolate": False, "requirements": []}):
        settings = TrialSettings.from_options(**given)
        assert TrialSettings.from_options(**settings.options(), refresh_baseline=False) == settings


def _rerun(settings: dict[str, Any]) -> dict[str, Any]:
    from bakeoff.api import rerun_keywords

    results = (target_result("cpu"), target_result("cpu+inductor"), target_result("cpu+inductor", variant="bucketed"))
    return rerun_keywords(make_run("r1", "2025-01-01T00:00:00+00:00", environment(), results, settings=settings))


V1_TIMING = {"min_samples": 5, "min_seconds": 0.0, "max_samples": 10000, "max_seconds": 60.0, "warmup_min": 2}
PROFILE = {"source": "seq=4,8", "requests": [[1, 4], [1, 8]]}


def test_version_1_runs_of_the_fixture_rerun_as_they_did() -> None:
    from bakeoff.api import rerun_keywords
    from bakeoff.results.values import RunResult

    expected = {
        "isolate": False,
        "timeout_s": 900.0,
        "min_samples": 5,
        "min_seconds": 0.0,
        "profile": None,
        "pad_to_buckets": None,
        "max_buckets": 4,
        "cold_compile_cache": False,
        "env": [],
    }
    found = {r["run_id"]: rerun_keywords(RunResult.from_dict(r)) for r in V1_CONTENT["runs"]}
    assert found == {
        "4e60f3812262": {"workload": "arch:llama", "on": ["cpu", "cpu+aot_eager"], **expected},
        "2abb464ae05d": {"workload": "arch:llama", "on": ["cpu", "cuda"], **expected},
    }


@pytest.mark.parametrize(
    ("stored", "keywords"),
    [
        (  # version 1, every setting it had away from its default
            {
                "timing": V1_TIMING,
                "isolate": True,
                "timeout_s": 120.0,
                "profile": PROFILE,
                "pad_to_buckets": "4,8",
                "max_buckets": 3,
                "cold_cache": True,
                "env": [["TORCHINDUCTOR_FREEZING", "1"], ["A", "b=c"]],
                "reference": "cpu",
                "buckets": {"mode": "4,8", "chosen": [4, 8]},
            },
            {
                "isolate": True,
                "timeout_s": 120.0,
                "min_samples": 5,
                "min_seconds": 0.0,
                "profile": InputProfile.from_dict(PROFILE),
                "pad_to_buckets": "4,8",
                "max_buckets": 3,
                "cold_compile_cache": True,
                "env": ["TORCHINDUCTOR_FREEZING=1", "A=b=c"],
            },
        ),
        (  # nothing stored: the defaults
            {},
            {
                "isolate": True,
                "timeout_s": 900.0,
                "min_samples": 30,
                "min_seconds": 0.5,
                "profile": None,
                "pad_to_buckets": None,
                "max_buckets": 4,
                "cold_compile_cache": False,
                "env": [],
            },
        ),
        (  # this version, in one process: interleaved is false there, which is no wish to go one by one
            {
                "timing": {**V1_TIMING, "round_warmup": 1},
                "isolate": False,
                "timeout_s": 900.0,
                "profile": None,
                "pad_to_buckets": None,
                "max_buckets": 4,
                "cold_cache": False,
                "env": [],
                "scenarios": ["single-stream", "offline", "server?bound=p99<=50ms"],
                "interleaved": False,
                "replicates": 1,
                "process_spread": 0.05,
                "reference": "cpu",
                "buckets": None,
                "requirements": [],
            },
            {
                "isolate": False,
                "timeout_s": 900.0,
                "min_samples": 5,
                "min_seconds": 0.0,
                "profile": None,
                "pad_to_buckets": None,
                "max_buckets": 4,
                "cold_compile_cache": False,
                "env": [],
                "scenarios": ["single-stream", "offline", "server?bound=p99<=50ms"],
                "process_spread": 0.05,
            },
        ),
    ],
)
def test_stored_settings_give_the_rerun_keywords(stored: dict[str, Any], keywords: dict[str, Any]) -> None:
    assert _rerun(stored) == {"workload": "arch:llama", "on": ["cpu", "cpu+inductor"], **keywords}


def test_a_stored_setting_no_longer_valid_is_refused_before_anything_runs() -> None:
    with pytest.raises(SpecError, match="is not KEY=VALUE"):
        _rerun({"env": [["1BAD", "x"]]})


def test_the_api_takes_its_keywords_and_defaults_from_the_table() -> None:
    from bakeoff import api

    parameters = inspect.signature(api.trial).parameters
    for name, option in TRIAL_OPTIONS.items():
        assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY, name
        assert parameters[name].default == option.default, name
        assert f"{name}: {option.help.split()[0]}" in (api.trial.__doc__ or ""), name
    assert "{settings}" not in (api.trial.__doc__ or "")


def test_the_cli_takes_its_flags_defaults_and_help_from_the_table() -> None:
    from bakeoff.cli.main import cli

    params = {p.name: p for p in cli.commands["trial"].params}
    for name, option in TRIAL_OPTIONS.items():
        param = params[name]
        assert option.flag in param.opts, name
        assert param.help is not None and param.help.startswith(option.flag_help or option.help), name
        if isinstance(option.default, bool):
            assert param.flag_value is not option.default and param.default is option.default, name
        elif name == "timeout_s":
            assert param.default is None  # not given; --in-process refuses an explicit --timeout
        else:
            assert param.default in (option.default, None if option.default == () else option.default), name


def test_a_script_run_gives_the_exec_keywords_and_one_without_its_directory_is_refused() -> None:
    import dataclasses

    from bakeoff.api import rerun_keywords
    from bakeoff.errors import SpecError

    stored = {
        "argv": ["--steps", "3"], "map": ["cuda"], "strict": True, "captures": ["train:evaluate"], "seed": 7,
        "timeout_s": 30.0, "as_written": False, "audit": False, "workdir": "/home/team/project",
    }  # fmt: skip

    def script_run(settings: dict[str, Any]) -> Any:
        run = make_run("s1", "2026-01-01T00:00:00+00:00", environment(), (target_result("cpu"), target_result("xpu")),
                       spec="script:train.py --steps 3", settings={"reference": "cpu", "exec": settings})  # fmt: skip
        return dataclasses.replace(run, workload={**run.workload, "details": {"script": "train.py"}})

    assert rerun_keywords(script_run(stored)) == {
        "exec": {
            "script": "train.py", "args": ["--steps", "3"], "on": ["xpu"], "reference": "cpu", "map_devices": ["cuda"],
            "strict": True, "capture": ["train:evaluate"], "timeout_s": 30.0, "seed": 7, "audit": False,
            "files": True, "capture_modules": ["@roots"], "repeats": 0, "nproc": 1, "nodes": "",
            "workdir": "/home/team/project",
        },
        "env": [],
    }  # fmt: skip
    as_written = rerun_keywords(script_run({**stored, "as_written": True}))["exec"]
    assert as_written["reference"] is None  # the script's own device again, where it exists
    with pytest.raises(SpecError, match="does not record the directory its script ran in"):
        rerun_keywords(script_run({k: v for k, v in stored.items() if k != "workdir"}))
