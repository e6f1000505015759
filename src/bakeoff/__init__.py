"""bakeoff: can this PyTorch application move to another accelerator backend, and at what cost?

The keyword API lives in :mod:`bakeoff.api` and is re-exported here lazily, so that
``import bakeoff`` (and ``bakeoff --help``) stays fast and does not import torch.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from bakeoff.version import __version__

_API = (
    "baseline",
    "bisect",
    "compare",
    "coverage",
    "db_status",
    "db_upgrade",
    "decide",
    "demo",
    "dist",
    "exec_script",
    "export_runs",
    "fit",
    "history",
    "import_runs",
    "note",
    "notes_and_tags",
    "plan",
    "regressions",
    "remedies",
    "report",
    "rerun",
    "serve_service",
    "show",
    "sweep",
    "sweeps",
    "tag",
    "targets",
    "trial",
    "workloads",
)

__all__ = ["BakeoffError", "__version__", "capture", *_API]


def __getattr__(name: str) -> Any:
    if name == "capture":  # light: a script calls it, and it does nothing outside bakeoff exec
        from bakeoff.script.capture import capture

        return capture
    if name in _API:
        from bakeoff import api

        return getattr(api, name)
    if name == "BakeoffError":
        from bakeoff.errors import BakeoffError

        return BakeoffError
    raise AttributeError(f"module 'bakeoff' has no attribute {name!r}")


class _Package(types.ModuleType):
    """Keeps the API functions when a subpackage of the same name is imported.

    Importing a submodule binds it as an attribute of its parent package: ``import
    bakeoff.report.html`` would replace the :func:`bakeoff.report` function with the
    ``bakeoff.report`` subpackage. The subpackage stays reachable through ``sys.modules`` and
    ``from bakeoff.report import ...``; the name on the package keeps meaning the function.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _API and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
