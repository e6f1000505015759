"""``in_new_threads``: a context entered in every thread started after the call, until its undo."""

from __future__ import annotations

import threading
from contextlib import contextmanager

from bakeoff.script.threads import in_new_threads


def test_threads_started_after_the_call_run_inside_the_context_until_the_undo() -> None:
    seen: list[str] = []
    inside = threading.local()

    @contextmanager
    def mark():
        inside.on = True
        seen.append("enter")
        yield
        seen.append("exit")

    def work(into: list) -> None:
        into.append(getattr(inside, "on", False))

    class Overriding(threading.Thread):  # a subclass with its own run, as anyio's workers are
        def run(self) -> None:
            work(results)

    results: list[bool] = []
    undo = in_new_threads(mark)
    try:
        for thread in (threading.Thread(target=work, args=(results,)), Overriding()):
            thread.start()
            thread.join()
    finally:
        undo()
    later = threading.Thread(target=work, args=(results,))
    later.start()
    later.join()
    assert results == [True, True, False] and seen == ["enter", "exit", "enter", "exit"]
    assert not getattr(inside, "on", False)  # never in the calling thread


def test_a_context_that_cannot_be_entered_leaves_the_thread_running() -> None:
    def broken():
        raise RuntimeError("no")

    ran: list[bool] = []
    undo = in_new_threads(broken)
    try:
        thread = threading.Thread(target=lambda: ran.append(True))
        thread.start()
        thread.join()
    finally:
        undo()
    assert ran == [True]
