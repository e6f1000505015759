"""The suite's own machinery: under pytest-xdist with ``--dist loadgroup`` (the README's test
command), the modules that share module-scoped work run on one worker, so that work (a sweep, a
Ray cluster, a compiled model) is done once. pytest 9 stores a test's id where pytest-xdist 3.8
no longer renames it, which silently spread those modules over every worker (each doing the work
again); this module is one of them and checks its own id."""

from __future__ import annotations

import pytest


def test_a_module_that_shares_work_is_one_group(request: pytest.FixtureRequest) -> None:
    if not getattr(request.config.option, "loadgroup", False):  # set on the workers of --dist loadgroup
        pytest.skip("not on a pytest-xdist worker of --dist loadgroup")
    assert request.node.nodeid.endswith("@test_suite_grouping"), request.node.nodeid
