"""After a script's first run imported PyTorch's compiler, its later runs are forked from a server
that imported it too (bakeoff.script.compiler_preload): a script that never touches what that
import read runs forked with it imported, and one that sets a variable the compiler's config read
at import (seeded: ``TORCHINDUCTOR_FX_GRAPH_CACHE=0`` set by the script itself, then read back
from inductor's config) runs again in a fresh interpreter, where it is heard, as with ``python
script.py``. PyTorch setting one itself (inductor's cache directory) is not the script's change."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from bakeoff.launch.forkserver import ForkServer
from bakeoff.runner.script_run import ScriptRun, run_environment, run_script
from bakeoff.runner.script_worker import COMPILER, PRELOAD

pytestmark = pytest.mark.isolated

#: The script's first statement says whether the compiler was imported before it (a forked run).
SCRIPT = textwrap.dedent(
    """
    import os, sys
    print("preloaded", "torch._dynamo" in sys.modules)
    os.environ[sys.argv[1]] = sys.argv[2]
    import torch._inductor.config as config
    from torch._inductor.runtime.cache_dir_utils import cache_dir
    cache_dir()  # PyTorch sets TORCHINDUCTOR_CACHE_DIR itself here: not the script's change
    print("fx_graph_cache", config.fx_graph_cache)
    """
)


def _run(work: Path, server: ForkServer, *argv: str) -> tuple[ScriptRun, list[str]]:
    work.mkdir()
    (work / "sets_env.py").write_text(SCRIPT)
    ran = run_script(work / "sets_env.py", list(argv), work, {}, files=False, server=server, timeout_s=120)
    assert ran.status == "ok", ran.error
    return ran, [e["text"] for e in ran.log if e["source"] == "stdout" for _ in range(e["count"])]


def test_a_script_that_sets_a_variable_the_compiler_read_runs_again_fresh_and_is_heard(tmp_path):
    # started in the test's own call: runs are forked only in the environment the server was
    # started in (pytest names the phase of each test in it)
    with ForkServer(PRELOAD, run_environment(0)) as server:
        first, out = _run(tmp_path / "first", server, "SOME_FLAG_OF_ITS_OWN", "1")
        assert out == ["preloaded False", "fx_graph_cache True"] and first.compiler_imported
        assert not first.compiler_preloaded
        seconds = server.preload(COMPILER)
        assert seconds is not None and seconds > 0.05  # importing torch._dynamo takes seconds
        control, out = _run(tmp_path / "control", server, "SOME_FLAG_OF_ITS_OWN", "1")
        assert out == ["preloaded True", "fx_graph_cache True"], "the control did not run forked"
        assert control.compiler_preloaded  # the reference's note says the runs after it had it imported
        fault, out = _run(tmp_path / "fault", server, "TORCHINDUCTOR_FX_GRAPH_CACHE", "0")
        assert out == ["preloaded False", "fx_graph_cache False"], "not heard, or the forked run's lines kept"
        assert not fault.compiler_preloaded  # run again fresh: it imported the compiler itself


def test_a_script_that_never_imports_the_compiler_says_so(tmp_path):
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "plain.py").write_text("import torch\nprint(torch.ones(2).sum().item())\n")
    with ForkServer(PRELOAD, run_environment(0)) as server:
        ran = run_script(tmp_path / "work" / "plain.py", [], tmp_path / "work", {}, files=False, server=server)
    assert ran.status == "ok" and not ran.compiler_imported
