"""The keyword API as the README shows it."""

from __future__ import annotations

import subprocess
import sys


def test_api_functions_stay_callable_after_subpackages_are_imported():
    code = (
        "import bakeoff, bakeoff.target, bakeoff.workload, bakeoff.results\n"
        "info = bakeoff.targets(); bakeoff.targets()\n"
        "assert any(d['name'] == 'cpu' and d['available'] for d in info['devices'])\n"
        "assert 'llama' in bakeoff.workloads()['architectures']\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
