"""The knowledge base: every run, result, raw sample, failure, baseline and environment."""

from __future__ import annotations

from bakeoff.store.db import DEFAULT_DB, RunSummary, Store, resolve_db_url

__all__ = ["DEFAULT_DB", "RunSummary", "Store", "resolve_db_url"]
