"""A real PostgreSQL server for the knowledge-base tests.

``BAKEOFF_TEST_POSTGRES_URL`` names a server to use (its role must be allowed to create
databases); otherwise a throw-away server is started from the PostgreSQL binaries on this
machine (Debian's ``postgresql`` package) on a private port and socket directory, loopback only.
Each test gets a fresh, empty database. When no server can be started the tests are skipped
with the reason, except under CI (``CI`` set) or with an explicit URL, where that is a failure.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url


class NoServer(Exception):
    """Why no PostgreSQL server could be had."""


def _bindir() -> Path:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name))
    for candidate in reversed(candidates):
        if (Path(candidate) / "pg_ctl").exists():
            return Path(candidate)
    raise NoServer("no PostgreSQL server binaries (pg_ctl, initdb) here: install Debian's postgresql package")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_server_user(command: list[str]) -> list[str]:
    """initdb refuses to run as root: run the server's commands as the postgres user then."""
    if os.geteuid() != 0:
        return command
    if shutil.which("runuser"):
        return ["runuser", "-u", "postgres", "--", *command]
    return ["su", "-s", "/bin/sh", "postgres", "-c", " ".join(f"'{part}'" for part in command)]


def _run(command: list[str]) -> None:
    done = subprocess.run(_as_server_user(command), capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise NoServer(f"{Path(command[0]).name} failed: {detail[-1] if detail else done.returncode}")


def _start_server(root: Path) -> str:
    bindir = _bindir()
    if os.geteuid() == 0:
        try:
            shutil.chown(root, "postgres")
        except (LookupError, OSError) as exc:
            raise NoServer(f"running as root and there is no usable postgres user ({exc})") from exc
    port = _free_port()
    data = root / "data"
    _run([str(bindir / "initdb"), "-D", str(data), "-U", "bakeoff", "--auth=trust", "-E", "UTF8", "--no-sync"])
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c fsync=off -c full_page_writes=off"
    _run([str(bindir / "pg_ctl"), "-D", str(data), "-l", str(root / "log"), "-w", "-t", "60", "-o", options, "start"])
    return f"postgresql://bakeoff@127.0.0.1:{port}/postgres"


def _stop_server(root: Path) -> None:
    try:
        _run([str(_bindir() / "pg_ctl"), "-D", str(root / "data"), "-m", "immediate", "-w", "stop"])
    except (NoServer, subprocess.TimeoutExpired):
        pass
    shutil.rmtree(root, ignore_errors=True)


def _unavailable(reason: str, explicit: bool) -> None:
    message = f"PostgreSQL tests need a server: {reason}"
    if explicit or os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def _admin(url: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        conn.execute(statement)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The URL of a PostgreSQL server's maintenance database that tests may create databases on."""
    explicit = os.environ.get("BAKEOFF_TEST_POSTGRES_URL")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _unavailable("the psycopg driver is not installed (pip install 'bakeoff[postgres]')", bool(explicit))
    if explicit:
        try:
            _admin(explicit, "SELECT 1")
        except Exception as exc:
            _unavailable(f"cannot connect to BAKEOFF_TEST_POSTGRES_URL: {str(exc).strip()}", True)
        yield explicit
        return
    root = Path(tempfile.mkdtemp(prefix="bakeoff-pg-"))
    try:
        url = _start_server(root)
    except (NoServer, OSError, subprocess.TimeoutExpired) as exc:
        shutil.rmtree(root, ignore_errors=True)
        _unavailable(str(exc), False)
    try:
        yield url
    finally:
        _stop_server(root)


@pytest.fixture
def pg_url(postgres_server: str) -> Iterator[str]:
    """A fresh, empty database on the test server, dropped afterwards."""
    name = f"bakeoff_test_{uuid.uuid4().hex[:12]}"
    _admin(postgres_server, f'CREATE DATABASE "{name}"')
    try:
        yield make_url(postgres_server).set(database=name).render_as_string(hide_password=False)
    finally:
        _admin(postgres_server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
