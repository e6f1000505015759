"""Where a service's work ran: the placement audit of its own process, on an audited start.

An audit records every ATen op in Python (:class:`~bakeoff.checks.script_audit.ScriptAudit`,
the one ``bakeoff exec`` runs around a script), which costs microseconds per op: it would
change the latencies it sits beside. So ``bakeoff serve`` audits a target's service on a start
of its own, before the measured one (:func:`bakeoff.serve.measure.measure_service`): the
service is started remapped as always, with :func:`arm` called in its process once its remap
is installed (:func:`hook`, through :func:`bakeoff.script.children.remapped_children`'s
``after``); bakeoff sends it the warm-up requests, asks for the audit (:func:`request` writes
:data:`FLUSH`; the audit's own thread, polling every 50 ms, sees it and writes
:data:`~bakeoff.checks.script_audit.AUDIT`), reads it (:func:`collect`) and stops it. The
measured start runs unaudited.

What the audit covers: every op of the service's own process from its first ``import torch``
(model loading included) through the audited requests, in its main thread (an async server's
event loop), every thread it started after that (a plain ``def`` endpoint's worker thread, a
streaming producer) and autograd's. What it cannot see: the measured traffic itself (a request
path only those requests take, a shape first seen there), the service's child processes, and
threads started before ``import torch`` or outside ``threading``.
"""

from __future__ import annotations

import atexit
import threading
import time
from pathlib import Path
from typing import Any

from bakeoff.checks.script_audit import AUDIT, ScriptAudit, read_audit

__all__ = ["FLUSH", "arm", "collect", "hook", "request"]

#: The file bakeoff writes in the audit's directory to ask for the audit.
FLUSH = "audit.flush"
_POLL_S = 0.05
_audit: ScriptAudit | None = None


def hook(device: str, out: Path) -> dict[str, Any]:
    """The ``after`` hook that audits a service's process on ``device``, writing to ``out``."""
    return {f"{__name__}:arm": {"device": device, "out": str(out)}}


def arm(config: dict[str, Any]) -> None:
    """In the service's process (see the module docstring): start the audit, in the main thread
    and every thread started from now on, and the thread that writes it when asked (or at exit)."""
    global _audit
    if _audit is not None:
        return
    out = Path(config["out"])
    out.mkdir(parents=True, exist_ok=True)
    what = (
        "every ATen op of the service's own process from its import of torch through the warm-up requests of "
        "an audited start (its main thread, the threads it started after torch loaded, autograd's); not the "
        "measured traffic, not its child processes"
    )
    audit = _audit = ScriptAudit(config["device"], out, what=what)
    audit.__enter__()
    atexit.register(audit.write)

    def watch() -> None:
        flush = out / FLUSH
        while not flush.exists():
            time.sleep(_POLL_S)
        audit.write()

    threading.Thread(target=watch, name="bakeoff-service-audit", daemon=True).start()  # not audited itself
    audit.follow_threads()


def request(out: Path) -> None:
    """Ask the audited service for its audit (see the module docstring)."""
    (Path(out) / FLUSH).write_text("")


def collect(out: Path, timeout_s: float = 10.0) -> dict[str, Any] | None:
    """The audit the service wrote in ``out`` (as :func:`~bakeoff.checks.script_audit.read_audit`
    reads it), waiting up to ``timeout_s`` for it; None: it wrote none (it was not armed, or
    could not answer in time)."""
    deadline = time.monotonic() + timeout_s
    path = Path(out) / AUDIT
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(_POLL_S)
    return read_audit(out) if path.exists() else None
