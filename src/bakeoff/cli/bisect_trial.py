"""One trial of a bisection, in a process of its own (see :mod:`bakeoff.runner.bisect`):
``python -m bakeoff.cli.bisect_trial PLAN`` runs :func:`bakeoff.api.trial` with the plan's
keywords and prints ``run RUN_ID``."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(plan_file: str) -> None:
    import os

    from bakeoff import api
    from bakeoff.runner.bisect import PARENT_ENV

    parent = os.environ.pop(PARENT_ENV, "")
    if parent.isdigit():
        from bakeoff.launch.process import die_with_parent

        die_with_parent(int(parent))

    plan = json.loads(Path(plan_file).read_text())
    run = api.trial(**plan["keywords"], db=plan["db"])
    print(f"run {run.run_id}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
