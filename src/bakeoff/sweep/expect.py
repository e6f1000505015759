"""Expected grades: a TOML file that turns a sweep into pass, expected failure, regressed,
improved, new and missing, so that an upgrade shows as a diff rather than a surprise.

The file holds one table per target, mapping each workload spec to the grade it is expected
to reach (``none`` for a workload that does not build, ``skipped`` for a target that cannot
run here)::

    [meta]
    population = "arch:causal_lm"
    transformers = "5.24.0"

    ["cpu+aot_eager"]
    "arch:llama" = "compiles_clean"
    "arch:bloom" = "runs"  # correctness fail: ...

A cell at its expected grade is ``pass`` (at the top of the ladder) or ``expected_failure``;
above it ``improved``, below it ``regressed``; a cell the file does not list is ``new``; a
listed workload the sweep did not store is ``missing``; a target that cannot run here
(``skipped``) is neither better nor worse than what was expected of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomllib

from bakeoff.errors import SpecError
from bakeoff.outfiles import write_text
from bakeoff.verdicts.coverage import GRADES, Coverage

__all__ = ["STATUSES", "Expectation", "classify", "grades_of", "read_expectations", "write_expectations"]

STATUSES = ("regressed", "improved", "new", "missing", "expected_failure", "pass", "skipped")
_VALID = (*GRADES, "none", "skipped")


@dataclass(frozen=True)
class Expectation:
    """One cell against the file."""

    workload: str
    target: str
    status: str
    expected: str | None
    actual: str | None
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _rank(grade: str) -> int:
    return -1 if grade == "none" else GRADES.index(grade)


def read_expectations(path: str | Path) -> dict[str, dict[str, str]]:
    """target -> workload -> expected grade.

    Raises:
        SpecError: the file cannot be read, is not TOML, or names a grade that does not exist.
    """
    file = Path(path)
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SpecError(
            f"cannot read expectations {file}: {exc.strerror}", hint="write one with --write-expect"
        ) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SpecError(
            f"{file} is not valid TOML: {exc}", hint="fix the file or write it anew with --write-expect"
        ) from None
    expected: dict[str, dict[str, str]] = {}
    for target, table in data.items():
        if target == "meta":
            continue
        if not isinstance(table, dict):
            raise SpecError(f"{file}: {target!r} is not a table of workload = grade", hint=f'e.g. ["{target}"]')
        for workload, grade in table.items():
            if grade not in _VALID:
                raise SpecError(
                    f"{file}: [{target}] {workload} = {grade!r} is not a grade", hint="use " + ", ".join(_VALID)
                )
        expected[target] = dict(table)
    return expected


def classify(coverage: Coverage, expected: dict[str, dict[str, str]]) -> list[Expectation]:
    """Every stored cell of the sweep, and every listed cell it lacks, against the file."""
    out: list[Expectation] = []
    seen: set[tuple[str, str]] = set()
    for cell in coverage.cells:
        seen.add((cell.target, cell.workload))
        actual = cell.grade or "none"
        want = expected.get(cell.target, {}).get(cell.workload)
        if want is None:
            status = "new"
        elif actual == "skipped" or want == "skipped":
            status = "skipped" if actual == "skipped" else "improved"
        elif actual == want:
            status = "pass" if actual == GRADES[-1] else "expected_failure"
        else:
            status = "improved" if _rank(actual) > _rank(want) else "regressed"
        out.append(Expectation(cell.workload, cell.target, status, want, actual, cell.reason))
    for target, table in expected.items():
        if target not in coverage.targets:
            continue
        for workload, want in table.items():
            if (target, workload) not in seen:
                out.append(Expectation(workload, target, "missing", want, None, "not stored in this sweep"))
    return out


def grades_of(coverage: Coverage) -> dict[str, dict[str, str]]:
    """A sweep's own grades in the form of an expectations file: comparing a sweep against an
    earlier one of the same population shows which cells started and stopped working."""
    grades: dict[str, dict[str, str]] = {}
    for cell in coverage.cells:
        grades.setdefault(cell.target, {})[cell.workload] = cell.grade or "none"
    return grades


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_expectations(path: str | Path, coverage: Coverage) -> int:
    """Write the sweep's grades as the new expectations (the reason as a comment); the cell count."""
    lines = [
        "# expected grades per target and workload: bakeoff sweep ... --expect THIS FILE",
        "[meta]",
        f"population = {_quoted(str(coverage.population.get('name', '')))}",
        f"transformers = {_quoted(str(coverage.population.get('transformers') or ''))}",
        f"sweep = {_quoted(coverage.sweep_id)}",
    ]
    grid = coverage.grid()
    count = 0
    for target in coverage.targets:
        lines += ["", f"[{_quoted(target)}]"]
        for workload, row in grid.items():
            cell = row.get(target)
            if cell is None:
                continue
            reason = " ".join(cell.reason.split())[:150]
            lines.append(f"{_quoted(workload)} = {_quoted(cell.grade or 'none')}" + (f"  # {reason}" if reason else ""))
            count += 1
    write_text(path, "\n".join(lines) + "\n")
    return count
