"""The small grammar shared by workload and target specs: ``HEAD?key=value&key=value``."""

from __future__ import annotations

import re

from bakeoff.errors import SpecError

__all__ = ["parse_bool", "split_options"]

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


def split_options(text: str, what: str) -> tuple[str, dict[str, str]]:
    """Split ``head?k=v&k2=v2`` into ``("head", {"k": "v", "k2": "v2"})``.

    Args:
        text: the spec as the user wrote it.
        what: "workload" or "target", used in error messages.

    Raises:
        SpecError: on an empty head, a pair without ``=``, a bad key or a repeated key.
    """
    head, sep, query = text.strip().partition("?")
    if not head:
        raise SpecError(f"empty {what} spec {text!r}", hint=f"see `bakeoff {what}s --help`")
    options: dict[str, str] = {}
    if sep and not query:
        raise SpecError(
            f"{what} spec {text!r} ends with '?' but has no options", hint="write options as ?key=value&key=value"
        )
    for pair in query.split("&") if query else []:
        key, eq, value = pair.partition("=")
        if not eq or not _KEY.match(key) or value == "":
            raise SpecError(
                f"malformed option {pair!r} in {what} spec {text!r}", hint="write options as ?key=value&key=value"
            )
        if key in options:
            raise SpecError(f"option {key!r} given twice in {what} spec {text!r}", hint="give each option once")
        options[key] = value
    return head, options


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def parse_bool(value: str, key: str, spec: str) -> bool:
    """Read a boolean option value (true/false, yes/no, on/off, 1/0)."""
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise SpecError(f"option {key}={value!r} in {spec!r} is not a boolean", hint="use true or false")
