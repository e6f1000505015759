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


def test_every_module_with_module_scoped_work_keeps_it_on_one_worker() -> None:
    """A module-scoped fixture is computed once per worker that runs one of its tests: a module
    that has one is a group of its own, one of the modules on the clock (one group), or its readers
    carry an ``xdist_group`` (listed). No module is in two of those lists."""
    from pathlib import Path

    from tests.conftest import GROUPED_BY_TEST, ON_THE_CLOCK, SHARED_WORK

    root = Path(__file__).parents[1]
    found = {p.name for p in [*root.glob("test_*.py"), *root.glob("unit/test_*.py")]
             if 'scope="module"' in p.read_text()}  # fmt: skip
    assert found, "no module-scoped fixture found: the search is wrong"
    kept = SHARED_WORK | GROUPED_BY_TEST | ON_THE_CLOCK
    assert found <= kept, sorted(found - kept)
    assert len(kept) == len(SHARED_WORK) + len(GROUPED_BY_TEST) + len(ON_THE_CLOCK), "a module in two lists"


def test_the_tests_on_the_clock_are_one_unit_handed_out_first_and_then_the_largest_groups() -> None:
    """Work is handed out in tests/conftest.py's order (``--no-loadscope-reorder``): the tests
    that wait on the clock one after another on one worker, from the start, beside the busy ones."""
    from pathlib import Path

    from tests.conftest import ON_THE_CLOCK_GROUP, _work_order

    class Item:
        def __init__(self, name: str, group: str | None = None) -> None:
            self.nodeid, self.fspath = f"tests/{name}::t", Path("tests") / name
            self.marks = [pytest.mark.xdist_group(group).mark] if group else []

        def iter_markers(self, name: str) -> list:
            return [m for m in self.marks if m.name == name]

    alone, pair, clock, trio = (
        Item("test_a.py"),
        Item("test_b.py", "b"),
        Item("test_serve_run.py", ON_THE_CLOCK_GROUP),
        Item("test_c.py", "c"),
    )
    order = _work_order(
        [alone, pair, clock, trio, Item("test_b.py", "b"), trio, Item("test_serve_load.py", ON_THE_CLOCK_GROUP), trio]
    )
    assert [len(unit) for unit in order] == [2, 3, 2, 1]
    assert order[0][0] is clock and order[-1] == [alone]


def test_a_device_build_the_run_outlived_is_stopped_with_the_compiler_it_started(monkeypatch) -> None:
    """The seeded build: a process whose child runs in a process group of its own, as ninja starts
    each compiler. The run's end stops both (a kill of the build's group alone left the child)."""
    import subprocess
    import sys

    import tests.conftest as harness
    from tests.conftest import gone

    spawn = "import subprocess, time; print(subprocess.Popen(['sleep', '60'], start_new_session=True).pid, flush=True)"
    command = [sys.executable, "-c", spawn + "; time.sleep(60)"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as build:
        compiler = int(build.stdout.readline())
        monkeypatch.setattr(harness, "_EMU_BUILD", [build])
        harness.pytest_unconfigure(None)
    assert build.returncode is not None and gone(compiler, within_s=5), "the build's compiler was left running"
