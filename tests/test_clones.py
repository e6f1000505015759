"""Fork servers cloned from a warm template (bakeoff.launch.clones): a server whose preload and
environment fit is a fork of the template and runs what a fresh server runs, with the hash seed
its environment asks for; one that does not fit (another hash seed, a variable read at import, a
preload without the template's modules) starts fresh; a run of the template starts its own
servers as clones; a kill -9 of the requester leaves neither its clone nor the clone's run, and
the template's end takes its clones with it."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from tests.conftest import gone as _gone

from bakeoff.launch.clones import environment_key
from bakeoff.launch.forkserver import ForkServer

pytestmark = [pytest.mark.isolated, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's")]

ENTRY = textwrap.dedent(
    """
    import json, os, sys, time

    def report(argv):
        print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "hash": hash("bakeoff"),
                          "modules": [name for name in argv if name in sys.modules]}))
        return 0

    def nested(argv):  # a run that starts a server of its own, as bakeoff exec in a CLI run does
        from bakeoff.launch.forkserver import ForkServer
        out, hang = argv
        with ForkServer(["csentry", "colorsys"], dict(os.environ)) as server:
            if hang:
                pid = server.fork("csentry:sleep", [], dict(os.environ), os.getcwd(), out + ".run", out + ".err")
                print(json.dumps({"server": server.pid, "run": pid, "cloned": server.cloned}), flush=True)
                time.sleep(600)
            ran = server.run("csentry:report", ["colorsys"], dict(os.environ), os.getcwd(), out, out + ".err", 30.0)
            print(json.dumps({"cloned": server.cloned, "server": server.pid, "code": ran.code if ran else None}))
        return 0

    def sleep(argv):
        time.sleep(600)

    def read_stdin(argv):
        print(json.dumps({"stdin": sys.stdin.read()}))
        return 0

    def parents(argv):  # the parent of a server of each preload (comma-separated) this run starts
        from bakeoff.launch.forkserver import ForkServer
        found = []
        if argv[0].startswith("umask="):  # a process a fresh server would inherit another umask from
            os.umask(int(argv.pop(0).partition("=")[2], 8))
        for preload in argv:
            with ForkServer(preload.split(","), dict(os.environ)) as server:
                server.preload("json")  # a request: it is ready
                stat = open(f"/proc/{server.pid}/stat").read()
                found.append(int(stat.rpartition(")")[2].split()[1]))
        print(json.dumps({"parents": found, "me": os.getpid()}))
        return 0

    def signals(argv):  # a run ignoring Ctrl-C and blocking SIGUSR1 (as a bakeoff worker is) starts a server
        import signal, subprocess
        from bakeoff.launch.forkserver import ForkServer
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
        def masks(status):
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            return [fields["SigIgn"].strip(), fields["SigBlk"].strip()]
        fresh = subprocess.run([sys.executable, "-c", "print(open('/proc/self/status').read())"],
                               capture_output=True, text=True, check=True).stdout
        with ForkServer(["csentry"], dict(os.environ)) as server:
            server.preload("json")  # a request: it is ready
            parent = int(open(f"/proc/{server.pid}/stat").read().rpartition(")")[2].split()[1])
            theirs = masks(open(f"/proc/{server.pid}/status").read())
        print(json.dumps({"parent": parent, "server": theirs, "fresh": masks(fresh)}))
        return 0
    """
)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "csentry.py").write_text(ENTRY)
    (tmp_path / "work").mkdir()
    path = os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {**os.environ, "PYTHONPATH": path, "PYTHONHASHSEED": "7"}


@pytest.fixture
def template(env: dict[str, str]):
    with ForkServer(["csentry"], env, clones=True) as started:
        yield started


def _run(server: ForkServer, tmp_path: Path, entry: str, *argv: str) -> dict:
    out = tmp_path / "out.txt"
    ran = server.run(f"csentry:{entry}", list(argv), server.env, tmp_path / "work", out, tmp_path / "err.txt", 60.0)
    assert ran is not None and ran.code == 0, (tmp_path / "err.txt").read_text()
    return json.loads(out.read_text().splitlines()[-1])


def _fresh_hash(env: dict[str, str]) -> int:
    return int(subprocess.run([sys.executable, "-c", "print(hash('bakeoff'))"], env=env, capture_output=True,
                              text=True, check=True).stdout)  # fmt: skip


@contextlib.contextmanager
def _stdin(path: Path | None, text: str = ""):
    """This process's fd 0 reads ``text`` from ``path`` (None: fd 0 is closed) until the end."""
    saved = os.dup(0)
    try:
        if path is None:
            os.close(0)
        else:
            path.write_text(text)
            with open(path) as handle:
                os.dup2(handle.fileno(), 0)
        yield
    finally:
        os.dup2(saved, 0)
        os.close(saved)


