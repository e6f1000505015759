"""``python -m bakeoff.script.launch``: a team's script run once, unchanged, in a fresh process,
remapped; whatever happens, ``result.json`` says what (the ledger, the captures, the error and its
phase) and the process exits with the script's code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from bakeoff.script.capture import LOSS, Captures
from bakeoff.script.launch import CAPTURES, RESULT, LaunchResult, read_result

SRC = Path(__file__).resolve().parents[2] / "src"

TRAIN = textwrap.dedent('''\
    """A CUDA-style training script, as a team writes it: nothing in it knows bakeoff."""
    import argparse
    import json
    import sys

    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--generator", choices=["cuda", "none"], default="cuda")
    opts = parser.parse_args()


    def evaluate(model, x):
        with torch.no_grad():
            return model(x).mean()


    def unused():
        return 0


    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).cuda()  # @cuda
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator(device="cuda") if opts.generator == "cuda" else None  # @generator
    x = torch.randn(16, 8, device="cuda", generator=gen)  # @randn
    y = torch.randn(16, 1, device="cuda", generator=gen)
    for step in range(opts.steps):
        optimizer.zero_grad()
        with torch.autocast("cuda", dtype=torch.bfloat16):  # @autocast
            pred = model(x)
        loss = torch.nn.functional.mse_loss(pred.float(), y)
        loss.backward()
        optimizer.step()
        torch.cuda.synchronize()  # @synchronize
        print(f"loss {loss.item()!r}")
    first, second = evaluate(model, x), evaluate(model, x)
    print(json.dumps({"argv": sys.argv, "name": __name__, "path0": sys.path[0], "evaluated": first.item()}))
''')

FAIL = textwrap.dedent("""\
    import sys


    def inner():
        raise ValueError("boom from the script")


    mode = sys.argv[1]
    if mode == "raise":
        inner()
    elif mode == "exit":
        print("exiting")
        sys.exit(3)
    elif mode == "unmapped":
        import torch

        torch.cuda.get_device_properties(0)
""")


def _site(marker: str) -> str:
    """``train.py:LINE`` of the line of TRAIN marked ``# @marker``."""
    (line,) = [i for i, text in enumerate(TRAIN.splitlines(), 1) if text.endswith(f"# @{marker}")]
    return f"train.py:{line}"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("work")
    (path / "train.py").write_text(TRAIN)
    (path / "fail.py").write_text(FAIL)
    return path


