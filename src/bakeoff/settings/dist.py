"""``bakeoff dist``'s settings, each written once: its keyword, flag, default, check and help.
:data:`DIST_OPTIONS` is the table the command line and :func:`bakeoff.api.dist` take theirs from."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bakeoff.errors import SpecError
from bakeoff.settings.bounds import TIMEOUT, Bounds
from bakeoff.settings.fit import size_bytes
from bakeoff.settings.option import Option, texts

__all__ = ["COLLECTIVES_ONLY", "DIST_OPTIONS", "MAX_RANKS", "TRAINING_ONLY", "check_applies"]

#: The largest world size one machine's ranks are started for.
MAX_RANKS = 64
#: The largest message checked: each rank holds its expectation in float64 beside its buffers.
MAX_SIZE = 64 * 1024**2
#: The dtypes a collective is checked at.
DTYPES = ("float32", "bfloat16", "float16")


def _items(value: Any) -> list[str]:
    return [part.strip() for text in texts(value) for part in str(text).split(",") if part.strip()]


def _check_ranks(value: Any, given: Mapping[str, Any]) -> tuple[int, ...]:
    hint = "e.g. --ranks 2,4,8"
    found = []
    for item in _items(value) if not isinstance(value, int) else [str(value)]:
        if not (item.isascii() and item.isdigit()) or not 2 <= int(item) <= MAX_RANKS:
            raise SpecError(f"--ranks {item!r} is not a world size from 2 to {MAX_RANKS}", hint=hint)
        found.append(int(item))
    if not found:
        raise SpecError("--ranks names no world size", hint=hint)
    return tuple(sorted(set(found)))


def _check_sizes(value: Any, given: Mapping[str, Any]) -> tuple[int, ...]:
    hint = "e.g. --sizes 4KiB,1MiB"
    found = []
    for item in _items(value) if not isinstance(value, int) else [str(value)]:
        size = size_bytes(item)
        if size is None:
            raise SpecError(f"--sizes {item!r} is not a message size", hint=hint)
        if not 16 <= size <= MAX_SIZE:
            raise SpecError(f"--sizes {item!r}: a message is checked from 16 B to 64 MiB", hint=hint)
        found.append(size)
    if not found:
        raise SpecError("--sizes names no message size", hint=hint)
    return tuple(sorted(set(found)))


def _chosen(value: Any, flag: str, choices: tuple[str, ...], noun: str, example: str) -> tuple[str, ...]:
    """The names ``value`` gives (a list, or comma-separated), each one of ``choices``, in order,
    each once.

    Raises:
        SpecError: a name that is not one of them, or none at all.
    """
    found = _items(value)
    for item in found:
        if item not in choices:
            raise SpecError(f"{flag} {item!r} is not one of {', '.join(choices)}", hint=f"e.g. {flag} {example}")
    if not found:
        raise SpecError(f"{flag} names no {noun}", hint=f"e.g. {flag} {example}")
    return tuple(dict.fromkeys(found))


def _check_dtypes(value: Any, given: Mapping[str, Any]) -> tuple[str, ...]:
    return _chosen(value, "--dtypes", DTYPES, "dtype", "float32,bfloat16")


_MODES = ("ddp", "fsdp")


def _check_modes(value: Any, given: Mapping[str, Any]) -> tuple[str, ...]:
    return _chosen(value, "--mode", _MODES, "mode", "ddp,fsdp")


#: Every setting of ``bakeoff dist``, in the order its value is checked.
DIST_OPTIONS: dict[str, Option] = {
    option.keyword: option
    for option in (
        Option(
            "ranks",
            "--ranks",
            "2",
            "The world sizes to run, smallest first: each a job of its own (a ladder finds 'works at 2, hangs at 8').",
            _check_ranks,
            metavar="N[,N...]",
            example="2,3",
        ),
        Option(
            "sizes",
            "--sizes",
            "4KiB,1MiB",
            "Message sizes of each collective, as nccl-tests counts them (the all_reduce buffer, the gathered output); "
            "collectives only.",
            _check_sizes,
            metavar="SIZE[,SIZE...]",
            example="1KiB,64KiB",
        ),
        Option(
            "dtypes",
            "--dtypes",
            "float32,bfloat16",
            "The dtypes each collective is checked at (collectives only: a workload trains in the target's dtype).",
            _check_dtypes,
            metavar="DTYPE[,DTYPE...]",
            example="float32",
        ),
        Option(
            "iterations",
            "--iterations",
            20,
            "Timed calls of each collective per size and dtype, after a warm one (collectives only).",
            bounds=Bounds(int, 1, 100_000, 50),
            example=5,
        ),
        Option(
            "modes",
            "--mode",
            "ddp",
            "How a workload trains across the ranks: ddp (every rank a replica), fsdp (FSDP2: every rank a shard), "
            "or both.",
            _check_modes,
            metavar="ddp|fsdp[,...]",
            example="fsdp",
        ),
        Option(
            "steps",
            "--steps",
            3,
            "Optimiser steps (SGD) of a workload's DDP or FSDP job, each rank on its own slice of the global batch.",
            bounds=Bounds(int, 1, 1000, 3),
            example=2,
        ),
        Option(
            "lr",
            "--lr",
            0.01,
            "The learning rate of a workload's DDP or FSDP steps.",
            bounds=Bounds(float, 0, 10, 0.01, low_open=True),
            example=0.05,
        ),
        Option(
            "hang_s",
            "--hang-timeout",
            60.0,
            "Seconds without any rank entering a new collective before the job is a hang (every rank is stopped).",
            bounds=Bounds(float, 0, 86_400, 60.0, low_open=True, unit="of seconds"),
            example=30.0,
        ),
        Option(
            "timeout_s",
            "--timeout",
            600.0,
            "Seconds each world size's job may run once its ranks started.",
            bounds=TIMEOUT,
            example=120.0,
        ),
    )
}

#: The settings of the collectives check alone, and those of a workload's training alone.
COLLECTIVES_ONLY = ("sizes", "dtypes", "iterations")
TRAINING_ONLY = ("modes", "steps", "lr")


def check_applies(workload: str, given: Any) -> None:
    """Refuse a setting ``given`` on the command line that the run would not use: a message size
    for a workload's training, a training step for the collectives check.

    Raises:
        SpecError: naming the first such flag and what it applies to.
    """
    collectives = workload == "collectives"
    unused = TRAINING_ONLY if collectives else COLLECTIVES_ONLY
    for keyword in unused:
        if keyword in given:
            flag = DIST_OPTIONS[keyword].flag
            if collectives:
                hint = f"drop {flag}, or name a workload: bakeoff dist arch:llama {flag} ..."
                raise SpecError(f"{flag} applies to a workload's DDP or FSDP training, not to the collectives check",
                                hint=hint)  # fmt: skip
            hint = f"drop {flag}, or run bakeoff dist collectives {flag} ..."
            raise SpecError(f"{flag} applies to the collectives check, not to a workload's training", hint=hint)