def test_a_server_that_fits_is_a_fork_of_the_template_with_its_hash_seed_and_others_start_fresh(
    template, env, tmp_path, monkeypatch
):
    here = tmp_path / "here"  # a module in the requester's directory, as `python -m` would find it
    here.mkdir()
    (here / "probe_here.py").write_text("")
    monkeypatch.chdir(here)
    with ForkServer(["csentry", "colorsys", "probe_here"], {**env, "BAKEOFF_ANYTHING": "read again"}) as clone:
        seen = _run(clone, tmp_path, "report", "colorsys", "probe_here")
        assert clone.cloned and psutil.Process(clone.pid).ppid() == template.pid
        assert seen["ppid"] == clone.pid and seen["modules"] == ["colorsys", "probe_here"]  # its own preload
        assert seen["hash"] == _fresh_hash(env)  # the seed of PYTHONHASHSEED=7, as a fresh interpreter's
        pid = clone.pid
    assert _gone(pid) and clone.pid is None
    # the controls: what a module may read at import differs, or the preload lacks the template's
    for server_env, preload in (({**env, "PYTHONHASHSEED": "8"}, ["csentry"]), ({**env, "OMP_NUM_THREADS": "1"},
                                ["csentry"]), (env, ["colorsys"])):  # fmt: skip
        with ForkServer(preload, server_env) as fresh:
            seen = _run(fresh, tmp_path, "report")
            assert not fresh.cloned and psutil.Process(fresh.pid).ppid() == os.getpid()
            assert seen["hash"] == _fresh_hash(server_env)
    assert _fresh_hash({**env, "PYTHONHASHSEED": "8"}) != _fresh_hash(env)  # the seed is what was compared
    assert _run(template, tmp_path, "report")["ppid"] == template.pid  # the template serves its own runs on