def _launch(workdir: Path, out: str, *argv: str) -> tuple[subprocess.CompletedProcess[str], dict | None]:
    """The launcher in a fresh process, in ``workdir`` (as the runner starts it), and its result.json."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
    env.pop("BAKEOFF_EMU", None)
    ran = subprocess.run(
        [sys.executable, "-m", "bakeoff.script.launch", "--out", out, *argv],
        cwd=workdir,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    result = workdir / out / RESULT
    return ran, json.loads(result.read_text()) if result.exists() else None


@pytest.fixture(scope="module")
def on_cpu(workdir: Path) -> tuple[subprocess.CompletedProcess[str], dict]:
    ran, result = _launch(
        workdir,
        "cpu",
        *("--map", "cuda=cpu", "--capture", "train:evaluate", "--capture", "train:unused"),
        *("--", "train.py", "--steps", "3"),
    )
    assert ran.returncode == 0, ran.stderr
    assert result is not None
    return ran, result


def test_a_cuda_style_training_script_runs_on_the_host_with_each_rewrite_counted_at_its_line(on_cpu) -> None:
    _, result = on_cpu
    assert result["format"] == 1 and result["exit_code"] == 0 and result["error"] is None
    assert result["mapping"] == {"cuda": "cpu"} and result["strict"] is False
    rewrites = {r["api"]: r for r in result["ledger"]}
    expected = {
        "Tensor.cuda": (4, "cuda"),  # two Linear layers: weight and bias each
        "torch.Generator": (1, "generator"),
        "torch.randn": (2, "randn"),
        'torch.autocast("cuda")': (3, "autocast"),
        "torch.cuda.synchronize": (3, "synchronize"),
    }
    assert {api: (r["count"], r["site"]) for api, r in rewrites.items()} == {
        api: (count, _site(marker)) for api, (count, marker) in expected.items()
    }
    # the control of the emu case below: the host's autocast honours bfloat16, nothing is flagged
    assert result["numerics"] == [] and not any(r["numerics"] for r in result["ledger"])
    assert rewrites['torch.autocast("cuda")']["reason"] == "-> autocast('cpu', dtype=torch.bfloat16, enabled=True)"
    assert result["wall_s"] > 0 and result["startup_s"] > 0


def test_the_losses_and_a_functions_returns_are_captured_call_by_call_and_round_trip(on_cpu, workdir: Path) -> None:
    ran, result = on_cpu
    assert result["captures"] == {LOSS: 3, "train:evaluate": 2}
    assert result["captures_missing"] == ["train:unused"] and result["capture_errors"] == {}
    stored = Captures.from_safetensors(workdir / "cpu" / CAPTURES)
    printed = [float(line.split()[1]) for line in ran.stdout.splitlines() if line.startswith("loss ")]
    assert [v.item() for v in stored[LOSS]] == printed and len(printed) == 3
    assert printed[2] < printed[0]  # it trained
    evaluated = json.loads(ran.stdout.splitlines()[-1])["evaluated"]
    assert [v.item() for v in stored["train:evaluate"]] == [evaluated, evaluated]
    assert read_result(workdir / "cpu") == LaunchResult.from_dict(result)


def test_each_captured_call_has_its_time_from_the_scripts_start(on_cpu) -> None:
    _, result = on_cpu
    times = result["capture_times"]
    assert {name: len(calls) for name, calls in times.items()} == result["captures"]  # one time per call
    for calls in times.values():
        assert calls == sorted(calls) and len(set(calls)) == len(calls)  # monotonic, per name
    # every loss came before the evaluations (the script's order), all within the script's run
    assert max(times[LOSS]) < min(times["train:evaluate"])
    everything = [t for calls in times.values() for t in calls]
    assert 0 < min(everything) and max(everything) <= result["wall_s"]


def test_the_script_runs_as_main_with_its_own_argv_and_directory(on_cpu, workdir: Path) -> None:
    ran, result = on_cpu
    facts = json.loads(ran.stdout.splitlines()[-1])
    assert facts["argv"] == ["train.py", "--steps", "3"] and facts["name"] == "__main__"
    assert facts["path0"] == str(workdir.resolve())
    assert result["argv"] == ["train.py", "--steps", "3"]
    assert ran.stderr == ""  # the launcher says nothing of its own


@pytest.mark.skipif(torch.cuda.is_available(), reason="the script as written runs on a machine with CUDA")
def test_without_a_map_the_script_runs_as_written(workdir: Path) -> None:
    ran, result = _launch(workdir, "written", "--", "train.py")
    assert ran.returncode == 1 and result is not None
    assert result["mapping"] == {} and result["ledger"] == []
    assert result["error"]["phase"] == "script" and "CUDA" in result["error"]["message"]


@pytest.mark.emu
def test_on_the_emu_device_the_autocast_it_cannot_honour_is_flagged(workdir: Path) -> None:
    ran, result = _launch(workdir, "emu", "--map", "cuda=emu", "--", "train.py", "--generator", "none")
    assert ran.returncode == 0, ran.stderr
    assert result is not None and result["captures"] == {LOSS: 3}
    assert result["numerics"] == ['torch.autocast("cuda") (not honoured)']
    (autocast,) = [r for r in result["ledger"] if r["numerics"]]
    assert autocast["count"] == 3 and autocast["site"] == _site("autocast")
    assert "the region runs in float32, not torch.bfloat16" in autocast["reason"]


@pytest.mark.emu
def test_strict_refuses_the_autocast_on_emu_and_still_writes_the_result(workdir: Path) -> None:
    ran, result = _launch(workdir, "strict", "--strict", "--map", "cuda=emu", "--", "train.py", "--generator", "none")
    assert ran.returncode == 1 and result is not None
    assert result["exit_code"] == 1 and result["strict"] is True
    error = result["error"]
    assert error["type"] == "RemapError" and error["phase"] == "remap"
    assert error["message"].startswith(f'torch.autocast("cuda") (not honoured) at {_site("autocast")} would change')
    assert result["numerics"] == ['torch.autocast("cuda") (not honoured)']  # the refused rewrite is in the ledger
    assert result["captures"] == {} and len(Captures.from_safetensors(workdir / "strict" / CAPTURES)) == 0
    assert "RemapError" in ran.stderr.splitlines()[-1]


def test_a_script_that_raises_exits_1_with_its_traceback_in_the_result(workdir: Path) -> None:
    ran, result = _launch(workdir, "raise", "--", "fail.py", "raise")
    assert ran.returncode == 1 and result is not None and result["exit_code"] == 1
    error = result["error"]
    assert (error["type"], error["message"], error["phase"]) == ("ValueError", "boom from the script", "script")
    frames = [line.strip() for line in error["traceback"].splitlines() if line.strip().startswith("File ")]
    assert frames == ['File "fail.py", line 10, in <module>', 'File "fail.py", line 5, in inner']  # no launcher's
    assert ran.stderr.strip() == error["traceback"].strip()  # printed as Python would
    assert len(Captures.from_safetensors(workdir / "raise" / CAPTURES)) == 0


def test_a_script_that_exits_with_a_code_is_that_code_and_no_error(workdir: Path) -> None:
    ran, result = _launch(workdir, "exit", "--", "fail.py", "exit")
    assert ran.returncode == 3 and ran.stdout == "exiting\n"
    assert result is not None and result["exit_code"] == 3 and result["error"] is None


def test_a_cuda_attribute_the_remap_cannot_answer_is_a_remap_error(workdir: Path) -> None:
    ran, result = _launch(workdir, "unmapped", "--map", "cuda=cpu", "--", "fail.py", "unmapped")
    assert ran.returncode == 1 and result is not None
    error = result["error"]
    assert (error["type"], error["phase"]) == ("UnmappedAttribute", "remap")
    assert error["message"].startswith("torch.cuda.get_device_properties has no counterpart on cpu")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["fail.py"], "expected -- before the script"),
        (["--"], "no script after --"),
        (["--", "missing.py"], "no such script: missing.py"),
        (["--map", "cuda", "--", "fail.py"], "malformed --map 'cuda': expected SOURCE=DEVICE"),
        (["--map", "cuda=CPU", "--", "fail.py"], "malformed --map 'cuda=CPU'"),
        (["--capture", "postprocess", "--", "fail.py"], "malformed --capture 'postprocess'"),
        (["--capture-modules", "", "--", "fail.py"], "malformed --capture-modules '': an empty pattern"),
        (["--seed", "x", "--", "fail.py"], "argument --seed: invalid int value: 'x'"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(workdir: Path, argv: list[str], says: str) -> None:
    ran, result = _launch(workdir, "bad", *argv)
    assert ran.returncode == 2 and result is None and ran.stdout == ""
    (line,) = ran.stderr.splitlines()
    assert line.startswith("python -m bakeoff.script.launch: ") and says in line


CALLS = textwrap.dedent("""\
    import threading

    import launch_helper


    class Model:
        def forward(self, x):
            return x * 2


    def post(x):
        if x < 0:
            raise ValueError("negative")
        return [x, x + 1]


    def steps():
        yield 1
        yield 2
        return 99


    alias = post
    Model().forward(3)
    alias(1)  # through another name
    try:
        post(-1)  # raises: no return value
    except ValueError:
        pass
    list(steps())  # yields are not returns; its return is
    worker = threading.Thread(target=post, args=(5,))
    worker.start()
    worker.join()
    launch_helper.double(4)
    from launch_helper import double

    double(5)
