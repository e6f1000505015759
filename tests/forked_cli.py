"""``python -m bakeoff ARGS`` (:func:`main`), ``python SCRIPT ARGS`` (:func:`script`) or
``python -c CODE ARGS`` (:func:`code`) in a process forked from a warm one (see ``bakeoff_cli``,
``python_script`` and ``python_code`` in tests/conftest.py): what runs is what ``python -m
bakeoff`` runs (``runpy`` sets ``sys.argv[0]`` and ``__main__`` as ``-m`` does), what ``python
SCRIPT`` runs or what ``python -c`` runs, with its standard input from a file."""

from __future__ import annotations

import os
import runpy
import sys
import tempfile
import types


def _stdin(path: str) -> None:
    opened = os.open(path, os.O_RDONLY)
    os.dup2(opened, 0)
    os.close(opened)
    tempfile.tempdir = None  # TMPDIR is the run's own, read again


def main(argv: list[str]) -> int:
    """``argv``: the file that becomes standard input, then bakeoff's arguments."""
    stdin, *args = argv
    _stdin(stdin)
    sys.argv = ["bakeoff", *args]
    runpy.run_module("bakeoff", run_name="__main__", alter_sys=True)
    return 0


def script(argv: list[str]) -> int:
    """``argv``: the file that becomes standard input, then the script and its arguments."""
    stdin, path, *args = argv
    _stdin(stdin)
    sys.argv = [path, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(path))  # as python SCRIPT puts its directory first
    runpy.run_path(path, run_name="__main__")
    return 0


def code(argv: list[str]) -> int:
    """``argv``: the file that becomes standard input, then the code and its arguments."""
    stdin, source, *args = argv
    _stdin(stdin)
    sys.argv = ["-c", *args]
    sys.path[0] = ""  # as python -c puts the working directory first
    module = types.ModuleType("__main__")
    sys.modules["__main__"] = module
    exec(compile(source, "<string>", "exec"), module.__dict__)
    return 0
