"""A service's lifecycle with real processes and sockets (tests/fixtures/serve_app.py): healthy and
timed from its start, and each fault a value with its category (a crash at start with its stderr,
never healthy, a crash or a hang while serving, a port in use, a leftover process), each beside a
clean control; nothing of a service outlives the process that started it, a ``kill -9`` included."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from tests.conftest import FIXTURES

from bakeoff.errors import SpecError
from bakeoff.serve.service import Lifecycle, start_service

APP = f"{sys.executable} {FIXTURES / 'serve_app.py'} --port {{port}}"
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _get(url: str, data: bytes | None = None) -> dict:
    with _DIRECT.open(url, data=data, timeout=10) as response:
        return json.loads(response.read())


def _gone(*pids: int, timeout_s: float = 10.0) -> list[int]:
    """Wait until none of ``pids`` runs (a zombie has ended): those still running after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def test_a_healthy_service_is_timed_from_its_start_and_stops_clean(tmp_path: Path):
    # the seeded delay: healthy only 0.6 s after it started serving; the control: at once
    slow = start_service(f"{APP} --ready-after-s 0.6", out=tmp_path / "slow", timeout_s=30)
    quick = start_service(APP, out=tmp_path / "quick", timeout_s=30)
    try:
        assert slow.error is None and quick.error is None, (slow.error, quick.error)
        # a lower bound only (the machine's load sets the rest): healthy no sooner than its delay
        assert slow.ready_s >= 0.6 and 0 < quick.ready_s < 30
        assert _get(quick.health_url)["pid"] == quick.pid
        answer = _get(quick.url + "/", json.dumps({"i": 7}).encode())  # it serves, on the chosen port
        assert answer["i"] == 7 and quick.stdout_path.read_text().split() == [str(quick.port)]
        assert quick.check(timeout_s=5) is None
    finally:
        lifecycles = [slow.stop(), quick.stop()]
    for lifecycle, service in zip(lifecycles, (slow, quick), strict=True):
        assert lifecycle.ok and lifecycle.leftovers == () and not lifecycle.killed, lifecycle
        assert lifecycle.exit_code == -signal.SIGTERM and lifecycle.ready_s == service.ready_s
        assert _gone(service.pid) == []
    assert quick.stop() is lifecycles[1]  # stopping again: the same value


def test_a_crash_at_start_is_caught_at_once_with_its_stderr(tmp_path: Path):
    began = time.monotonic()
    service = start_service(f"{APP} --crash-after-s 0", out=tmp_path, timeout_s=60)
    assert time.monotonic() - began < 30  # seen by its death, not by its 60 s timeout
    error = service.error
    assert error is not None and (error.category, error.phase) == ("crash", "start")
    assert "exited with code 3 before it became healthy: serve_app: seeded crash at start" in error.message
    assert "seeded crash at start" in error.traceback
    assert service.ready_s is None and service.stop().faults == (error,)
    assert _gone(service.pid) == []


def test_a_service_that_never_becomes_healthy_times_out(tmp_path: Path):
    service = start_service(f"{APP} --never-healthy", out=tmp_path, timeout_s=3)
    error = service.error
    assert error is not None and (error.category, error.phase) == ("timeout", "start"), error
    assert "within 3 s" in error.message and "answered 503" in error.message
    lifecycle = service.stop()
    assert lifecycle.ready_s is None and lifecycle.fault("timeout") == error
    assert _gone(service.pid) == []


def test_a_service_that_answered_503_then_hung_before_its_start_timed_out_is_named_with_both(tmp_path: Path):
    """The seeded service answers 503 for 0.5 s, then its event loop blocks: the probes after that
    time out, and the message keeps the answer it got before them."""
    service = start_service(f"{APP} --never-healthy --hang-after-s 0.5", out=tmp_path, timeout_s=4)
    error = service.error
    assert error is not None and (error.category, error.phase) == ("timeout", "start"), error
    assert "answered 503, then no answer" in error.message, error.message
    service.stop()
    assert _gone(service.pid) == []


def test_a_crash_and_a_hang_while_serving_are_found_by_the_check(tmp_path: Path):
    # the control: each serves until its seeded fault, 3 s after its own start
    crashing = start_service(f"{APP} --crash-after-s 3.0", out=tmp_path / "crash", timeout_s=30)
    serving_before_the_crash = crashing.error is None and crashing.check() is None
    hanging = start_service(f"{APP} --hang-after-s 3.0", out=tmp_path / "hang", timeout_s=30)
    try:
        assert serving_before_the_crash and hanging.error is None and hanging.check() is None
        deadline = time.monotonic() + 30
        while crashing.check(timeout_s=0.2) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        crash = crashing.check()
        while hanging.check(timeout_s=0.3) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        hang = hanging.check(timeout_s=0.3)
    finally:
        crashed, hung = crashing.stop(), hanging.stop()
    assert crash is not None and (crash.category, crash.phase) == ("crash", "serve"), crash
    assert "while it served" in crash.message and "seeded crash while serving" in crash.traceback
    assert crashed.faults == (crash,) and crashed.exit_code == 3
    assert hang is not None and (hang.category, hang.phase) == ("timeout", "serve"), hang
    assert hung.faults == (hang,) and hung.exit_code == -signal.SIGTERM  # a hung loop still ends on SIGTERM
    assert _gone(crashing.pid, hanging.pid) == []