""")


def test_a_captured_function_is_seen_however_it_is_called_and_only_when_it_returns(tmp_path: Path) -> None:
    """In this process (the keyword API): an alias, a method, a thread, another module; a call that
    raises records nothing, a generator records its return value."""
    from bakeoff.script.launch import launch

    (tmp_path / "calls.py").write_text(CALLS)
    (tmp_path / "launch_helper.py").write_text("def double(x):\n    return 2 * x\n")
    specs = ["calls:post", "calls:Model.forward", "calls:steps", "launch_helper:double", "calls:never"]
    argv, path0, trace = list(sys.argv), sys.path[0], sys.gettrace()
    try:
        result = launch(str(tmp_path / "calls.py"), out=tmp_path / "out", capture=specs)
    finally:
        sys.modules.pop("launch_helper", None)
    assert (sys.argv, sys.path[0], sys.gettrace()) == (argv, path0, trace)  # put back
    assert result.exit_code == 0 and result.error is None, result.error
    stored = Captures.from_safetensors(tmp_path / "out" / CAPTURES)
    assert {name: stored[name] for name in stored.names()} == {
        "calls:Model.forward": [6],
        "calls:post": [[1, 2], [5, 6]],
        "calls:steps": [99],
        "launch_helper:double": [8, 10],
    }
    assert result.captures_missing == ("calls:never",)
    assert read_result(tmp_path / "out") == result


def test_the_around_hook_is_entered_around_the_script_and_left_whatever_it_does(workdir: Path, monkeypatch) -> None:
    """A higher layer's audit is entered after the setup, sees the script's exit, may write to
    the output directory, and its own work is not the script's wall time."""
    from contextlib import contextmanager

    from bakeoff.script.launch import launch

    seen: list[str] = []

    @contextmanager
    def around(out: Path):
        seen.append(f"enter {sys.argv[0]}")
        try:
            yield
        except SystemExit as exc:
            seen.append(f"exit {exc.code}")
            raise
        finally:
            (out / "extra.json").write_text("{}")

    monkeypatch.chdir(workdir)
    result = launch("fail.py", ["exit"], out=workdir / "around", around=around)
    assert result.exit_code == 3 and result.error is None
    assert seen == ["enter fail.py", "exit 3"] and (workdir / "around" / "extra.json").exists()
    assert (workdir / "around" / RESULT).exists()
