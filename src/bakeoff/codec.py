"""One codec for every frozen value: a dataclass to plain JSON data and back, by its type hints.

A value class declares nothing but its fields. Tuples are written as lists and read back as
tuples (``tuple[float, ...]`` reads JSON integers as floats), nested value classes and mappings
of them round-trip, ``X | None`` reads ``null`` as None (``null`` for a field that cannot be None is refused). A
value of the wrong kind is refused
with a TypeError naming the field (a number where a string belongs, a string where a list
does, ``true`` where a number does); a field hinted ``Any`` takes anything. A class may list read-only
properties in ``DERIVED``: they are written beside the fields for readers of the JSON (a
latency's percentiles, say) and ignored when reading, since they follow from the fields.

Compatibility rule for every document built from these values: **adding is compatible,
readers ignore what they do not know; removing a key or changing its meaning bumps the
document's version.** :func:`decode` therefore skips keys its class does not have (a document
written by a newer bakeoff), and fills fields the document lacks with their defaults (a
document written before the field was added).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any, TypeVar

__all__ = ["Value", "decode", "decode_fields", "encode"]

T = TypeVar("T")


def encode(value: Any) -> Any:
    """``value`` as JSON data: dataclasses as objects (with their ``DERIVED`` properties),
    tuples and lists as lists, mappings with their values encoded."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        data = {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
        for name in getattr(type(value), "DERIVED", ()):
            data[name] = encode(getattr(value, name))
        return data
    if isinstance(value, (tuple, list)):
        return [encode(v) for v in value]
    if isinstance(value, Mapping):
        return {k: encode(v) for k, v in value.items()}
    return value


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def decode_fields(cls: type, data: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    """The fields of the dataclass ``cls`` that ``data`` has, read by their type hints.

    Raises:
        TypeError: ``data`` is not a mapping, or a field's value is not of its hinted kind (the
            message names the field, as ``where`` or the class's name, then the field's path).
    """
    where = where or cls.__name__
    if not isinstance(data, Mapping):
        raise TypeError(f"{where} should be an object, not {_kind(data)}")
    hints = _hints(cls)
    return {
        f.name: _read(hints[f.name], data[f.name], f"{where}.{f.name}")
        for f in dataclasses.fields(cls)
        if f.name in data
    }


def decode(cls: type[T], data: Mapping[str, Any], where: str = "") -> T:
    """An instance of the dataclass ``cls`` from :func:`encode`'s data (see the module's rule)."""
    return cls(**decode_fields(cls, data, where))


class Value:
    """``to_dict``/``from_dict`` for a frozen value dataclass, through this module's codec."""

    def to_dict(self) -> dict[str, Any]:
        return encode(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Any:
        return decode(cls, data)


#: What each primitive hint accepts (JSON has no separate bool and int: a bool is not an int here).
_PRIMITIVES: dict[Any, tuple[type, ...]] = {str: (str,), int: (int,), float: (int, float), bool: (bool,)}
_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )


def _read(hint: Any, value: Any, where: str) -> Any:
    """``value`` read as ``hint``; raises TypeError, naming ``where``, when it is of another kind
    (``null`` where the hint does not admit None, too)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if value is None:
        if hint is Any or (origin in (typing.Union, types.UnionType) and type(None) in args):
            return None
        raise TypeError(f"{where} should be {_NAMES.get(hint, 'given')}, not null")
    if origin in (typing.Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        return _read(kinds[0], value, where) if len(kinds) == 1 else value
    if origin is tuple:
        if not isinstance(value, (list, tuple)):  # a string is a sequence, but not a list
            raise TypeError(f"{where} should be a list, not {_kind(value)}")
        item = args[0] if args else Any
        if (len(args) == 2 and args[1] is Ellipsis) or len(args) == 1:
            if item in _PRIMITIVES:  # the common long case (raw samples): no path built per item
                return tuple(v if type(v) is item else _read(item, v, f"{where}[{i}]") for i, v in enumerate(value))
            return tuple(_read(item, v, f"{where}[{i}]") for i, v in enumerate(value))
        return tuple(_read(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=False)))
    if origin in (dict, Mapping) or origin is typing.Mapping:
        if not isinstance(value, Mapping):
            raise TypeError(f"{where} should be an object, not {_kind(value)}")
        item = args[1] if len(args) == 2 else Any
        return {k: _read(item, v, f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return decode(hint, value, where)
    accepted = _PRIMITIVES.get(hint)
    if accepted is not None:
        if isinstance(value, bool) is not (hint is bool) or not isinstance(value, accepted):
            raise TypeError(f"{where} should be {_NAMES[hint]}, not {_kind(value)} {value!r:.40}")
        if hint is float:
            return float(value)
    return value
