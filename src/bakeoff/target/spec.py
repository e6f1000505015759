"""Target specs: ``DEVICE[:INDEX][+BACKEND][?option=value&...]``.

Examples: ``cpu``, ``cuda:1``, ``cpu+inductor``, ``neuron+neuron?dtype=bf16``,
``cuda+inductor?mode=max-autotune&dynamic=false``, ``xpu?amp=bf16``.

Parsing is pure (no torch import): whether a target can run *here* is decided later by
:mod:`bakeoff.target.detect`, which turns an unavailable target into a skip with a reason.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields

from bakeoff.emu import NAME as TEST_DEVICE
from bakeoff.errors import SpecError
from bakeoff.specsyntax import parse_bool, split_options

__all__ = [
    "AMP_DTYPES",
    "DTYPE_ALIASES",
    "KNOWN_DEVICES",
    "TARGET_FORMS",
    "Target",
    "parse_target",
    "parse_targets",
]

#: Device types bakeoff knows by name. Any other name is accepted only if it is the
#: PrivateUse1 device registered in this process (see :func:`bakeoff.target.detect.privateuse1_name`).
KNOWN_DEVICES = ("cpu", "cuda", "xpu", "mps", "neuron")

#: Accepted spellings of each dtype, mapped to the torch attribute name.
DTYPE_ALIASES = {
    "fp32": "float32",
    "float32": "float32",
    "float": "float32",
    "fp16": "float16",
    "float16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp64": "float64",
    "float64": "float64",
    "double": "float64",
}

MAX_THREADS = 1024
_OPTIONS = ("dtype", "dynamic", "mode", "fullgraph", "threads", "precision", "amp")
#: The dtypes mixed precision (``amp=``) runs in: autocast only lowers precision.
AMP_DTYPES = ("bfloat16", "float16")
#: Options only some backends take, in the order a target giving several is refused: each
#: engine adapter declares which it takes (:mod:`bakeoff.target.engines`).
_ENGINE_OPTIONS = ("mode", "precision", "dynamic", "fullgraph")
_HEAD = re.compile(r"^(?P<device>[a-z][a-z0-9_]*)(?::(?P<index>\d+))?(?:\+(?P<backend>[A-Za-z0-9_.\-]+))?$")

TARGET_FORMS = (
    "DEVICE[:INDEX][+BACKEND][?option=value&...], e.g. cpu, cuda:1, cpu+inductor, "
    "neuron?dtype=bf16, cpu+aot_eager?dynamic=false; options: " + ", ".join(_OPTIONS)
)


@dataclass(frozen=True)
class Target:
    """One place and way to run a workload.

    Attributes:
        device: device type (``cpu``, ``cuda``, ``neuron``, a PrivateUse1 name...).
        index: device index, or None for the default device of that type.
        backend: a ``torch.compile`` backend name, or None for eager execution.
        dtype: torch dtype name to cast floating parameters and inputs to, or None to keep
            the workload's own dtype.
        dynamic: ``torch.compile(dynamic=...)``; None leaves PyTorch's default (automatic).
        mode: ``torch.compile(mode=...)``, or None.
        fullgraph: ``torch.compile(fullgraph=...)``.
        precision: the inference precision hint of backends that have one (OpenVINO's
            ``INFERENCE_PRECISION_HINT``: f32, bf16, f16); None keeps the backend's default.
        threads: intra-op CPU threads while this target runs; None means bakeoff's default
            (1 for CPU targets, because timings on shared machines are far steadier with one
            thread; unchanged for accelerators).
        amp: mixed precision: the torch dtype name (``bfloat16``, ``float16``) the target runs
            under ``torch.autocast(<device type>, dtype=...)``, weights left in their dtype;
            None: no autocast.
    """

    device: str
    index: int | None = None
    backend: str | None = None
    dtype: str | None = None
    dynamic: bool | None = None
    mode: str | None = None
    fullgraph: bool = False
    threads: int | None = None
    precision: str | None = None
    amp: str | None = None

    @property
    def torch_device(self) -> str:
        """The string to hand to ``torch.device``."""
        return self.device if self.index is None else f"{self.device}:{self.index}"

    @property
    def is_compiled(self) -> bool:
        return self.backend is not None

    @property
    def effective_threads(self) -> int | None:
        """The intra-op thread count bakeoff sets for this target (None: leave it alone).

        One on the CPU and on the bundled test device, which computes on the host's CPU kernels:
        on a shared machine more threads make timings swing by orders of magnitude (the test
        device with two threads went from 8 to 412 ms per call on two busy cores, against one
        thread's steady figure), and every target computing on the host gets the same count, so
        that their figures compare. An accelerator's host threads are left as they are; the
        count each target ran with is recorded with its result either way."""
        if self.threads is not None:
            return self.threads
        return 1 if self.device in ("cpu", TEST_DEVICE) else None

    @property
    def spec(self) -> str:
        """Canonical spec string; ``parse_target(t.spec) == t``."""
        head = self.torch_device + (f"+{self.backend}" if self.backend else "")
        opts = []
        if self.dtype is not None:
            opts.append(f"dtype={self.dtype}")
        if self.dynamic is not None:
            opts.append(f"dynamic={'true' if self.dynamic else 'false'}")
        if self.mode is not None:
            opts.append(f"mode={self.mode}")
        if self.fullgraph:
            opts.append("fullgraph=true")
        if self.threads is not None:
            opts.append(f"threads={self.threads}")
        if self.precision is not None:
            opts.append(f"precision={self.precision}")
        if self.amp is not None:
            opts.append(f"amp={self.amp}")
        return head + ("?" + "&".join(opts) if opts else "")

    def __str__(self) -> str:
        return self.spec

    def to_dict(self) -> dict:
        return {"spec": self.spec, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict) -> Target:
        known = {f.name for f in fields(cls)}  # a newer document's added keys are read around
        return cls(**{k: v for k, v in data.items() if k in known})


def parse_target(text: str, extra_devices: Iterable[str] = ()) -> Target:
    """Parse one target spec.

    Args:
        text: the spec, e.g. ``"cpu+inductor?dtype=bf16"``.
        extra_devices: device names accepted besides :data:`KNOWN_DEVICES` (the PrivateUse1
            device registered in this process, if any).

    Raises:
        SpecError: the spec is malformed, names an unknown device, or has a bad option.
    """
    head, options = split_options(text, "target")
    match = _HEAD.match(head)
    if not match:
        raise SpecError(f"malformed target {text!r}", hint=f"expected {TARGET_FORMS}")
    device = match["device"]
    valid = (*KNOWN_DEVICES, *extra_devices)
    if device not in valid:
        hint = "run `bakeoff targets` to see what this machine offers"
        if device == TEST_DEVICE:
            hint = f"{TEST_DEVICE} is bakeoff's test device: enable it with BAKEOFF_EMU=1 in the environment"
        raise SpecError(
            f"unknown device {device!r} in target {text!r}; valid devices here: {', '.join(valid)}", hint=hint
        )
    fields: dict = {
        "device": device,
        "index": int(match["index"]) if match["index"] is not None else None,
        "backend": match["backend"],
    }
    for key, value in options.items():
        if key == "dtype":
            if value.lower() not in DTYPE_ALIASES:
                raise SpecError(f"unknown dtype {value!r} in target {text!r}", hint="use one of fp32, bf16, fp16, fp64")
            fields["dtype"] = DTYPE_ALIASES[value.lower()]
        elif key == "amp":
            if DTYPE_ALIASES.get(value.lower()) not in AMP_DTYPES:
                known = value.lower() in DTYPE_ALIASES
                raise SpecError(
                    f"amp={value} in target {text!r} is not a half precision"
                    if known
                    else f"unknown amp dtype {value!r} in target {text!r}",
                    hint="use amp=bf16 or amp=fp16 (autocast runs some ops in that dtype)",
                )
            fields["amp"] = DTYPE_ALIASES[value.lower()]
        elif key == "dynamic":
            if value.lower() in ("auto", "none"):
                fields["dynamic"] = None
            else:
                try:
                    fields["dynamic"] = parse_bool(value, key, text)
                except SpecError as exc:
                    raise SpecError(exc.message, hint="use true, false or auto") from None
        elif key in ("mode", "precision"):
            fields[key] = _choice(key, value, text)
        elif key == "fullgraph":
            fields["fullgraph"] = parse_bool(value, key, text)
        elif key == "threads":
            if not (value.isascii() and value.isdigit()) or int(value) < 1:
                raise SpecError(
                    f"threads={value!r} in target {text!r} is not a positive integer", hint="e.g. threads=1"
                )
            if int(value) > MAX_THREADS:
                # OpenMP cannot start that many threads: torch segfaults instead of saying so
                raise SpecError(
                    f"threads={value} in target {text!r} is more than {MAX_THREADS}",
                    hint=f"use at most the machine's cores (this one has {os.cpu_count()})",
                )
            fields["threads"] = int(value)
        else:
            raise SpecError(f"unknown option {key!r} in target {text!r}", hint="valid options: " + ", ".join(_OPTIONS))
    if fields.get("amp") is not None and fields.get("dtype") not in (None, "float32"):
        raise SpecError(
            f"amp with dtype={options['dtype']} in target {text!r} does nothing: "
            + (
                "the weights are already half precision"
                if fields["dtype"] in AMP_DTYPES
                else "autocast does not lower float64 weights"
            ),
            hint="drop dtype= (mixed precision keeps the weights in float32) or drop amp=",
        )
    if fields["backend"] is not None:
        _check_engine_options(fields["backend"], options, text)
    compile_only = [k for k in ("dynamic", "mode", "fullgraph", "precision") if k in options]
    if compile_only and fields["backend"] is None:
        raise SpecError(
            f"option {compile_only[0]!r} in target {text!r} needs a compile backend",
            hint="add +BACKEND, e.g. cpu+inductor?" + compile_only[0] + "=...",
        )
    return Target(**fields)


def _choice(key: str, value: str, text: str) -> str:
    """The value of an option whose values an engine declares (``mode``, ``precision``)."""
    from bakeoff.target.engines import option

    declared = option(key)
    if declared is None or declared.values is None:
        raise SpecError(f"option {key!r} in target {text!r} is taken by no backend here")
    chosen = value.lower() if declared.casefold else value
    if chosen not in declared.values:
        raise SpecError(
            f"unknown {declared.what} {value!r} in target {text!r}", hint="use one of " + ", ".join(declared.values)
        )
    return chosen


def _check_engine_options(backend: str, options: dict[str, str], text: str) -> None:
    """Refuse an option the backend's engine does not take, in the words of the option's declaration."""
    from bakeoff.target.engines import engine_for, option, takers

    engine = engine_for(backend)
    for key in _ENGINE_OPTIONS:
        if key in options and not engine.takes(key):
            declared = option(key)
            if declared is None:
                raise SpecError(f"option {key!r} in target {text!r} is taken by no backend here")
            refusal, hint = declared.refused(backend, takers(key))
            raise SpecError(f"option {key!r} in target {text!r} {refusal}", hint=hint)


def parse_targets(specs: Iterable[str], extra_devices: Iterable[str] = ()) -> list[Target]:
    """Parse targets given as a mix of single specs and comma-separated lists.

    Duplicates (same canonical spec) are dropped, keeping the first occurrence.
    """
    extra = tuple(extra_devices)
    seen: dict[str, Target] = {}
    for chunk in specs:
        for part in chunk.split(","):
            if not part.strip():
                raise SpecError(f"empty target in {chunk!r}", hint="separate targets with single commas")
            target = parse_target(part, extra)
            seen.setdefault(target.spec, target)
    if not seen:
        raise SpecError("no targets given", hint="e.g. --on cpu,cpu+inductor")
    return list(seen.values())
