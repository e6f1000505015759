"""JSON that every strict parser accepts, although results may hold infinities.

Python's ``json`` writes ``NaN`` and ``Infinity`` by default; neither is JSON, and PostgreSQL,
``jq`` and JavaScript's ``JSON.parse`` reject them. Inputs refuse non-finite numbers, but some
figures are legitimately infinite (the error of an output whose finiteness differs from the
reference). Two encodings, both strict JSON:

- :func:`dumps` / :func:`loads` round-trip: a non-finite float becomes ``{"$float": "inf"}``
  (``"-inf"``, ``"nan"``) and reads back as the float. The knowledge base and exports use it.
- :func:`for_display` replaces a non-finite float with the string ``"inf"`` (``"-inf"``,
  ``"nan"``): what ``--format json`` and the JSON report print for people and scripts.
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["dumps", "for_display", "loads"]

_TAG = "$float"


def _name(value: float) -> str:
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def _walk(value: Any, replace: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return replace(value)
    if isinstance(value, dict):
        return {k: _walk(v, replace) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_walk(v, replace) for v in value]
    return value


def _untag(obj: dict[str, Any]) -> Any:
    if len(obj) == 1 and _TAG in obj and obj[_TAG] in ("inf", "-inf", "nan"):
        return float(obj[_TAG])
    return obj


def dumps(value: Any, **kwargs: Any) -> str:
    """Strict JSON; non-finite floats tagged so that :func:`loads` restores them."""
    return json.dumps(_walk(value, lambda f: {_TAG: _name(f)}), allow_nan=False, **kwargs)


def loads(text: str | bytes) -> Any:
    """Read :func:`dumps` output (and older text with bare ``NaN``/``Infinity``, which Python accepts)."""
    return json.loads(text, object_hook=_untag)


def for_display(value: Any) -> Any:
    """``value`` with non-finite floats as the strings ``"inf"``, ``"-inf"`` or ``"nan"``."""
    return _walk(value, _name)
