"""One setting of a command, declared once, and what every table of them shares.

A command's table (:data:`~bakeoff.settings.trial.TRIAL_OPTIONS`,
:data:`~bakeoff.settings.exec.EXEC_OPTIONS`, :data:`~bakeoff.settings.sweep.SWEEP_OPTIONS`)
maps each keyword to its :class:`Option`: its ``bakeoff`` flag, default, check, help and an
example value. The command line builds its options from the table
(:func:`bakeoff.cli.common.setting_option`), the keyword API takes its defaults and docstring
from it (:func:`describe_options`), :func:`read_options` checks what a user gave against it,
and the test of every option's round trip (through the knowledge base and ``rerun``) is
generated from it.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from bakeoff.settings.bounds import Bounds

__all__ = [
    "Check",
    "Option",
    "check_device_map",
    "check_reference_device",
    "describe_options",
    "number_check",
    "read_options",
    "spec_list",
    "texts",
]

#: A setting's check: the value given and every value given (for combinations) -> the field's value.
Check = Callable[[Any, Mapping[str, Any]], Any]


@dataclass(frozen=True)
class Option:
    """One setting as users see it.

    ``keyword`` is its keyword in the API (and the name it is stored under, where the command's
    stored format is not older than the table); ``flag`` its command-line option (for an on/off
    setting, the flag that turns it away from its default); ``help`` says what it does, for
    ``--help`` and the API docstring alike, except that ``flag_help`` describes a flag that
    turns a setting off, and ``keyword_note`` adds what only the keyword accepts. ``check``
    turns a value into the field's (None: taken as it is); ``bounds`` are a numeric setting's
    (the command line refuses a value outside them as it reads it). ``multiple``: the flag may
    be repeated (its values are a list); ``choices``: the only values it takes.

    ``example`` is a valid value other than the default, as a user would type it (a list of
    texts for a repeatable flag); the round-trip test gives it to every command. ``repeated``
    is False for a setting a ``rerun`` decides anew (``refresh_baseline``), True for one it
    repeats.
    """

    keyword: str
    flag: str
    default: Any
    help: str
    check: Check | None = None
    flag_help: str = ""
    keyword_note: str = ""
    metavar: str | None = None
    bounds: Bounds | None = None
    multiple: bool = False
    choices: tuple[str, ...] | None = None
    example: Any = None
    repeated: bool = True


def read_options(options: Mapping[str, Option], given: Mapping[str, Any], what: str) -> dict[str, Any]:
    """Every setting of ``options``: the value ``given``, else its default, each checked in the
    table's order (so the first bad one is the one reported), a check seeing every value given.

    Raises:
        TypeError: a keyword that is not in the table (``what`` names the kind of setting).
        SpecError: a value its check refuses.
    """
    unknown = sorted(set(given) - set(options))
    if unknown:
        raise TypeError(f"unknown {what} {unknown[0]!r}")
    values = {name: given.get(name, option.default) for name, option in options.items()}
    for name, option in options.items():
        if option.bounds is not None and option.check is None and values[name] is not None:
            values[name] = _within(option, values[name])  # as the command line reads it
        if option.check is not None:
            values[name] = option.check(values[name], values)
    return values


def _within(option: Option, value: Any) -> Any:
    """A numeric setting given as a keyword (or read back from a stored run) held to its bounds,
    as the command line holds a typed one.

    Raises:
        SpecError: not a number of the setting's kind, or outside its bounds.
    """
    from bakeoff.errors import SpecError

    bounds = option.bounds
    assert bounds is not None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SpecError(f"{option.flag} must be a number, got {value!r}", hint=f"e.g. {option.flag} {bounds.example:g}")
    if bounds.kind is int and not (math.isfinite(value) and float(value).is_integer()):
        raise SpecError(
            f"{option.flag} must be a whole number, got {value!r}", hint=f"e.g. {option.flag} {bounds.example:g}"
        )
    return bounds.kind(bounds.check(value, option.flag))


def describe_options(options: Mapping[str, Option], indent: str, width: int = 100) -> str:
    """The ``Args:`` lines of ``options`` for a Google-style docstring, each line after the
    first starting with ``indent``."""
    lines = []
    for option in options.values():
        text = f"{option.keyword}: {option.help}" + (f" {option.keyword_note}" if option.keyword_note else "")
        lines += textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent + "    ")
    return "\n".join(lines).removeprefix(indent)


def texts(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """A setting given as one text or several (a repeatable flag's, or a keyword's list): the
    texts, in order (None: none)."""
    return () if value is None else (value,) if isinstance(value, str) else tuple(value)


def spec_list(
    value: str | Iterable[str], what: str, parse: Callable[[str], Any], empty_hint: str, twice_hint: str
) -> tuple[Any, ...]:
    """Specs given as a list or comma-separated (their options never hold commas), each parsed
    by ``parse``; an empty one or a name given twice is refused with its line.

    Raises:
        SpecError: an empty spec, one ``parse`` refuses, or a name given twice.
    """
    from bakeoff.errors import SpecError

    given = texts(value)
    parts = [part.strip() for text in given for part in text.split(",")]
    if any(not part for part in parts):
        raise SpecError(f"empty {what} in {', '.join(repr(t) for t in given)}", hint=empty_hint)
    parsed = tuple(parse(part) for part in parts)
    seen = [spec.name for spec in parsed]
    twice = next((name for name in seen if seen.count(name) > 1), None)
    if twice is not None:
        raise SpecError(f"{what} {twice!r} given twice", hint=twice_hint)
    return parsed


def number_check(bounds: Bounds, flag: str) -> Check:
    """The check of a number within ``bounds`` (a whole number where they are of ints), named
    ``flag`` in its refusal."""
    from bakeoff.errors import SpecError

    def check(value: Any, given: Mapping[str, Any]) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SpecError(f"{flag} {value!r}", hint=f"give {bounds.words}")
        bounds.check(value, flag)  # nan, an infinity, out of bounds
        if bounds.kind is int and value != int(value):
            raise SpecError(f"{flag} {value!r}", hint=f"give {bounds.words}")
        return bounds.kind(value)

    return check


def check_reference_device(value: str | None, given: Mapping[str, Any]) -> str | None:
    """``--reference``: a device (no compile backend, dtype or mixed precision), or None; a
    plugin's device (PrivateUse1) too."""
    from bakeoff.errors import SpecError
    from bakeoff.target.detect import extra_devices
    from bakeoff.target.spec import KNOWN_DEVICES, parse_target

    if value is None:
        return None
    known = value.partition(":")[0].partition("+")[0].partition("?")[0] in KNOWN_DEVICES
    target = parse_target(value, () if known else extra_devices())
    if target.is_compiled or target.dtype or target.amp:
        raise SpecError(f"--reference {target.spec}", hint="the reference is a device: cpu, cuda, xpu...")
    return value


def check_device_map(value: str | Iterable[str], given: Mapping[str, Any]) -> tuple[str, ...]:
    """``--map``: the device types remapped (``cuda``, or ``cuda=emu`` naming the targets'
    device), repeated or comma-separated."""
    from bakeoff.errors import SpecError

    entries = tuple(part.strip() for text in texts(value) for part in text.split(",") if part.strip())
    sources = [entry.partition("=")[0].strip() for entry in entries]
    if not sources or any(not s.isidentifier() for s in sources):
        raise SpecError(f"--map {','.join(entries) or '(empty)'}", hint="name the device types it uses: cuda")
    return entries
