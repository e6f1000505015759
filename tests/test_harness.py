"""The suite's own process harness (tests/conftest.py, tests/forked_cli.py): a ``python -c`` run
forked from the worker's warm process sees what a fresh interpreter sees (its name, arguments,
module path and working directory), and is forked, not started afresh, where it can be."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import python_code

CODE = """
import json, os, sys
print("noise first")
print(json.dumps({"name": __name__, "argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(),
                  "parent": os.getppid(), "main": sys.modules["__main__"].__dict__ is globals()}))
"""


def test_python_code_forked_sees_what_a_fresh_interpreter_sees() -> None:
    fresh = subprocess.run([sys.executable, "-c", CODE, "a b", "--c"], capture_output=True, text=True, timeout=120)
    forked = python_code(CODE, "a b", "--c", timeout=120)
    assert fresh.returncode == forked.returncode == 0, (fresh.stderr, forked.stderr)
    assert fresh.stdout.splitlines()[0] == forked.stdout.splitlines()[0] == "noise first"
    seen, expected = json.loads(forked.stdout.splitlines()[-1]), json.loads(fresh.stdout.splitlines()[-1])
    assert expected["parent"] == os.getpid() and seen.pop("parent") != os.getpid()  # forked from the warm server
    expected.pop("parent")
    assert seen == expected == {"name": "__main__", "argv": ["-c", "a b", "--c"], "path0": "", "cwd": os.getcwd(),
                                "main": True}  # fmt: skip


def test_python_code_forked_exits_with_the_codes_exit_status_and_keeps_its_stderr() -> None:
    ran = python_code("import sys; print('said', file=sys.stderr); sys.exit(3)", timeout=120)
    assert ran.returncode == 3 and "said" in ran.stderr
