"""``--nodes NODE_RANK/NNODES@HOST:PORT``: this machine's place in a job across machines.

The value of ``bakeoff exec --nodes``, parsed once: what torchrun's static rendezvous takes as
``--node-rank``, ``--nnodes``, ``--master-addr`` and ``--master-port``. How a run uses it is
:mod:`bakeoff.runner.script_ranks`'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bakeoff.errors import SpecError

__all__ = ["Nodes"]

_NODES = re.compile(r"^(?P<rank>\d+)/(?P<count>\d+)@(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>\d+)$")


@dataclass(frozen=True)
class Nodes:
    """This machine's place in a job across machines: node ``rank`` of ``count``, meeting at
    ``host``:``port`` (torchrun's static rendezvous: ``--node-rank``, ``--nnodes``,
    ``--master-addr``, ``--master-port``)."""

    rank: int
    count: int
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Nodes:
        """``NODE_RANK/NNODES@HOST:PORT`` (an IPv6 host in brackets).

        Raises:
            SpecError: a malformed value, a node rank not below the count, a port out of range.
        """
        found = _NODES.match(text.strip())
        hint = "e.g. --nodes 0/2@10.0.0.1:29500 on the first machine, --nodes 1/2@10.0.0.1:29500 on the second"
        if found is None:
            raise SpecError(f"--nodes {text!r} is not NODE_RANK/NNODES@HOST:PORT", hint=hint)
        rank, count, port = int(found["rank"]), int(found["count"]), int(found["port"])
        if count < 1 or rank >= count:
            raise SpecError(f"--nodes {text!r}: the node rank must be below the number of nodes", hint=hint)
        if not 1 <= port <= 65535:
            raise SpecError(f"--nodes {text!r}: the port must be 1 to 65535", hint=hint)
        return cls(rank, count, found["host"].strip("[]"), port)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.rank}/{self.count}@{host}:{self.port}"
