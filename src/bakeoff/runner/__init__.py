"""Running trials: one target per job, in this process or isolated in a worker process.

``TargetJob`` and ``run_target`` are imported when first asked for: the process of every
``bakeoff exec`` script run (:mod:`bakeoff.runner.script_worker`) lives in this package and needs
neither, and importing them (the checks' and scenarios' registries) cost it a quarter of a second.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TargetJob", "run_target"]


def __getattr__(name: str) -> Any:
    if name == "TargetJob":
        from bakeoff.runner.job import TargetJob

        return TargetJob
    if name == "run_target":
        from bakeoff.runner.session import run_target

        return run_target
    raise AttributeError(f"module 'bakeoff.runner' has no attribute {name!r}")
