"""What one launch of a script leaves behind: ``result.json`` (:class:`LaunchResult`) and its reader.

:class:`LaunchResult` is what :func:`bakeoff.script.launch.launch` wrote, in the format
:data:`FORMAT` (:func:`read_result` refuses a newer one); :class:`ScriptError` is the exception
that ended the run, as data; :data:`RESULT` and :data:`CAPTURES` are the names of the two files
a launch writes to its output directory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from bakeoff.codec import Value
from bakeoff.errors import BakeoffError
from bakeoff.script.ledger import Rewrite

__all__ = ["CAPTURES", "FORMAT", "RESULT", "LaunchResult", "ScriptError", "read_result"]

#: The version of ``result.json``; :func:`read_result` refuses a newer one.
FORMAT = 1
RESULT = "result.json"
CAPTURES = "captures.safetensors"


@dataclass(frozen=True)
class ScriptError(Value):
    """The exception that ended a run, as data.

    ``phase`` says whose it was: ``script`` (the script raised), ``remap`` (the remap could not
    be set up, refused a numerics-changing rewrite under ``--strict``, or had no counterpart for
    something the script asked: a :class:`~bakeoff.errors.RemapError`), or ``launch`` (bakeoff
    itself failed before or after the script, e.g. writing the captures).
    """

    type: str
    message: str
    traceback: str
    phase: str


@dataclass(frozen=True)
class LaunchResult(Value):
    """What one launch did: ``result.json``. ``ledger`` holds the remap's rewrites (empty without
    ``--map``), ``numerics`` the APIs of those flagged as changing numerics, ``captures`` the number
    of calls captured per name (``loss`` included), ``captures_missing`` the ``--capture`` names
    never called, ``capture_errors`` the first reason a ``--capture`` value could not be kept;
    ``compile`` the ``--compile`` backend and options (empty: eager);
    ``capture_modules`` the ``--capture-modules`` patterns, ``modules_unmatched`` those no called
    module matched, ``module_calls_capped`` the matching calls past the cap, not recorded;
    ``capture_times`` the seconds from the script's start to each captured call, per name;
    ``inputs_read`` the files under the working directory the script opened for reading
    (:mod:`bakeoff.script.inputs`), ``inputs_truncated`` whether there were more; ``devices``
    how many captured tensors were on each device type as they were captured (before their copy
    to the host): where the run's work was really done, whatever its side is called."""

    format: int
    exit_code: int
    error: ScriptError | None
    wall_s: float
    startup_s: float
    ledger: tuple[Rewrite, ...] = ()
    numerics: tuple[str, ...] = ()
    captures: dict[str, int] = field(default_factory=dict)
    captures_missing: tuple[str, ...] = ()
    capture_errors: dict[str, str] = field(default_factory=dict)
    strict: bool = False
    mapping: dict[str, str] = field(default_factory=dict)
    seed: int = 0
    losses: bool = True
    argv: tuple[str, ...] = ()
    capture_modules: tuple[str, ...] = ()
    modules_unmatched: tuple[str, ...] = ()
    module_calls_capped: int = 0
    compile: str = ""
    capture_times: dict[str, tuple[float, ...]] = field(default_factory=dict)
    inputs_read: tuple[str, ...] = ()
    inputs_truncated: bool = False
    devices: dict[str, int] = field(default_factory=dict)


def read_result(out: str | Path) -> LaunchResult:
    """The :class:`LaunchResult` a launch wrote to the directory ``out``.

    Raises:
        BakeoffError: there is none (the process ended without unwinding: killed, crashed,
            ``os._exit``), or it is in a newer format than this bakeoff reads.
    """
    path = Path(out) / RESULT
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise BakeoffError(
            f"the script's run left no {path}",
            hint="it ended without unwinding: killed (timeout, out of memory), crashed, or os._exit",
        ) from None
    if data.get("format", 0) > FORMAT:
        raise BakeoffError(
            f"{path} is in format {data['format']}; this bakeoff reads up to {FORMAT}", "upgrade bakeoff"
        )
    return LaunchResult.from_dict(data)
