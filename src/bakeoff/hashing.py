"""Content hashes of files, for anything that must later prove a file is the one it wrote.

A foundation module (no knowledge of workloads, targets or the store): the runner hashes a
baseline's tensor file when it writes it, the store checks the hash before using the file.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = ["file_sha256"]


def file_sha256(path: Path) -> str:
    """The hex SHA-256 of a file's bytes, read in 1 MiB blocks (tensor files can be large)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
