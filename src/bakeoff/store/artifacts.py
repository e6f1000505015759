"""The artifact store: baseline tensor files kept beside a knowledge base.

A baseline's record in the database names its tensor file only *relative* to the artifact
store, derived from the baseline's id and fingerprint; a record that names anything else, or a
file that links outside the store or no longer matches its content hash, is never used as a
reference.
"""

from __future__ import annotations

import re
from pathlib import Path

from bakeoff.errors import StoreError
from bakeoff.hashing import file_sha256
from bakeoff.results.values import BaselineInfo

__all__ = ["baseline_name", "baseline_problem"]

_ARTIFACT_KEY = re.compile(r"[0-9A-Za-z_-]{1,64}")


def baseline_name(info: BaselineInfo) -> str:
    """Where a baseline's tensors live *inside* an artifact store, derived from its id and
    fingerprint alone: what the database and exports keep instead of a machine's path.

    Raises:
        StoreError: an id or fingerprint that could name a path outside the store.
    """
    for what, value in (("id", info.id), ("fingerprint", info.fingerprint)):
        if not _ARTIFACT_KEY.fullmatch(str(value)):
            raise StoreError(
                f"baseline {what} {str(value)[:80]!r} is not a bakeoff {what}",
                hint="only letters, digits, '-' and '_' (a file written by bakeoff has nothing else)",
            )
    return f"baselines/{info.fingerprint}/{info.id}.safetensors"


def baseline_problem(artifacts_dir: Path, info: BaselineInfo) -> str | None:
    """Why ``info``'s tensors cannot be used as a reference from ``artifacts_dir``, or None when
    they can: the file must be inside it and match the content hash recorded with it."""
    try:
        path = artifacts_dir / baseline_name(info)
    except StoreError as exc:
        return str(exc)
    if not path.is_file():
        return "has no tensor file here"
    if not path.resolve().is_relative_to(artifacts_dir.resolve()):
        return "tensor file links outside the artifact store"
    if not info.sha256:
        return "has no content hash to verify its tensor file against"
    if file_sha256(path) != info.sha256:
        return "tensor file does not match its content hash"
    return None
