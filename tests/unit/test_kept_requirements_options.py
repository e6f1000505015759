"""The line that says a workload's kept requirements apply ("--clear-requirements drops them,
--require replaces them") is printed by trial and plan alike: both take both options, and refuse
the two together in one line."""

from __future__ import annotations

import pytest
from tests.conftest import cli_in_process


@pytest.mark.parametrize("command", ["trial", "plan"])
def test_both_commands_take_the_options_the_kept_requirements_line_names(capsys, command):
    code, out, _ = cli_in_process(capsys, command, "--help")
    assert code == 0 and "--clear-requirements" in out and "--require " in out
    code, out, err = cli_in_process(
        capsys, command, "arch:llama", "--clear-requirements", "--require", "p90<=1ms", "--db", "/nonexistent/b.db"
    )
    assert (code, out) == (2, "")
    assert err == "bakeoff: error: --clear-requirements with --require (give one or the other)\n"
