"""``python -m bakeoff ARGS`` in a process forked from a warm one (see ``bakeoff_cli`` in
tests/conftest.py): what runs is what ``python -m bakeoff`` runs (``runpy`` sets ``sys.argv[0]``
and ``__main__`` as ``-m`` does), with its standard input from a file."""

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
