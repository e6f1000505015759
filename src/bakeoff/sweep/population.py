"""What a sweep covers: every architecture bakeoff can build, or a list of workload specs.

``arch:all`` is every model type ``arch:`` accepts, ``arch:causal_lm`` those built with their
causal-LM head, ``arch:base`` those built as the base model (unit: architecture, each at the
tiny default sizes). A file lists one workload spec per line (``#`` starts a comment; unit:
workload). Every spec is parsed before anything runs, so a typo on line 40 is a bad input, not
a failed cell an hour later. The transformers version is part of the population: the same
names are other models under another release.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bakeoff.errors import SpecError
from bakeoff.workload.base import parse_workload

__all__ = ["ARCH_POPULATIONS", "Population", "resolve_population"]

ARCH_POPULATIONS = ("arch:all", "arch:causal_lm", "arch:base")


@dataclass(frozen=True)
class Population:
    """The workloads of a sweep, with what a coverage figure must say about them."""

    name: str
    unit: str
    source: str
    specs: tuple[str, ...]
    transformers: str | None
    listed_at: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "unit": self.unit,
            "source": self.source,
            "size": len(self.specs),
            "specs": list(self.specs),
            "transformers": self.transformers,
            "listed_at": self.listed_at,
        }

    def describe(self) -> str:
        version = f", transformers {self.transformers}" if self.transformers else ""
        return f"{self.name}: {len(self.specs)} {self.unit}s ({self.source}{version}, listed {self.listed_at[:10]})"


def _transformers_version() -> str | None:
    try:
        import transformers
    except ImportError:
        return None
    return str(transformers.__version__)


def _today() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _from_file(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(
            f"cannot read workload list {path}: {exc}", hint="give a text file, one spec per line"
        ) from None
    specs: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            spec = parse_workload(line).spec
        except SpecError as exc:
            raise SpecError(f"{path}:{number}: {exc.message}", hint=exc.hint) from None
        if spec.startswith("arch:"):
            _check_architecture(spec, f"{path}:{number}")
        if spec in specs:
            raise SpecError(f"{path}:{number}: {spec} is listed twice", hint="list each workload once")
        specs.append(spec)
    if not specs:
        raise SpecError(f"workload list {path} has no specs", hint="one spec per line, e.g. arch:llama")
    return specs


def _check_architecture(spec: str, where: str) -> None:
    from bakeoff.workload.hf import check_arch_options, list_architectures

    parsed = parse_workload(spec)
    try:
        known = list_architectures()
    except ImportError:
        raise SpecError(f"{where}: {spec} needs transformers", hint="pip install 'bakeoff[hf]'") from None
    if parsed.name not in known:
        raise SpecError(f"{where}: unknown architecture {parsed.name!r}", hint="`bakeoff workloads` lists the names")
    try:
        check_arch_options(parsed)
    except SpecError as exc:
        raise SpecError(f"{where}: {exc.message}", hint=exc.hint) from None


def resolve_population(text: str) -> Population:
    """``arch:all`` / ``arch:causal_lm`` / ``arch:base``, or a file of workload specs.

    Raises:
        SpecError: an unknown population, an unreadable file or a malformed line (named).
        WorkloadError: ``arch:`` populations without transformers installed.
    """
    if text in ARCH_POPULATIONS:
        from bakeoff.errors import WorkloadError

        version = _transformers_version()
        if version is None:
            raise WorkloadError(f"{text} needs transformers", hint="pip install 'bakeoff[hf]'")
        from bakeoff.workload.hf import list_architectures

        head = text.removeprefix("arch:")
        names = [n for n, kind in list_architectures().items() if head == "all" or kind == head]
        source = "every model type arch: builds" + ("" if head == "all" else f" with the {head} head")
        return Population(text, "architecture", source, tuple(f"arch:{n}" for n in names), version, _today())
    path = Path(text)
    if not path.is_file():
        if text.startswith("arch:"):
            raise SpecError(f"unknown population {text!r}", hint="use " + ", ".join(ARCH_POPULATIONS) + " or a file")
        raise SpecError(
            f"no workload list {text!r}", hint="give arch:all, arch:causal_lm, arch:base or a file of specs"
        )
    specs = _from_file(path)
    return Population(str(path), "workload", f"the file {path}", tuple(specs), _transformers_version(), _today())
