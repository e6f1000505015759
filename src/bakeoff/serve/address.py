"""Where a service listens and how it is asked whether it is ready: its command line with
``{port}`` and ``{device}`` filled in, a free loopback port, whether a port is taken, the base and
health URLs, and one probe of the health URL."""

from __future__ import annotations

import re
import shlex
import socket
import sys
from urllib.parse import urlsplit

from bakeoff.errors import SpecError

__all__ = ["PLACEHOLDERS", "command_line", "free_port", "port_taken", "probe", "urls", "words"]

#: The placeholders a command line may hold: the port it is to listen on, the target's device,
#: and the Python interpreter bakeoff runs on (its environment's, activated or not).
PLACEHOLDERS = ("port", "device", "python")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def words(command: str) -> list[str]:
    """``command`` split, each placeholder known (see :func:`command_line`)."""
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise SpecError(f"cannot split the service's command line: {exc}", hint="balance its quotes") from None
    if not words:
        raise SpecError("the service's command line is empty", hint="e.g. 'python app.py --port {port}'")
    for word in words:
        for name in _PLACEHOLDER.findall(word):
            if name not in PLACEHOLDERS:
                raise SpecError(
                    f"unknown placeholder {{{name}}} in the service's command line",
                    hint=f"use {', '.join('{' + p + '}' for p in PLACEHOLDERS)}",
                )
    return words


def command_line(command: str, port: int | None = None, device: str = "") -> list[str]:
    """``command`` split as a POSIX shell would (no shell runs it), ``{port}``, ``{device}`` and
    ``{python}`` (this interpreter) filled in.

    Raises:
        SpecError: an empty command, unbalanced quotes, an unknown placeholder, or a placeholder
            with nothing to fill it.
    """
    values = {"port": "" if port is None else str(port), "device": device, "python": sys.executable}

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if not values[name]:
            raise SpecError(f"the service's command line has {{{name}}} but no {name} was given")
        return values[name]

    return [_PLACEHOLDER.sub(fill, word) for word in words(command)]


def free_port() -> int:
    """A loopback port free now (the system's choice; another process may take it before the
    service binds it, which the service then reports as ``port_in_use``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_taken(port: int) -> bool:
    """Whether a socket is bound to ``port`` on the loopback address (or on every address). The
    test bind sets ``SO_REUSEADDR``, as servers do, so a closed connection's TIME_WAIT does not
    count."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def probe(url: str, timeout_s: float) -> tuple[bool, str]:
    """GET ``url`` once: (answered 2xx, what happened, for a message). Proxies are not used."""
    import urllib.error
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout_s) as response:
            response.read()
            return 200 <= response.status < 300, f"answered {response.status}"
    except urllib.error.HTTPError as exc:
        return False, f"answered {exc.code}"
    except urllib.error.URLError as exc:
        return False, f"no answer: {getattr(exc.reason, 'strerror', None) or exc.reason}"
    except (OSError, ValueError) as exc:  # a timeout, a reset, a malformed answer
        return False, f"no answer: {type(exc).__name__} {exc}".rstrip()


def urls(words: list[str], port: int | None, health: str) -> tuple[int | None, str, str]:
    """The port, the base URL and the health URL of a command line split in ``words``."""
    if port is None and any("{port}" in word for word in words):
        port = free_port()
    if health.startswith(("http://", "https://")):
        health = health.replace("{port}", str(port)) if port is not None else health
        parts = urlsplit(health)
        if "{port}" in health or not parts.hostname:
            raise SpecError(
                f"the health URL {health} names no port to reach",
                hint="put {port} in its command line, or give a --health URL with its port",
            )
        try:
            port = port if port is not None else parts.port
        except ValueError:
            raise SpecError(f"the health URL {health} has no valid port") from None
        return port, f"{parts.scheme}://{parts.netloc}", health
    if port is None:
        raise SpecError(
            "the service's port is unknown", hint="put {port} in its command line, or give a --health URL with its port"
        )
    url = f"http://127.0.0.1:{port}"
    return port, url, url + "/" + health.lstrip("/")
