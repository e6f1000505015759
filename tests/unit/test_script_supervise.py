"""The supervisor of a script's process dies of the signal its script died of, so that the runner
reads the death as the script's: SIGKILL (the out-of-memory killer's) too, which takes no handler."""

from __future__ import annotations

import faulthandler
import os
import signal

import pytest

from bakeoff.runner.script_worker import _supervise


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGSEGV, signal.SIGTERM])
def test_the_supervisor_dies_of_the_signal_its_script_died_of(signum: int) -> None:
    supervisor = os.fork()
    if supervisor == 0:  # the supervisor: its script kills itself, as the kernel would
        try:
            script = os.fork()
            if script == 0:
                faulthandler.disable()  # pytest's: it would print this process's stack on SIGSEGV
                if signum != signal.SIGKILL:  # a handler an earlier test left in this worker (the CLI's SIGTERM)
                    signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
                os._exit(0)
            os._exit(_supervise(script, None, None))
        except BaseException:
            os._exit(70)  # a supervisor that failed to mirror the death exits, and the test sees it
    _, status = os.waitpid(supervisor, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signum, os.waitstatus_to_exitcode(status)
