"""bakeoff: can this PyTorch application move to another accelerator backend, and at what cost?

The keyword API lives in :mod:`bakeoff.api` and is re-exported here lazily, so that
``import bakeoff`` (and ``bakeoff --help``) stays fast and does not import torch.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_API = (
    "baseline",
    "compare",
    "db_status",
    "db_upgrade",
    "demo",
    "export_runs",
    "history",
    "import_runs",
    "note",
    "notes_and_tags",
    "regressions",
    "report",
    "rerun",
    "show",
    "tag",
    "targets",
    "trial",
    "workloads",
)

__all__ = ["BakeoffError", "__version__", *_API]


def __getattr__(name: str) -> Any:
    if name in _API:
        from bakeoff import api

        return getattr(api, name)
    if name == "BakeoffError":
        from bakeoff.errors import BakeoffError

        return BakeoffError
    raise AttributeError(f"module 'bakeoff' has no attribute {name!r}")
