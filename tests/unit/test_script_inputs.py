"""The files a script reads from its working directory, and the fingerprint they go into."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from bakeoff.runner.script import input_digests, script_workload
from bakeoff.script.inputs import InputFiles


def test_files_opened_for_reading_under_the_root_are_recorded_and_nothing_else(tmp_path: Path) -> None:
    root = tmp_path / "work"
    (root / "data").mkdir(parents=True)
    (root / "config.json").write_text('{"lr": 0.1}')
    np.save(root / "data" / "x.npy", np.arange(3))
    (root / "helper_mod_for_inputs.py").write_text("VALUE = 3\n")
    (tmp_path / "outside.txt").write_text("not ours")
    (root / "train.py").write_text("")
    inputs = InputFiles(root, leave_out=(str(root / "train.py"),)).install()
    sys.path.insert(0, str(root))
    try:
        json.loads((root / "config.json").read_text())
        np.load(root / "data" / "x.npy")
        import helper_mod_for_inputs  # noqa: F401  (imported through io.open_code)

        (tmp_path / "outside.txt").read_text()
        (root / "train.py").read_text()  # the script itself: its source is fingerprinted already
        (root / "written.txt").write_text("out")  # written, not read
        with open(root / "config.json", "a"):  # appending is not reading
            pass
    finally:
        inputs.stop()
        sys.path.remove(str(root))
        sys.modules.pop("helper_mod_for_inputs", None)
    (root / "late.txt").write_text("x")
    (root / "late.txt").read_text()  # after stop: not recorded
    assert inputs.paths() == ("config.json", "data/x.npy", "helper_mod_for_inputs.py")
    assert not inputs.truncated


def test_the_fingerprint_follows_the_inputs_content_and_is_unchanged_without_inputs(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    (tmp_path / "config.json").write_text('{"lr": 0.1}')
    plain = script_workload(script, ["--steps", "3"])
    first = script_workload(script, ["--steps", "3"], inputs=input_digests(tmp_path, ["config.json"]))
    (tmp_path / "config.json").write_text('{"lr": 0.2}')
    second = script_workload(script, ["--steps", "3"], inputs=input_digests(tmp_path, ["config.json"]))
    assert first["fingerprint"] != second["fingerprint"]  # the seeded change: another config
    assert first["details"]["inputs"] != second["details"]["inputs"]
    # the control: no inputs read gives the fingerprint of before, and a file the run wrote
    # (absent from the working directory) is not an input
    assert script_workload(script, ["--steps", "3"], inputs={})["fingerprint"] == plain["fingerprint"]
    assert "inputs" not in plain["details"] and input_digests(tmp_path, ["out/preds.npy"]) == {}