def test_a_port_in_use_is_reported_and_the_service_is_not_started(tmp_path: Path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        service = start_service(APP, out=tmp_path / "taken", port=port, timeout_s=30)
        assert service.error is not None and service.error.category == "port_in_use", service.error
        assert f"port {port} is already in use" in service.error.message and service.pid is None
    # the control: the same port once it is free
    with start_service(APP, out=tmp_path / "free", port=port, timeout_s=30) as free:
        assert free.error is None and free.port == port
    # a service that dies saying its address is in use (taken after the check) reads the same;
    # an ordinary crash at start is the control (test above)
    said = f"{sys.executable} -c \"import sys; sys.exit('OSError: [Errno 98] address already in use')\" {{port}}"
    raced = start_service(said, out=tmp_path / "raced", timeout_s=30)
    assert raced.error is not None and (raced.error.category, raced.error.phase) == ("port_in_use", "start")


def test_a_process_that_left_the_group_is_killed_at_the_stop_and_named(tmp_path: Path):
    service = start_service(f"{APP} --spawn-child", out=tmp_path, timeout_s=30)
    assert service.error is None
    child = _get(service.health_url)["child"]
    assert os.getpgid(child) != os.getpgid(service.pid)  # it left the service's group (setsid)
    lifecycle = service.stop()
    assert lifecycle.leftovers == (f"sleep (pid {child})",)
    leftover = lifecycle.fault("leftover")
    assert leftover is not None and f"sleep (pid {child})" in leftover.message
    assert _gone(service.pid, child) == []
    assert Lifecycle.from_dict(json.loads(json.dumps(lifecycle.to_dict()))) == lifecycle
    # the control, the healthy service of the first test, has no leftover


def test_a_kill_9_of_the_process_that_started_a_service_leaves_none_of_it(tmp_path: Path):
    script = f"""
import json, sys, time, urllib.request
from bakeoff.serve.service import start_service
service = start_service({f"{APP} --spawn-child"!r}, out={str(tmp_path)!r}, timeout_s=30)
opener = urllib.request.build_opener(urllib.request.ProxyHandler({{}}))
child = json.loads(opener.open(service.health_url).read())["child"]
print(json.dumps([service.keeper_pid, service.pid, child]), flush=True)
time.sleep(600)
"""
    starter = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pids = json.loads(starter.stdout.readline())
        assert _gone(*pids, timeout_s=0) == pids  # the control: all of it runs until the kill
        starter.kill()
        starter.wait()
        assert _gone(*pids) == []
    finally:
        starter.kill()
        starter.wait()


@pytest.mark.slow  # about 7 s: torch and the emu device load in the service
@pytest.mark.emu
def test_a_device_mapping_runs_a_cuda_service_on_the_emu_device(tmp_path: Path):
    command = f"{APP} --torch-device {{device}}"
    with start_service(command, out=tmp_path / "emu", device="cuda", device_map={"cuda": "emu"}, timeout_s=120) as s:
        assert s.error is None, s.error
        assert _get(s.health_url)["device"] == "emu:0"
    import torch

    if not torch.cuda.is_available():  # the control: as written, it needs a GPU this machine lacks
        as_written = start_service(command, out=tmp_path / "as-written", device="cuda", timeout_s=120)
        assert as_written.error is not None and as_written.error.category == "crash"
        assert "cuda" in as_written.error.traceback.lower()


@pytest.mark.parametrize(
    ("command", "options", "says"),
    [
        ("", {}, "is empty"),
        ("python 'app.py --port {port}", {}, "No closing quotation"),
        ("python app.py --port {prot}", {}, "unknown placeholder {prot}"),
        ("python app.py --port {port} --on {device}", {}, "has {device} but no device was given"),
        ("python app.py", {}, "the service's port is unknown"),
    ],
)
def test_a_malformed_command_line_is_a_spec_error(tmp_path: Path, command: str, options: dict, says: str):
    with pytest.raises(SpecError, match=None) as raised:
        start_service(command, out=tmp_path, **options)
    assert says in raised.value.message
    assert not any(tmp_path.iterdir())  # nothing was started
