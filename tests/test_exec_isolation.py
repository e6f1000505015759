"""``bakeoff exec`` keeps its runs apart: every run of the script reads the same stdin, and nothing
the script starts outlives its run.

The seeded faults: a script that reads its stdin, given piped input (the reference run used to
consume it, leaving the target nothing) and given a terminal (both runs used to wait on it until
the timeout); a script whose children outlive it (a ``sleep`` in the background of a shell that
ends, one detached with ``setsid``, a forked Python process). The clean controls: the children
script reads no stdin and is given piped input anyway, and its child that ends by itself does
its work as it would without bakeoff.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from tests.conftest import EMU_ENV, MARK, bakeoff_cli, marked, still_running

pytestmark = pytest.mark.isolated

READS_STDIN = """
import json
import sys

import torch

data = sys.stdin.read()
x = torch.tensor([len(data), sum(data.encode()) % 1000003], dtype=torch.float32, device="cuda")
with open("stdin.json", "w") as out:
    json.dump({"read": x.cpu().tolist()}, out)
print(f"read {len(data)} characters")
"""

STARTS_CHILDREN = """
import json
import os
import subprocess
import sys
import time

import torch

pids = {}
shell = subprocess.run(["sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True)
pids["background"] = int(shell.stdout)
shell = subprocess.run(["sh", "-c", "setsid sleep 300 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True)
pids["detached"] = int(shell.stdout)
forked = os.fork()
if forked == 0:
    time.sleep(300)
    os._exit(0)
pids["forked"] = forked
subprocess.run([sys.executable, "-c", "open('child.txt', 'w').write('the child did its work')"], check=True)
print("pids", json.dumps(pids))
print(open("child.txt").read())
x = torch.ones(3, device="cuda")
print(float(x.sum()))
"""


def _exec(tmp_path: Path, name: str, source: str, *ours: str, stdin=None, input: str | None = None, env=None):
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / name).write_text(source)
    if stdin is None:
        return bakeoff_cli(
            "exec", *ours, "--format", "json", "--db", str(tmp_path / "b.db"), name, cwd=work,
            env={**os.environ, **EMU_ENV, **(env or {})}, timeout=300, input=input,
        )  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "bakeoff", "exec", *ours, "--format", "json", "--db", str(tmp_path / "b.db"), name],
        capture_output=True,
        text=True,
        cwd=work,
        env={**os.environ, **EMU_ENV, **(env or {})},
        timeout=300,
        stdin=stdin,
        input=input,
    )


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended


def test_piped_stdin_reaches_every_run_alike(tmp_path: Path) -> None:
    temp = tmp_path / "tmp"  # where the runs' shared copy of the input is kept
    temp.mkdir()
    ran = _exec(tmp_path, "reads_stdin.py", READS_STDIN, "--on", "emu", input="twelve bytes", env={"TMPDIR": str(temp)})
    assert ran.returncode == 0, ran.stderr[-3000:]
    # that copy too is gone once bakeoff ends (PyTorch's compiler names its cache directory there)
    assert not [path for path in temp.iterdir() if not path.name.startswith("torchinductor_")]
    reference, emu = json.loads(ran.stdout)["results"]
    for result in (reference, emu):
        assert result["status"] == "ok", result.get("error")
        assert "read 12 characters" in {line["text"] for line in result["log"]}
        assert "every run of the script read the same stdin: the 12 bytes bakeoff was given" in result["notes"]
    assert emu["correctness"]["verdict"] == "pass", emu["correctness"]["reason"]  # the same file on both sides
    assert any("stdin.json" in o["name"] for o in emu["correctness"]["outputs"]), emu["correctness"]["outputs"]
    if sys.platform.startswith("linux"):  # the runs were forked from one warm process, stdin and all
        assert any(
            n.startswith("each run was forked from one process") for n in json.loads(ran.stdout)["workload"]["notes"]
        )


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a pseudo-terminal for stdin")
def test_a_terminal_on_stdin_is_no_input_and_no_wait(tmp_path: Path) -> None:
    import pty

    leader, follower = pty.openpty()
    try:
        started = time.monotonic()
        ran = _exec(tmp_path, "reads_stdin.py", READS_STDIN, "--on", "emu", "--timeout", "60", stdin=follower)
        took = time.monotonic() - started
    finally:
        os.close(leader)
        os.close(follower)
    assert ran.returncode == 0, ran.stderr[-3000:]
    reference, emu = json.loads(ran.stdout)["results"]
    for result in (reference, emu):
        assert result["status"] == "ok", result.get("error")
        assert "read 0 characters" in {line["text"] for line in result["log"]}
        assert any(
            n.startswith("the script's stdin was empty (/dev/null): bakeoff's is a terminal") for n in result["notes"]
        )
    assert took < 120  # neither run waited for its timeout


@pytest.mark.xdist_group("exec_isolation_children_and_environment")
@pytest.mark.xdist_group("test_exec_isolation_shared")  # with the other reader of its run
def test_nothing_the_script_starts_outlives_its_run(children_and_environment) -> None:
    ran = children_and_environment["ran"]
    assert ran.returncode == 0, ran.stderr[-3000:]
    (reference,) = json.loads(ran.stdout)["results"]
    assert reference["status"] == "ok", reference.get("error")  # the control: stdin it never reads changes nothing
    said = {line["text"] for line in reference["log"]}
    assert "the child did its work" in said  # the control: a child that ends by itself is left to do so
    (line,) = [text for text in said if text.startswith("pids ")]
    pids = json.loads(line.removeprefix("pids "))
    assert set(pids) == {"background", "detached", "forked"}
    deadline = time.monotonic() + 5
    while any(_alive(pid) for pid in pids.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert {name: _alive(pid) for name, pid in pids.items()} == dict.fromkeys(pids, False)
    (note,) = [n for n in reference["notes"] if "still running when the script ended" in n]
    assert note.startswith("3 processes the script started were still running when the script ended: killed")


HANGS_WITH_A_DETACHED_CHILD = """
import subprocess

shell = subprocess.run(["sh", "-c", "setsid sleep 300 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True)
open(PIDS, "w").write(shell.stdout)
import time

time.sleep(600)
"""


def test_a_run_stopped_at_its_timeout_takes_what_it_detached_with_it(tmp_path: Path) -> None:
    pids = tmp_path / "pids.txt"
    source = HANGS_WITH_A_DETACHED_CHILD.replace("PIDS", repr(str(pids)))
    ran = _exec(tmp_path, "hangs.py", source, "--on", "cpu", "--timeout", "8")
    assert ran.returncode == 0, ran.stderr[-3000:]
    (reference,) = json.loads(ran.stdout)["results"]
    assert reference["status"] == "error" and "8" in reference["error"]["message"]  # the timeout, as before
    detached = int(pids.read_text())
    deadline = time.monotonic() + 5
    while _alive(detached) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(detached)  # left its process group, yet ended with the run


STARTS_CHILDREN_AND_WAITS = """
import subprocess
import time

started = [subprocess.Popen(["sleep", "300"]), subprocess.Popen(["sleep", "300"], start_new_session=True)]
shell = subprocess.run(["sh", "-c", "setsid sleep 300 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True)
open(PIDS, "w").write(" ".join([*(str(p.pid) for p in started), shell.stdout.strip()]))
time.sleep(600)
"""


def test_a_kill_9_of_bakeoff_takes_what_the_script_started_with_it(tmp_path: Path) -> None:
    # the script's own children: one in its process group, two that left it (setsid); the run's
    # supervisor used to die of the parent-death SIGKILL at once, leaving them to init
    pids = tmp_path / "pids.txt"
    work = tmp_path / "work"
    work.mkdir()
    (work / "waits.py").write_text(STARTS_CHILDREN_AND_WAITS.replace("PIDS", repr(str(pids))))
    marker = uuid.uuid4().hex
    process = subprocess.Popen(
        [sys.executable, "-m", "bakeoff", "exec", "--on", "cpu", "--db", str(tmp_path / "b.db"), "waits.py"],
        cwd=work, env={**os.environ, MARK: marker}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while not (pids.exists() and len(pids.read_text().split()) == 3) and time.monotonic() < deadline:
            time.sleep(0.2)
        children = [int(pid) for pid in pids.read_text().split()]
        ours = [pid for pid in marked(marker) if pid != process.pid]
    finally:
        process.kill()
        process.wait()
    assert ours and set(children) <= set(ours)  # the control: they ran, marked as the run's
    assert still_running(children) == [] and still_running(ours) == []


LOOKS_FOR_THE_DATABASE = """
import json
import os

print("found", json.dumps({name: os.environ.get(name) for name in ("BAKEOFF_DB", "BAKEOFF_ARTIFACTS", "PWD")}))
print("cwd", os.getcwd())
"""


@pytest.fixture(scope="module")
def children_and_environment(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One ``bakeoff exec --on cpu`` run, shared: the script starts children that outlive it (and
    is given stdin it never reads), then says where it thinks the knowledge base is, with
    BAKEOFF_DB, BAKEOFF_ARTIFACTS and PWD set for bakeoff (as a user's shell would)."""
    tmp_path = tmp_path_factory.mktemp("children_and_environment")
    told = {"BAKEOFF_DB": str(tmp_path / "b.db"), "BAKEOFF_ARTIFACTS": str(tmp_path / "artifacts"),
            "PWD": str(tmp_path / "work")}  # fmt: skip
    source = STARTS_CHILDREN + LOOKS_FOR_THE_DATABASE
    ran = _exec(tmp_path, "starts_children.py", source, "--on", "cpu", input="never read", env=told)
    return {"ran": ran, "tmp_path": tmp_path}


@pytest.mark.xdist_group("exec_isolation_children_and_environment")
@pytest.mark.xdist_group("test_exec_isolation_shared")
def test_a_run_is_not_told_where_the_knowledge_base_is(children_and_environment) -> None:
    ran, tmp_path = children_and_environment["ran"], children_and_environment["tmp_path"]
    assert ran.returncode == 0, ran.stderr[-3000:]
    (reference,) = json.loads(ran.stdout)["results"]
    said = {line["text"] for line in reference["log"]}
    (found,) = [json.loads(t.removeprefix("found ")) for t in said if t.startswith("found ")]
    (cwd,) = [t.removeprefix("cwd ") for t in said if t.startswith("cwd ")]
    assert found["BAKEOFF_DB"] is None and found["BAKEOFF_ARTIFACTS"] is None
    assert found["PWD"] == cwd != str(tmp_path / "work")  # its copy of the directory, not bakeoff's own
    assert (tmp_path / "b.db").exists()  # the control: bakeoff itself stored the run where it was told
