"""The small grammar shared by workload, target, scenario and check specs:
``HEAD?key=value&key=value``; and the typed options scenarios and checks declare."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bakeoff.errors import SpecError

__all__ = ["MOST_INT", "Option", "parse_bool", "split_options", "typed_options"]

#: The largest whole number an option takes unless it declares its own maximum.
MOST_INT = 2**31 - 1

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


@dataclass(frozen=True)
class Option:
    """An option a scenario or a check declares: its type (int, float, str or bool), its
    default, and (for numbers) the smallest and largest values allowed; ``help`` says what it
    does. A whole number with no ``maximum`` declared stops at :data:`MOST_INT`, what C and
    SQLite take."""

    kind: type
    default: Any
    minimum: int | None = None
    help: str = ""
    maximum: float | None = None

    @property
    def most(self) -> float | None:
        """The largest value allowed (None: any finite number)."""
        if self.maximum is not None:
            return self.maximum
        return MOST_INT if self.kind is int else None


def typed_options(head: str, given: Mapping[str, str], declared: Mapping[str, Option], what: str, text: str) -> dict:
    """Every declared option's value: the default, or the text given read as its type.

    Args:
        head: the scenario's or check's name, for examples in error hints.
        given: the options as written (from :func:`split_options`).
        declared: the options it has.
        what: "scenario" or "check", for messages.
        text: the spec as the user wrote it.

    Raises:
        SpecError: an option it does not have, a value of the wrong type, or outside its minimum
            and maximum.
    """
    unknown = sorted(set(given) - set(declared))
    if unknown:
        allowed = ", ".join(declared) or "none"
        raise SpecError(f"{what} {head!r} has no option {unknown[0]!r}", hint=f"options: {allowed}")
    options = {}
    for key, option in declared.items():
        options[key] = option.default
        if key not in given:
            continue
        try:
            options[key] = _typed(option.kind, given[key])
        except ValueError:
            kind = {int: "a whole number", bool: "true or false", float: "a number"}.get(option.kind, "a value")
            example = option.default if option.default is not None else 16
            raise SpecError(
                f"{what} option {key}={given[key]!r} in {text!r} is not {kind}", hint=f"e.g. {head}?{key}={example}"
            ) from None
        if option.minimum is not None and options[key] < option.minimum:
            raise SpecError(
                f"{what} option {key} in {text!r} must be at least {option.minimum}",
                hint=f"e.g. {head}?{key}={max(option.minimum, option.default or 0)}",
            )
        most = option.most
        if most is not None and options[key] > most:
            example = option.default if option.default is not None else option.minimum or 1
            shown = int(most) if option.kind is int else f"{most:g}"
            said = f"{what} option {key} in {text!r} must be at most {shown}"
            raise SpecError(said, hint=f"e.g. {head}?{key}={example}")
    return options


def _typed(kind: type, text: str) -> Any:
    """An option's value from its text: ``true``/``false`` (also yes/no, on/off, 1/0) for a
    flag, where ``bool("false")`` would be true; a float that is not finite is refused."""
    if kind is bool:
        if text.lower() not in (*_TRUE, *_FALSE):
            raise ValueError(text)
        return text.lower() in _TRUE
    value = kind(text)
    if kind is float and value - value != 0:  # nan, inf
        raise ValueError(text)
    return value
