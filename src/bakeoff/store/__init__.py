"""The knowledge base: every run, result, raw sample, failure, baseline and environment."""

from __future__ import annotations

from bakeoff.store.connection import DEFAULT_DB, resolve_db_url
from bakeoff.store.db import RunSummary, Store

__all__ = ["DEFAULT_DB", "RunSummary", "Store", "resolve_db_url"]
