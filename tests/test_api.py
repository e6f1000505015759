"""The keyword API as README.md and docs/python-api.md show it."""

from __future__ import annotations

import subprocess
import sys


def _runs_clean(code: str) -> None:
    """``code`` in a fresh interpreter (no module pytest imported) ends by printing ok."""
    result = subprocess.run([sys.executable, "-c", code + "print('ok')\n"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_api_functions_stay_callable_after_subpackages_are_imported():
    code = (
        "import bakeoff, bakeoff.target, bakeoff.workload, bakeoff.results\n"
        "info = bakeoff.targets(); bakeoff.targets()\n"
        "assert any(d['name'] == 'cpu' and d['available'] for d in info['devices'])\n"
        "assert 'llama' in bakeoff.workloads()['architectures']\n"
    )
    _runs_clean(code)


def test_every_public_name_is_callable_after_every_subpackage_is_imported():
    code = (
        "import importlib, pkgutil, bakeoff\n"
        "for info in pkgutil.walk_packages(bakeoff.__path__, 'bakeoff.'):\n"
        "    if not info.name.startswith(('bakeoff.cli', 'bakeoff.__main__')):\n"
        "        importlib.import_module(info.name)\n"
        "import bakeoff.report.html\n"
        "from bakeoff.report import terminal\n"
        "assert type(terminal).__name__ == 'module'\n"
        "bad = [n for n in bakeoff._API if type(getattr(bakeoff, n)).__name__ != 'function']\n"
        "assert not bad, bad\n"
        "assert bakeoff.report is bakeoff.api.report\n"
    )
    _runs_clean(code)