def test_a_run_of_the_template_starts_its_servers_as_clones_and_a_kill_9_of_it_leaves_none(template, tmp_path):
    seen = _run(template, tmp_path, "nested", str(tmp_path / "nested.txt"), "")
    assert seen["cloned"] and seen["code"] == 0
    assert json.loads((tmp_path / "nested.txt").read_text())["modules"] == ["colorsys"]
    assert _gone(seen["server"])  # closed with the run that started it

    out = tmp_path / "hung.txt"
    requester = template.fork("csentry:nested", [str(tmp_path / "x"), "hang"], template.env, tmp_path / "work", out,
                              tmp_path / "hung.err")  # fmt: skip
    deadline = time.monotonic() + 60
    while not (out.exists() and out.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    started = json.loads(out.read_text())
    assert started["cloned"]
    assert not _gone(started["server"], within_s=0.3) and not _gone(started["run"], within_s=0.3)  # the control
    os.kill(requester, 9)
    assert template.exit_code(requester, 30.0) == -9
    assert _gone(started["server"]) and _gone(started["run"])


def test_a_template_started_after_another_hands_it_down_and_the_one_that_imported_most_is_asked(env, tmp_path):
    with (
        ForkServer(["csentry", "colorsys"], env, clones=True) as more,
        ForkServer(["csentry"], env, clones=True) as less,
    ):
        assert not less.cloned  # a template is never a clone
        seen = _run(less, tmp_path, "parents", "csentry", "csentry,colorsys,textwrap", "csentry,textwrap")
        assert seen["parents"] == [less.pid, more.pid, less.pid]


def test_the_template_refuses_what_its_requesters_record_of_it_no_longer_fits(env, tmp_path):
    """A record handed down before the template imported more, and a requester whose umask a
    fresh server would inherit: the template refuses both, and the requester starts fresh."""
    more, less = ForkServer(["csentry", "colorsys"], env, clones=True), ForkServer(["csentry"], env, clones=True)
    with more, less:
        assert more.preload("textwrap") is not None  # less's record of it still says csentry, colorsys
        seen = _run(less, tmp_path, "parents", "csentry,colorsys,json", "csentry,colorsys,textwrap")
        assert seen["parents"] == [seen["me"], more.pid]  # refused, then (the control) cloned
        seen = _run(less, tmp_path, "parents", "umask=077", "csentry")
        assert seen["parents"] == [seen["me"]]
        assert _run(less, tmp_path, "parents", "csentry")["parents"] == [less.pid]  # the control


def test_a_run_ignoring_ctrl_c_gets_a_clone_that_ignores_and_blocks_what_a_fresh_server_would(template, tmp_path):
    """A bakeoff worker ignores Ctrl-C (its parent stops it): a sweep's cell runner asking for
    its trials' server was refused, and started a fresh interpreter for each sweep."""
    import signal

    seen = _run(template, tmp_path, "signals")
    assert seen["parent"] == template.pid  # a clone
    assert seen["server"] == seen["fresh"]  # what a fresh interpreter started by the run inherits
    assert int(seen["server"][0], 16) & (1 << (signal.SIGINT - 1))
    assert int(seen["server"][1], 16) & (1 << (signal.SIGUSR1 - 1))


def test_a_template_started_without_stdin_gives_its_clones_the_requesters(env, tmp_path):
    """The template's own fd 0 is then its request pipe (the lowest free descriptor), and its
    sys.stdin reads that: a clone still reads the requester's stdin through both."""
    with _stdin(None):
        template = ForkServer(["csentry"], env, clones=True)
    with _stdin(tmp_path / "stdin.txt", "the requester's"):
        clone = ForkServer(["csentry"], env)
    with template, clone:
        assert clone.cloned and _run(clone, tmp_path, "read_stdin")["stdin"] == "the requester's"


def test_the_templates_end_takes_its_clones_and_later_servers_start_fresh(env, tmp_path):
    template = ForkServer(["csentry"], env, clones=True)
    clone = ForkServer(["csentry"], env)
    assert _run(clone, tmp_path, "report")["ppid"] == clone.pid and clone.cloned
    template.close()
    assert _gone(clone.pid)
    ran = clone.run("csentry:report", [], env, tmp_path / "work", tmp_path / "o", tmp_path / "e", 10.0)
    assert ran is None and clone.broken  # the caller starts a fresh process instead
    clone.close()
    with ForkServer(["csentry"], env) as after:
        assert not after.cloned and _run(after, tmp_path, "report")["ppid"] == after.pid


def test_a_template_killed_without_a_word_leaves_later_servers_fresh(env, tmp_path):
    with ForkServer(["csentry"], env, clones=True) as template:
        os.kill(template.pid, 9)
        assert _gone(template.pid)
        with ForkServer(["csentry"], env) as after:  # still offered here, but no one reads the request
            assert not after.cloned and _run(after, tmp_path, "report")["ppid"] == after.pid


def test_a_clone_serves_with_the_requesters_stdin_as_a_fresh_server_would(template, env, tmp_path):
    with _stdin(tmp_path / "stdin.txt", "the requester's"):
        clone = ForkServer(["csentry"], env)
    with clone:
        assert clone.cloned and _run(clone, tmp_path, "read_stdin")["stdin"] == "the requester's"


def test_a_clones_resident_memory_starts_where_its_templates_is(template, env, tmp_path):
    """As a forked worker's (bakeoff.launch.residency): a clone's peak memory is the base of every
    run's figures, and must read as a fresh server's would."""

    def rss_file_kb(pid: int) -> int:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
        return int(fields["RssFile"].split()[0])

    with ForkServer(["csentry"], env) as clone:
        _run(clone, tmp_path, "report")
        assert clone.cloned and rss_file_kb(clone.pid) >= 0.9 * rss_file_kb(template.pid)


def test_an_execs_run_environment_differs_from_its_own_only_where_a_clone_may_differ():
    """The runs of ``bakeoff exec`` (and of its fork server) get this process's environment with
    the hash seed fixed and bakeoff's own variables changed: a template started in this
    environment with that hash seed fits them."""
    from bakeoff.runner.script_run import run_environment

    for seed in (0, 3):
        assert environment_key(run_environment(seed)) == environment_key({**os.environ, "PYTHONHASHSEED": str(seed)})


def test_a_process_that_ran_inductor_still_gets_clones_and_its_template_imports_no_inductor(env, tmp_path, monkeypatch):
    """The requester ran inductor, which named its cache directory in the environment (it reads it
    again when it compiles, never when imported): its servers are still the template's clones, and
    neither they nor the template have inductor imported. Seeded faults: a key that counted the
    variable (the requester's processes then started every server fresh, after one FLOP count),
    and a key that asked PyTorch for inductor's default directory wherever torch was imported
    (it imported inductor into the template that checked the request, and so into every clone)."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    clean = {name: value for name, value in env.items() if name != "TORCHINDUCTOR_CACHE_DIR"}
    with ForkServer(["torch"], clean, clones=True) as template:
        named = {**clean, "TORCHINDUCTOR_CACHE_DIR": cache_dir()}  # as inductor names it, in this process
        with ForkServer(["torch", "csentry"], named) as server:
            assert server.cloned
            assert _run(server, tmp_path, "report", "torch._inductor", "torch._dynamo")["modules"] == []
        assert _run(template, tmp_path, "report", "torch._inductor", "torch._dynamo")["modules"] == []
