"""The cold-start check on real fresh processes and inductor's real caches: a cache shared by two
processes is reused (the clean control, through a trial); switched off, it is not (the seeded
fault); a target whose compile crashes is an error naming its process and signal. Each case compiles one linear layer
(about 2 s cold here) in two fresh processes; the CLI case runs ``bakeoff trial`` as a user would.
"""

from __future__ import annotations

import json

import pytest
from tests.conftest import FIXTURES, MODELS, cli_trial, fresh_process_json

LINEAR = f"py:{FIXTURES / 'quality_models.py'}:classifier"  # one nn.Linear: inductor calls one extern kernel
#: (name, workload, target, environment switches)
CASES = [
    ("caches switched off", LINEAR, "cpu+inductor", [["TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1"]]),
    ("crashes compiling", f"py:{MODELS}:crashes_when_compiled", "cpu+inductor", []),
]

SCRIPT = """
import json, sys
from bakeoff.checks.base import CheckContext
from bakeoff.checks.coldstart import ColdStartCheck
from bakeoff.launch.command import FreshPython
from bakeoff.runner.job import TargetJob
from bakeoff.target.spec import parse_target
out = {}
for name, spec, target_spec, env in json.loads(sys.argv[1]):
    target = parse_target(target_spec)
    job = TargetJob(workload_spec=spec, target=target, fingerprint="", baseline_path=None,
                    env=tuple(tuple(pair) for pair in env))
    context = CheckContext(job, target, None, {}, None, "float32", "float32", "", options={"timeout": 300.0},
                           processes=FreshPython())
    out[name] = ColdStartCheck().run(context).to_dict()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def verdicts() -> dict[str, dict]:
    return fresh_process_json(SCRIPT, CASES, timeout=900)


@pytest.mark.compile
def test_caches_switched_off_are_not_reused_and_say_nothing_was_looked_up(verdicts):
    value = verdicts["caches switched off"]
    assert value["verdict"] == "not_reused" and value["hits"] == 0, value["reason"]
    assert "no cache hit: the compiler looked nothing up" in value["reason"]


@pytest.mark.compile
def test_a_process_that_crashes_is_an_error_naming_it_and_its_signal(verdicts):
    value = verdicts["crashes compiling"]
    assert value["verdict"] == "error"
    assert value["reason"] == "the first fresh process died from signal SIGSEGV"


@pytest.mark.compile
def test_a_shared_cache_serves_the_second_process_of_a_trial_and_a_requirement_reads_it(tmp_path):
    """The clean control, through ``bakeoff trial``: stored, and judged by a requirement."""
    ran = cli_trial(LINEAR, "cpu+inductor", tmp_path, "--check", "coldstart", "--require", "warm_start<=10min")
    assert ran.returncode == 0, ran.stderr[-3000:]
    run = json.loads(ran.stdout)
    reference, compiled = run["results"]
    assert reference["coldstart"] is None and "compiles nothing" in reference["skipped_checks"]["coldstart"]
    value = compiled["coldstart"]
    assert value["verdict"] == "reused", value["reason"]
    assert value["hits"] == 2 and value["misses"] == 0 and value["cold_misses"] == 2  # FX graph + AOTAutograd
    assert value["cache_bytes"] > 0 and value["cache_files"] > 0 and value["cold_ms"] > 0
    assert value["reason"].endswith("; 2 cache hit(s), no miss")
    (requirement,) = compiled["requirements"]
    assert requirement["verdict"] == "met" and requirement["value"] == compiled["coldstart"]["warm_ms"]
    assert "single observation" in requirement["reason"]
