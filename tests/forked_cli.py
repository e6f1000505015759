"""``python -m bakeoff ARGS`` (:func:`main`) or ``python SCRIPT ARGS`` (:func:`script`) in a
process forked from a warm one (see ``bakeoff_cli`` and ``python_script`` in tests/conftest.py):
what runs is what ``python -m bakeoff`` runs (``runpy`` sets ``sys.argv[0]`` and ``__main__`` as
``-m`` does) or what ``python SCRIPT`` runs, with its standard input from a file."""

from __future__ import annotations

import os
import runpy
import sys
import tempfile


def main(argv: list[str]) -> int:
    """``argv``: the file that becomes standard input, then bakeoff's arguments."""
    stdin, *args = argv
    opened = os.open(stdin, os.O_RDONLY)
    os.dup2(opened, 0)
    os.close(opened)
    tempfile.tempdir = None  # TMPDIR is the run's own, read again
    sys.argv = ["bakeoff", *args]
    runpy.run_module("bakeoff", run_name="__main__", alter_sys=True)
    return 0


def script(argv: list[str]) -> int:
    """``argv``: the file that becomes standard input, then the script and its arguments."""
    stdin, path, *args = argv
    opened = os.open(stdin, os.O_RDONLY)
    os.dup2(opened, 0)
    os.close(opened)
    tempfile.tempdir = None
    sys.argv = [path, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(path))  # as python SCRIPT puts its directory first
    runpy.run_path(path, run_name="__main__")
    return 0
