"""The report formats come from one registry: the API's keywords, the options of ``bakeoff
report`` and ``bakeoff coverage`` and the renderers are read from it, and a format it does not
hold is refused in one line."""

from __future__ import annotations

import inspect

import pytest

from bakeoff.errors import SpecError
from bakeoff.report.formats import REPORT_FORMATS, report_format


def test_every_format_is_an_api_keyword_and_an_option_of_report_and_coverage() -> None:
    from bakeoff import api
    from bakeoff.cli.main import cli

    keywords = inspect.signature(api.report).parameters
    report_flags = {opt for p in cli.commands["report"].params for opt in p.opts}
    coverage_flags = {opt for p in cli.commands["coverage"].params for opt in p.opts}
    for name, found in REPORT_FORMATS.items():
        assert keywords[name].kind is inspect.Parameter.KEYWORD_ONLY and keywords[name].default is None, name
        assert found.flag in report_flags, name
        assert (found.flag in coverage_flags) == (found.coverage is not None), name
        assert callable(found.resolve(found.evidence)), name
        if found.coverage is not None:
            assert callable(found.resolve(found.coverage)), name


def test_an_unknown_format_and_a_coverage_page_json_lacks_are_refused_in_one_line() -> None:
    with pytest.raises(SpecError, match="unknown report format 'pdf'") as unknown:
        report_format("pdf")
    assert unknown.value.hint == "use html, markdown, json"
    with pytest.raises(SpecError, match="a sweep's coverage has no json page"):
        report_format("json").render_coverage(None)
