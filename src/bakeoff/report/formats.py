"""The report formats, in one registry: each one's name (the API keyword and the ``--NAME``
option of ``bakeoff report`` and ``bakeoff coverage``), what it writes, and the functions that
render the evidence of stored runs and a sweep's coverage.

A renderer is named as ``module:function`` and imported when a report of that format is
written, so asking for Markdown never imports the HTML page's plotly.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from bakeoff.errors import SpecError

__all__ = ["REPORT_FORMATS", "ReportFormat", "report_format"]


@dataclass(frozen=True)
class ReportFormat:
    """A format: its ``name``, the ``help`` of its option, and its renderers (``module:function``)
    of :class:`~bakeoff.report.evidence.Evidence` and, where it has one, of a sweep's
    :class:`~bakeoff.verdicts.coverage.Coverage` (``coverage_help``: that option's help)."""

    name: str
    help: str
    evidence: str
    coverage: str | None = None
    coverage_help: str = ""

    @staticmethod
    def resolve(name: str) -> Any:
        """The function ``module:function`` names (imported now)."""
        module, _, function = name.partition(":")
        return getattr(importlib.import_module(module), function)

    @property
    def flag(self) -> str:
        return f"--{self.name}"

    def render(self, evidence: Any) -> str:
        """The report of ``evidence`` in this format."""
        return self.resolve(self.evidence)(evidence)

    def render_coverage(self, coverage: Any) -> str:
        """The page of a sweep's ``coverage`` in this format.

        Raises:
            SpecError: this format has no coverage page.
        """
        if self.coverage is None:
            raise SpecError(f"a sweep's coverage has no {self.name} page", hint="use --html or --markdown")
        return self.resolve(self.coverage)(coverage)


#: Every format, in the order reports are written.
REPORT_FORMATS: dict[str, ReportFormat] = {
    f.name: f
    for f in (
        ReportFormat(
            "html",
            "Write a self-contained HTML page.",
            "bakeoff.report.html:render_html",
            "bakeoff.report.coverage:render_coverage_html",
            "Also write the page with the heat-map of the matrix.",
        ),
        ReportFormat(
            "markdown",
            "Write Markdown.",
            "bakeoff.report.markdown:render_markdown",
            "bakeoff.report.coverage:coverage_markdown",
            "Also write the tables as Markdown.",
        ),
        ReportFormat("json", "Write JSON (schema bakeoff.report).", "bakeoff.report.evidence:render_json"),
    )
}


def report_format(name: str) -> ReportFormat:
    """The format called ``name``.

    Raises:
        SpecError: no such format.
    """
    if name not in REPORT_FORMATS:
        raise SpecError(f"unknown report format {name!r}", hint="use " + ", ".join(REPORT_FORMATS))
    return REPORT_FORMATS[name]
