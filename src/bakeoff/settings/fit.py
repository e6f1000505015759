"""``bakeoff fit``'s settings, each written once: its keyword, flag, default, check and help.
:data:`FIT_OPTIONS` is the table the command line and :func:`bakeoff.api.fit` take theirs from."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from bakeoff.errors import SpecError
from bakeoff.settings.bounds import TIMEOUT
from bakeoff.settings.option import Option, texts

__all__ = ["FIT_OPTIONS", "fits_text", "parse_fits", "parse_memory", "size_bytes"]

_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,
          "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}  # fmt: skip


def size_bytes(text: str) -> int | None:
    """``16GiB``, ``500MB``, ``4KiB``, ``2e9`` (bytes) -> bytes; None for anything else (a
    number beyond 2**62 bytes too)."""
    found = _SIZE.match(str(text))
    if found is None:
        return None
    number = float(found.group(1)) * _UNITS[(found.group(2) or "B").lower()]
    return int(number) if math.isfinite(number) and number <= 2**62 else None


def parse_memory(text: str) -> int:
    """``16GiB``, ``500MB``, ``2e9`` (bytes) -> bytes.

    Raises:
        SpecError: anything else, or less than one mebibyte.
    """
    if _SIZE.match(str(text)) is None:
        raise SpecError(f"--memory {text!r} is not a size", hint="e.g. --memory 16GiB or --memory 500MB")
    size = size_bytes(text)
    if size is None:
        raise SpecError(f"--memory {text!r} is not a device's size", hint="e.g. --memory 16GiB or --memory 500MB")
    if size < 1024**2:
        raise SpecError(f"--memory {text!r} is under a mebibyte", hint="give the device's capacity, e.g. 16GiB")
    return size


def _check_grid(value: str, given: Mapping[str, Any]) -> str:
    from bakeoff.settings.grid import parse_grid

    return parse_grid(value).text


def parse_fits(text: str) -> tuple[int, int | None]:
    """``fits batch=32&seq=2048`` -> ``(32, 2048)`` (``seq`` may be left out).

    Raises:
        SpecError: anything else.
    """
    from bakeoff.settings.grid import parse_grid

    head, _, point = str(text).strip().partition(" ")
    hint = "e.g. --require 'fits batch=32&seq=2048'"
    if head != "fits" or not point.strip():
        raise SpecError(f"requirement {text!r} is not 'fits batch=B&seq=S'", hint=hint)
    try:
        grid = parse_grid(point.strip())
    except SpecError as exc:
        raise SpecError(f"requirement {text!r}: {exc.message}", hint=hint) from None
    if len(grid.batches) != 1 or len(grid.seqs) > 1:
        raise SpecError(f"requirement {text!r} names more than one point", hint=hint)
    return grid.batches[0], grid.seqs[0] if grid.seqs else None


def fits_text(point: tuple[int, int | None]) -> str:
    return f"fits batch={point[0]}" + (f"&seq={point[1]}" if point[1] is not None else "")


def _check_requirements(value: str | Iterable[str], given: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(fits_text(parse_fits(text)) for text in texts(value)))  # one verdict per point


def _check_memory(value: str | int | None, given: Mapping[str, Any]) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1024**2):
        return value
    return parse_memory(str(value))


#: Every setting of ``bakeoff fit``, in the order its value is checked.
FIT_OPTIONS: dict[str, Option] = {
    option.keyword: option
    for option in (
        Option(
            "grid",
            "--grid",
            "batch=1,2,4,...,64",
            "The points to predict: batch sizes and sequence lengths, e.g. 'batch=1,2,4,...,64&seq=128,...,4096' "
            "('...' continues the progression).",
            _check_grid,
            metavar="GRID",
            example="batch=1,2&seq=16,32",
        ),
        Option("training", "--training", False, "Predict a training step (AdamW) instead of inference."),
        Option(
            "optimizer",
            "--optimizer",
            "adamw",
            "The optimiser of a training step.",
            choices=("adamw", "sgd"),
            example="sgd",
        ),
        Option(
            "memory",
            "--memory",
            None,
            "The device's capacity, e.g. 16GiB (default: what the device reports; the host's memory for cpu "
            "and the test device).",
            _check_memory,
            metavar="SIZE",
            example="2GiB",
        ),
        Option(
            "requirements",
            "--require",
            (),
            "A point that must fit, e.g. 'fits batch=32&seq=2048' (repeatable); predicted with the grid and, with "
            "probes, measured on the target.",
            _check_requirements,
            metavar="'fits batch=B&seq=S'",
            multiple=True,
            example=["fits batch=2&seq=16"],
        ),
        Option(
            "probes",
            "--predict-only",
            True,
            "Calibrate with up to two real steps on the target and verify the edge with one more.",
            flag_help="Predict only: no step runs on the target.",
            example=False,
        ),
        Option(
            "timeout_s",
            "--timeout",
            600.0,
            "Seconds for the prediction and for each probe.",
            bounds=TIMEOUT,
            example=120.0,
        ),
    )
}
