"""The compilation audit keeps every compilation of its own target in a process that compiled
many graphs before it (dynamo keeps its per-compilation records in a queue bounded at 64)."""

from __future__ import annotations

import pytest
import torch

from bakeoff.target.dynamo import METRICS_KEPT, CompileWatch

pytestmark = pytest.mark.compile


def _compile_distinct(count: int, offset: int) -> None:
    # each function is its own code object: one compilation each, with the cheapest backend
    for i in range(count):
        scope: dict = {}
        exec(f"def f_{offset}_{i}(x):\n    return x * {i + 1} + {offset}\n", scope)
        torch.compile(scope[f"f_{offset}_{i}"], backend="eager")(torch.ones(2))


def test_a_watch_started_after_a_full_queue_of_records_keeps_all_of_its_own() -> None:
    torch._dynamo.reset()
    _compile_distinct(70, offset=0)  # past dynamo's bound of 64: its queue no longer grows
    watch = CompileWatch()
    try:
        _compile_distinct(5, offset=1)
        compilations = watch.summary()["compilations"]
    finally:
        watch.close()
    # the seeded condition: counting from the queue's length at the start found 0 of 5 here
    assert [c["function"] for c in compilations] == [f"f_1_{i}" for i in range(5)]
    assert len(torch._dynamo.utils.get_compilation_metrics()) <= METRICS_KEPT
