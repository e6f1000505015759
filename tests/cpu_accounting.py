"""Where the suite's CPU goes, test by test: an opt-in pytest plugin and its summary.

The suite's wall time is its CPU spread over the cores, where the cores are kept busy, and a
test's wall time says little about its CPU (a service under traffic waits on the clock; a run
killed mid-way leaves orphans its worker never reaps). Each xdist worker moves itself into a
control group of its own, which every process it starts inherits (forked, spawned, orphaned or
not), and writes one line per test: the group's CPU seconds over the test, its wall seconds and
its start.

    BAKEOFF_TEST_CPU_LOG=/tmp/cpu .venv/bin/python -m pytest -p tests.cpu_accounting
    .venv/bin/python -m tests.cpu_accounting /tmp/cpu        # by file, by test, cores busy over time

It needs a writable cgroup v1 ``cpuacct`` hierarchy (root in a container); elsewhere it says so
once and records nothing. A process a test leaves running is counted in the tests after it."""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

_CPUACCT = Path("/sys/fs/cgroup/cpuacct")
_state: dict = {}


def pytest_configure(config: pytest.Config) -> None:
    folder, worker = os.environ.get("BAKEOFF_TEST_CPU_LOG"), os.environ.get("PYTEST_XDIST_WORKER", "main")
    if not folder:
        return
    group = _CPUACCT / f"bakeoff-tests-{worker}-{os.getpid()}"
    try:
        group.mkdir(exist_ok=True)
        (group / "cgroup.procs").write_text(str(os.getpid()))
    except OSError as exc:
        print(f"cpu accounting off: cannot make a cpuacct group ({exc})", file=sys.stderr)
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    _state.update(group=group, out=open(Path(folder) / f"{worker}.jsonl", "a", encoding="utf-8"))


def pytest_unconfigure(config: pytest.Config) -> None:
    """Back to the root group, and the group removed where nothing is left in it."""
    if "group" in _state:
        _state["out"].close()
        (_CPUACCT / "cgroup.procs").write_text(str(os.getpid()))
        try:
            _state["group"].rmdir()
        except OSError:  # a process a test left running is still in it
            pass


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    if "group" not in _state:
        yield
        return
    usage = _state["group"] / "cpuacct.usage"
    cpu, wall = int(usage.read_text()), time.time()
    yield
    used = (int(usage.read_text()) - cpu) / 1e9
    _state["out"].write(json.dumps([item.nodeid, round(used, 2), round(time.time() - wall, 2), round(wall, 1)]) + "\n")
    _state["out"].flush()


def summary(lines: list[str], top: int = 40) -> str:
    """The recorded lines (``[nodeid, cpu_s, wall_s, start]``) as two tables, most CPU first."""
    cpu: Counter[str] = Counter()
    wall: Counter[str] = Counter()
    tests = []
    for line in lines:
        nodeid, used, took, _start = json.loads(line)
        cpu[nodeid.split("::")[0]] += used
        wall[nodeid.split("::")[0]] += took
        tests.append((used, took, nodeid))
    rows = [
        f"CPU {sum(cpu.values()):.0f} s, wall {sum(wall.values()):.0f} s over {len(tests)} tests",
        "  CPU s  wall s",
    ]
    rows += [f"{used:7.1f} {wall[name]:7.1f}  {name}" for name, used in cpu.most_common(top)]
    rows += ["", "  CPU s  wall s  test"]
    rows += [f"{used:7.1f} {took:7.1f}  {nodeid}" for used, took, nodeid in sorted(tests, reverse=True)[:top]]
    return "\n".join(rows)


def busy(lines: list[str], cores: int, step: float = 30.0) -> str:
    """How busy the cores were, step by step from the first test's start: each test's CPU spread
    evenly over its wall time. A step well under 100% had work waiting (on the clock, a lock, a
    peer); the tests running in it say on what."""
    spans = [(start, took, used) for _nodeid, used, took, start in map(json.loads, lines)]
    first = min(start for start, _took, _used in spans)
    used_in: Counter[int] = Counter()
    for start, took, used in spans:
        begin, end = start - first, start - first + took
        if took <= 0:
            used_in[int(begin // step)] += used
            continue
        index = int(begin // step)
        while index * step < end:
            overlap = min(end, (index + 1) * step) - max(begin, index * step)
            used_in[index] += used * overlap / took
            index += 1
    rows = [f"cores busy ({cores}), every {step:.0f} s"]
    rows += [f"{i * step:6.0f} s {100 * used_in[i] / (cores * step):5.0f}%" for i in range(max(used_in) + 1)]
    return "\n".join(rows)


if __name__ == "__main__":
    recorded = [line for path in sorted(Path(sys.argv[1]).glob("*.jsonl")) for line in path.read_text().splitlines()]
    print(summary(recorded))
    print()
    print(busy(recorded, os.cpu_count() or 1))
