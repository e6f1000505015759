"""Running trials: one target per job, in this process or isolated in a worker process."""

from __future__ import annotations

from bakeoff.runner.job import TargetJob
from bakeoff.runner.session import run_target

__all__ = ["TargetJob", "run_target"]
