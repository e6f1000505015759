from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
MODELS = FIXTURES / "models.py"


def py_workload(function: str, **options: str) -> str:
    """A ``py:`` spec for a factory in tests/fixtures/models.py."""
    query = "&".join(f"{k}={v}" for k, v in options.items())
    return f"py:{MODELS}:{function}" + (f"?{query}" if query else "")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "bakeoff.db"
