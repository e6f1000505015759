"""Environment rows: one per captured environment fingerprint, shared by the runs, baselines and
sweeps made in it.

The functions take the caller's connection, so an environment goes in within the same
transaction as the record that names it. Several writers may meet the same environment at once:
its row is inserted unless it exists, and whichever writer's row won is the one used.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from bakeoff.env import Environment
from bakeoff.store import schema
from bakeoff.store.connection import insert_unless_exists

__all__ = ["environment_id", "select_environment"]


def environment_id(conn: Any, env: Environment) -> int:
    """The id of ``env``'s row, inserting it if no writer has yet."""
    table = schema.environments
    query = select(table.c.id).where(table.c.fingerprint == env.fingerprint)
    found = conn.execute(query).scalar()
    if found is not None:
        return int(found)
    # another writer may be inserting the same environment right now: let its row win
    conn.execute(
        insert_unless_exists(conn, table, ["fingerprint"]).values(
            fingerprint=env.fingerprint, captured_at=env.data.get("captured_at", ""), data=env.to_dict()
        )
    )
    return int(conn.execute(query).scalar_one())


def select_environment(conn: Any, env_id: int) -> Environment:
    """The environment stored under ``env_id``."""
    data = conn.execute(select(schema.environments.c.data).where(schema.environments.c.id == env_id)).scalar_one()
    return Environment.from_dict(data)
