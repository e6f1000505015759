"""The CLI as a user runs it: ``python -m bakeoff ...`` in a fresh process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import bakeoff_cli, cli_in_process, py_workload

FAST = ["--samples", "5", "--min-time", "0"]


def bakeoff(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return bakeoff_cli(*args, cwd=cwd, timeout=timeout)


def test_help_ends_with_an_example_and_does_not_import_torch():
    code = (
        "import sys\nfrom bakeoff.cli.main import main\nsys.argv = ['bakeoff', 'trial', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\nprint('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "Example:" in out and "bakeoff trial 'arch:llama?layers=4'" in out
    assert out.strip().endswith("False")


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["trial", "arch:llama", "--on", "cdua"],
            "bakeoff: error: unknown device 'cdua' in target 'cdua'; valid devices here: cpu, cuda, xpu, mps, neuron "
            "(run `bakeoff targets` to see what this machine offers)",
        ),
        (
            ["trial", "arch:llama", "--on", "cpu+"],
            "bakeoff: error: malformed target 'cpu+' (expected DEVICE[:INDEX][+BACKEND][?option=value&...], e.g. cpu, "
            "cuda:1, cpu+inductor, neuron?dtype=bf16, cpu+aot_eager?dynamic=false; options: dtype, dynamic, mode, "
            "fullgraph, threads, precision, amp)",
        ),
        (
            ["trial", "arch:llama", "--on", "cpu?dtype=int3"],
            "bakeoff: error: unknown dtype 'int3' in target 'cpu?dtype=int3' (use one of fp32, bf16, fp16, fp64)",
        ),
        (
            ["trial", "arch:not_a_model"],
            "bakeoff: error: unknown architecture 'not_a_model' (run `bakeoff workloads` to list the valid names)",
        ),
        (
            ["trial", "llama"],
            "bakeoff: error: malformed workload 'llama'; expected one of: arch:<model_type>[?layers=2&hidden=64&...] - "
            "tiny random-weight Hugging Face model; hf:<directory or hub id> - a saved Hugging Face model (config + "
            "weights); py:<module or file.py>:<function> - your own factory returning (model, inputs) (run `bakeoff "
            "workloads` for the architecture names)",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, line, tmp_path, capsys):
    code, stderr = _refused(
        capsys, fresh=args[-1] == "cdua", args=[*args, "--db", str(tmp_path / "b.db")], cwd=tmp_path
    )
    assert code == 2
    assert stderr.strip().splitlines()[-1] == line
    assert "Traceback" not in stderr


def _refused(
    capsys: pytest.CaptureFixture[str], fresh: bool, args: list[str], cwd: Path | None = None
) -> tuple[int, str]:
    """(exit code, stderr) of ``bakeoff ARGS``: in a fresh process where ``fresh`` (one case of
    each kind, as a user runs it), else through the same error boundary in this one (the rest:
    a fresh process costs seconds, and parsing is the same code)."""
    if fresh:
        result = bakeoff(*args, cwd=cwd)
        return result.returncode, result.stderr
    code, _out, err = cli_in_process(capsys, *args)
    return code, err


def test_unreadable_database_is_refused_and_left_untouched(tmp_path):
    bad = tmp_path / "notes.db"
    bad.write_bytes(b"these are my notes, not a database\n" * 50)
    before = bad.read_bytes()
    result = bakeoff("history", "--db", str(bad))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"bakeoff: error: cannot open database {bad}: file is not a database "
        "(pass a bakeoff database file or a new path with --db)"
    )
    assert bad.read_bytes() == before


def test_unknown_run_id(tmp_path):
    from bakeoff.store import Store

    Store.open(tmp_path / "b.db")
    result = bakeoff("show", "nope", "--db", str(tmp_path / "b.db"))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"bakeoff: error: no run 'nope' in {tmp_path / 'b.db'} (run `bakeoff history` to list run ids)"
    )


def test_reading_commands_do_not_create_a_database(tmp_path):
    missing = tmp_path / "typo.db"
    for command in (("history",), ("show", "abc")):
        result = bakeoff(*command, "--db", str(missing))
        assert result.returncode == 2
        assert result.stderr.strip() == (
            f"bakeoff: error: no database at {missing} (check --db / BAKEOFF_DB, or run a trial first)"
        )
    assert not missing.exists()


def test_damaged_and_foreign_databases_are_refused_without_change(tmp_path):
    import sqlite3

    from bakeoff.store import Store

    damaged = tmp_path / "damaged.db"
    Store.open(damaged)
    with sqlite3.connect(damaged) as conn:
        conn.execute("UPDATE meta SET value = 'abc' WHERE key = 'schema_version'")
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    for path, message in (
        (damaged, "is damaged: invalid literal for int() with base 10: 'abc'"),
        (foreign, "is a database but not a bakeoff one (it has tables such as 'notes')"),
    ):
        before = path.read_bytes()
        result = bakeoff("history", "--db", str(path))
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert message in result.stderr
        assert path.read_bytes() == before


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--timeout", "0"],
            "bakeoff: error: timeout must be a positive number of seconds, got 0 (e.g. --timeout 900)",
        ),
        (["--samples", "0"], "bakeoff: error: samples must be at least 1, got 0 (e.g. --samples 30)"),
        (
            ["--in-process", "--timeout", "5"],
            "bakeoff: error: --timeout needs worker processes (drop --in-process, or drop --timeout)",
        ),
        (
            ["--pad-to-buckets", "auto"],
            "bakeoff: error: --pad-to-buckets needs an input profile (add --profile, e.g. 'seq=uniform(8,128)&n=50')",
        ),
        (
            ["--profile", "seq=abc"],
            "bakeoff: error: seq='abc' is not a list of integers (e.g. --profile 'seq=16,32,64', "
            "'seq=uniform(8,128)&n=50' or a .csv/.jsonl file of lengths)",
        ),
    ],
)
def test_bad_trial_options(args, line, tmp_path, capsys):
    command = ["trial", py_workload("mlp"), *args, "--db", str(tmp_path / "b.db")]
    code, stderr = _refused(capsys, fresh=args[0] == "--timeout", args=command)
    assert code == 2
    assert stderr.strip().splitlines()[-1] == line


def test_trial_json_history_show_end_to_end(tmp_path):
    db = str(tmp_path / "b.db")
    result = bakeoff(
        "trial", py_workload("mlp"), "--on", "cpu,cpu+aot_eager", "--on", "cuda", "--db", db, "--format", "json", *FAST
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["schema"] == "bakeoff.run" and doc["schema_version"] == 1
    assert len(doc["workload"]["fingerprint"]) == 16
    assert doc["environment"]["torch"].startswith("2.")
    by_target = {r["target"]: r for r in doc["results"]}
    assert set(by_target) == {"cpu", "cpu+aot_eager", "cuda"}
    for spec in ("cpu", "cpu+aot_eager"):
        r = by_target[spec]
        assert r["status"] == "ok" and r["correctness"]["verdict"] == "pass"
        assert r["correctness"]["max_abs_err"] is not None
        assert r["latency"]["samples"] == len(r["latency"]["samples_ms"]) >= 5
        assert r["latency"]["p50_ms"] <= r["latency"]["p90_ms"]
    assert by_target["cuda"]["status"] == "skipped" and by_target["cuda"]["reason"]

    history = bakeoff("history", "--db", db)
    assert doc["run_id"] in history.stdout and "mlp" in history.stdout
    shown = bakeoff("show", doc["run_id"][:5], "--db", db, "--format", "json")
    shown_doc = json.loads(shown.stdout)
    assert shown_doc["results"] == doc["results"]
    assert shown_doc["environment"] == doc["environment"]  # this run's load average and time, not the first's
    table = bakeoff("show", doc["run_id"], "--db", db)
    assert "cpu+aot_eager" in table.stdout and "pass" in table.stdout and "1.00x (ref)" in table.stdout


def test_strict_exits_1_on_a_failed_target_and_0_without(tmp_path):
    db = str(tmp_path / "b.db")
    args = ("trial", py_workload("perturbed_when_compiled"), "--on", "cpu+aot_eager", "--db", db, "--in-process", *FAST)
    loose = bakeoff(*args)
    assert loose.returncode == 0, loose.stderr
    assert "fail" in loose.stdout
    strict = bakeoff(*args, "--strict")
    assert strict.returncode == 1


def test_baseline_command(tmp_path):
    db = str(tmp_path / "b.db")
    first = bakeoff("baseline", "arch:gpt2?layers=1&hidden=32", "--db", db, "--format", "json")
    assert first.returncode == 0, first.stderr
    info = json.loads(first.stdout)
    assert info["notes"] == ["baseline created"] and info["deterministic"] is True
    assert Path(info["path"]).is_file() and info["path"].endswith(".safetensors")
    second = bakeoff("baseline", "arch:gpt2?layers=1&hidden=32", "--db", db)
    assert info["id"] in second.stdout and "reused the stored baseline" in second.stdout


def test_targets_and_workloads_list_what_is_here():
    targets = json.loads(bakeoff("targets", "--format", "json").stdout)
    devices = {d["name"]: d for d in targets["devices"]}
    assert devices["cpu"]["available"] is True
    backends = {b["name"]: b for b in targets["backends"]}
    assert backends["inductor"]["available"] and backends["aot_eager"]["available"]
    assert not any("TESTING" in name for name in backends)
    workloads = json.loads(bakeoff("workloads", "--format", "json").stdout)
    for name in ("llama", "mistral", "qwen2", "gpt2", "gpt_neox", "phi", "gemma"):
        assert workloads["architectures"][name] == "causal_lm"
    for name in ("bert", "roberta"):
        assert workloads["architectures"][name] == "base"


@pytest.mark.compile
def test_demo_runs_every_cpu_target_including_inductor(tmp_path):
    # the README's main job, as a user starts it: a fresh interpreter
    result = subprocess.run([sys.executable, "-m", "bakeoff", "demo", "--format", "json"], capture_output=True,
                            text=True, cwd=tmp_path, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    by_target = {r["target"]: r for r in doc["results"]}
    assert doc["workload"]["spec"] == "arch:llama"
    for spec in ("cpu", "cpu+aot_eager", "cpu+inductor"):
        assert by_target[spec]["status"] == "ok", by_target[spec]["error"]
        assert by_target[spec]["correctness"]["verdict"] == "pass"
    assert by_target["cpu+inductor"]["first_call_ms"] > by_target["cpu"]["first_call_ms"]
    assert (tmp_path / "bakeoff.db").is_file()  # the default database, in the working directory


def test_a_recorded_profile_over_the_length_cap_is_one_line_before_anything_runs(tmp_path):
    requests = tmp_path / "requests.csv"
    requests.write_text("length\n12\n1000000000\n")
    result = bakeoff("trial", py_workload("mlp"), "--profile", str(requests), "--db", str(tmp_path / "b.db"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"bakeoff: error: {requests} row 2 has length 1,000,000,000, above the cap of 1,000,000 "
        "(use sizes up to 1,000,000)"
    )
