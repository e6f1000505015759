"""``bakeoff exec``'s settings, each written once: its keyword, flag, default, check and help.

:data:`EXEC_OPTIONS` is the table; ``bakeoff exec`` builds its options from it,
:func:`bakeoff.api.exec_script` takes its defaults and docstring from it, and
:meth:`ExecSettings.from_options` is the one validating constructor. A script run stores
:func:`run_settings` (the settings, with the argv, the working directory and the reference the
run resolved); :meth:`ExecSettings.from_run` reads them back for
``rerun``. The stored document keeps the names of the versioned run format, which older
releases read: the device map is stored as ``map`` (the device types the script names; a
``=TARGET`` only checked the targets' device when the run was made) and the captures as
``captures``; :func:`current_names` reads them as the keywords.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from bakeoff.errors import SpecError
from bakeoff.settings.bounds import SEED, TIMEOUT, Bounds
from bakeoff.settings.nodes import Nodes
from bakeoff.settings.option import (
    Option,
    check_device_map,
    check_reference_device,
    number_check,
    read_options,
    texts,
)

__all__ = ["EXEC_OPTIONS", "ExecSettings", "current_names", "run_settings"]

#: Timed runs a side beyond the first.
_REPEATS = Bounds(int, 0, 10_000, 5)
#: Processes a run of a torchrun-style script starts (its ranks).
_NPROC = Bounds(int, 1, 64, 2)
#: A keyword -> its name in a stored run (the versioned format's), where the two differ.
_STORED = {"map_devices": "map", "capture": "captures"}
_RENAMED = {stored: keyword for keyword, stored in _STORED.items()}


@dataclass(frozen=True)
class ExecSettings:
    """How a script runs under ``bakeoff exec`` (see :data:`EXEC_OPTIONS` for each field).

    ``reference`` None runs the reference on the script's own device where it exists here,
    else on the CPU. ``map_devices`` holds the entries as given (``cuda``, ``cuda=emu``),
    ``capture_modules`` the patterns that take effect (the default's when none were given).
    """

    reference: str | None = None
    map_devices: tuple[str, ...] = ("cuda",)
    strict: bool = False
    capture: tuple[str, ...] = ()
    capture_modules: tuple[str, ...] = ()
    timeout_s: float = 600.0
    seed: int = 0
    audit: bool = True
    files: bool = True
    repeats: int = 0
    nproc: int = 1
    nodes: str = ""

    @property
    def node_layout(self) -> Nodes | None:
        """This machine's place in a job across machines, None for a job on this machine alone."""
        return Nodes.parse(self.nodes) if self.nodes else None

    @property
    def sources(self) -> list[str]:
        """The device types the script names that are remapped (``cuda``)."""
        return [entry.partition("=")[0].strip() for entry in self.map_devices]

    @property
    def named(self) -> set[str]:
        """The targets' device the map names (``cuda=emu``: ``emu``), if it names one."""
        return {entry.partition("=")[2].strip() for entry in self.map_devices if "=" in entry}

    @classmethod
    def from_options(cls, **given: Any) -> ExecSettings:
        """The settings for :func:`bakeoff.api.exec_script`'s keywords (a keyword not given
        takes its default), each checked in the order of :data:`EXEC_OPTIONS`.

        Raises:
            SpecError: a value out of range or malformed (a device map, a capture, a pattern).
            TypeError: a keyword that is not a setting.
        """
        return cls(**read_options(EXEC_OPTIONS, given, "exec setting"))

    def options(self) -> dict[str, Any]:
        """The :func:`bakeoff.api.exec_script` keywords that give these settings again."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_run(cls, settings: Mapping[str, Any]) -> ExecSettings:
        """The settings a stored script run's ``settings`` (see :func:`run_settings`) ask for,
        from any version, checked like user input.

        Raises:
            SpecError: a stored value that is no longer valid input.
        """
        stored = current_names(settings.get("exec") or {})
        given = {f.name: stored[f.name] for f in fields(cls) if f.name in stored and f.name != "reference"}
        reference = None if stored.get("as_written") else settings.get("reference")
        return cls.from_options(**given, reference=reference)


def current_names(stored: Mapping[str, Any]) -> dict[str, Any]:
    """A stored ``exec`` document under the keywords' names (its ``map`` and ``captures``
    renamed), values untouched."""
    return {_RENAMED.get(key, key): value for key, value in stored.items()}


def run_settings(
    settings: ExecSettings, *, argv: Sequence[str], workdir: str, reference: str, as_written: bool
) -> dict[str, Any]:
    """What a script run stores as its ``settings``: the ``reference`` it ran on (a device
    spec; ``as_written``: the script's own device, unmapped), and under ``exec`` every setting
    under its stored name, with the script's ``argv`` and the ``workdir`` it ran in."""
    asked = {_STORED.get(k, k): v for k, v in settings.options().items() if k != "reference"}
    asked["map"] = settings.sources
    return {
        "reference": reference,
        "reference_added": True,  # the basis of every comparison, never a candidate
        "exec": {"argv": list(argv), **asked, "as_written": as_written, "workdir": workdir},
    }


# -- the checks: each turns a keyword's value into its field's, or raises SpecError ----------


def _check_nodes(value: str, given: Mapping[str, Any]) -> str:
    return str(Nodes.parse(str(value))) if value else ""


def _check_capture(value: str | Iterable[str], given: Mapping[str, Any]) -> tuple[str, ...]:
    from bakeoff.script.launch import is_capture_name

    names = texts(value)
    for name in names:
        if not is_capture_name(name):
            raise SpecError(f"--capture {name!r} is not MODULE:FUNCTION", hint="e.g. --capture infer:postprocess")
    return names


def _check_capture_modules(value: str | Iterable[str], given: Mapping[str, Any]) -> tuple[str, ...]:
    from bakeoff.script.modules import DEFAULT, check_patterns

    patterns = texts(value) or tuple(DEFAULT)
    problem = check_patterns(patterns)
    if problem is not None:
        raise SpecError(f"--capture-modules {problem[0]!r}", hint=problem[1])
    return patterns


_DEFAULT = ExecSettings()

#: Every setting of ``bakeoff exec``, in the order its value is checked.
EXEC_OPTIONS: dict[str, Option] = {
    option.keyword: option
    for option in (
        Option(
            "reference",
            "--reference",
            _DEFAULT.reference,
            "Where the reference runs [default: the script's device where it exists, else cpu].",
            check_reference_device,
            metavar="DEVICE",
            example="cpu",
        ),
        Option(
            "map_devices",
            "--map",
            _DEFAULT.map_devices,
            "The device types the script names that are remapped to each target's (cuda=emu: to emu, "
            "the targets' device).",
            check_device_map,
            metavar="DEVICE[=TARGET]",
            multiple=True,
            example=["xpu"],
        ),
        Option(
            "strict",
            "--strict",
            _DEFAULT.strict,
            "Fail a run on any rewrite that may change numerics.",
            example=True,
        ),
        Option(
            "capture",
            "--capture",
            _DEFAULT.capture,
            "Compare this function's return values, call by call (repeatable).",
            _check_capture,
            metavar="MODULE:FUNCTION",
            multiple=True,
            example=["infer:postprocess"],
        ),
        Option(
            "capture_modules",
            "--capture-modules",
            _DEFAULT.capture_modules,
            "Compare the outputs of the module calls whose name or class matches this glob "
            "(e.g. '*.mlp', Linear; repeatable; at most 8 calls per module); @roots: the root calls "
            "(the model the script calls); none: no module call [default: @roots, at most 4 calls "
            "of each, 32 MiB].",
            _check_capture_modules,
            metavar="PATTERN",
            multiple=True,
            example=["*.mlp"],
        ),
        Option(
            "timeout_s",
            "--timeout",
            _DEFAULT.timeout_s,
            "Seconds a run may take before it is stopped (a timeout).",
            number_check(TIMEOUT, "--timeout"),
            bounds=TIMEOUT,
            example=30.0,
        ),
        Option(
            "seed",
            "--seed",
            _DEFAULT.seed,
            "Seed of random, numpy and torch.",
            number_check(SEED, "--seed"),
            bounds=SEED,
            example=7,
        ),
        Option(
            "audit",
            "--no-audit",
            _DEFAULT.audit,
            "Audit where each target's work ran over the whole script (its first 20,000 op calls) and "
            "what torch.compile did; off leaves placement 'not audited'.",
            flag_help="Do not audit where each target's work ran (it costs time on tiny ops).",
            example=False,
        ),
        Option(
            "files",
            "--no-files",
            _DEFAULT.files,
            "Compare the files each run writes in its copy of the working directory (safetensors, npy, "
            "npz, JSON; pickles are never loaded) with the reference's.",
            flag_help="Do not compare the files the script writes (safetensors, npy, npz, JSON).",
            example=False,
        ),
        Option(
            "repeats",
            "--repeats",
            _DEFAULT.repeats,
            "Time each side over N more runs, without the audit or --capture tracing (0: the first "
            "run's wall time, a single observation; a speed-up needs 2 or more).",
            number_check(_REPEATS, "--repeats"),
            bounds=_REPEATS,
            metavar="N",
            example=3,
        ),
        Option(
            "nproc",
            "--nproc",
            _DEFAULT.nproc,
            "Run the script as N ranks, as torchrun --nproc-per-node N would (RANK, WORLD_SIZE, "
            "LOCAL_RANK, MASTER_ADDR/PORT set; nccl remapped), the reference too; each rank's captures "
            "are compared with the reference's same rank [default: 1, one plain process without torchrun's "
            "environment].",
            number_check(_NPROC, "--nproc"),
            bounds=_NPROC,
            metavar="N",
            example=2,
        ),
        Option(
            "nodes",
            "--nodes",
            _DEFAULT.nodes,
            "Run as one machine of a job across NNODES machines, torchrun's static rendezvous: "
            "NODE_RANK/NNODES@HOST:PORT, the same command on every machine with its own NODE_RANK, "
            "HOST node 0's address; this machine's --nproc ranks are NODE_RANK x N to NODE_RANK x N + "
            "N - 1, and each job of the run (the reference, the honest reference, each target, each "
            "timed repeat) meets at PORT plus its position [default: this machine alone].",
            _check_nodes,
            metavar="NODE_RANK/NNODES@HOST:PORT",
            example="0/1@127.0.0.1:29400",
        ),
    )
}
