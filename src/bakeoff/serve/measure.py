"""One target's service under load: started, warmed up, measured, checked, stopped.

:func:`measure_service` starts the command on the target (:mod:`bakeoff.serve.service`: its
device remapped, ``ready_s`` from its start), sends the cold traffic when asked (open loop, timed:
what a fresh replica answers in its first seconds), the warm-up requests one after another
(closed loop, untimed: first shapes compile, caches fill), then the measured requests on their
open-loop schedule (:mod:`bakeoff.serve.load`), asks the health URL whether it still serves,
searches the highest rate within the objectives when asked (:mod:`bakeoff.serve.search`, on the
same warm process), and stops the service's whole process group. A service that never became
healthy has no load run; a service that dies during the run leaves its unanswered requests as
connection errors in the run and its death in the :class:`~bakeoff.serve.service.Lifecycle`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bakeoff.script.child_reports import LEDGERS
from bakeoff.serve.audit import collect as collect_audit
from bakeoff.serve.audit import hook as audit_hook
from bakeoff.serve.audit import request as request_audit
from bakeoff.serve.load import LoadRun, send_on_schedule
from bakeoff.serve.search import RateSearch, SearchPlan, search_rate
from bakeoff.serve.service import Lifecycle, start_service

__all__ = ["AUDIT_REQUESTS", "Measured", "measure_service"]


@dataclass(frozen=True)
class Measured:
    """What one target's service did: its :class:`Lifecycle`, the measured ``load`` run (None:
    it never served), the warm-up (``warmed`` of ``warmup`` requests answered, in ``warmup_s``),
    the service's address and the machine's one-minute load average before and after the measured
    traffic (what a trial keeps around its timing)."""

    lifecycle: Lifecycle
    load: LoadRun | None
    warmup: int = 0
    warmed: int = 0
    warmup_s: float = 0.0
    url: str = ""
    load_average: tuple[float, ...] | None = None
    #: the placement audit of an audited start (:mod:`bakeoff.serve.audit`; as
    #: :func:`~bakeoff.checks.script_audit.read_audit` reads it), None: not audited
    audit: dict[str, Any] | None = None
    #: what the audited start did: its requests, or why it left no audit
    audit_note: str = ""
    #: the search of the highest rate within the objectives (None: none was asked for, or the
    #: service did not serve its measured traffic)
    search: RateSearch | None = None
    #: the traffic sent to the fresh replica before its warm-up (None: none was asked for)
    cold: LoadRun | None = None


def _warm_up(url: str, bodies: Sequence[Any], timeout_s: float) -> tuple[int, float]:
    """Send ``bodies`` one after another, each once the one before was answered: how many were
    answered without an error, and how long it took."""
    started = time.perf_counter()
    answered = 0
    for body in bodies:
        run = send_on_schedule(url, [body], [0.0], timeout_s=timeout_s)
        answered += sum(r.error is None for r in run.requests)
    return answered, time.perf_counter() - started


def measure_service(
    command: str,
    *,
    out: Path,
    device: str,
    device_map: Mapping[str, str],
    bodies: Sequence[Any],
    times: Sequence[float],
    warmup: Sequence[Any] = (),
    health: str = "/health",
    path: str = "/",
    start_timeout_s: float = 120.0,
    request_timeout_s: float = 30.0,
    env: Mapping[str, str] | None = None,
    audit: bool = False,
    search: SearchPlan | None = None,
    cold: tuple[Sequence[Any], Sequence[float]] | None = None,
    clients: int = 1,
) -> Measured:
    """Run ``command`` on ``device`` (with ``device_map``, see
    :func:`~bakeoff.serve.service.start_service`) through its warm-up and its measured run:
    ``bodies[i]`` POSTed to ``path`` at ``times[i]``. A fault (it never became healthy, died,
    stopped answering its health URL after the run) is in the lifecycle; the service is
    stopped whatever happens here, Ctrl-C included.

    With ``audit`` (and a ``device_map``), a service that served is then started once more, with
    the placement audit armed in its process (:mod:`bakeoff.serve.audit`), sent the warm-up
    requests (or the first :data:`AUDIT_REQUESTS` measured ones when there is no warm-up),
    and stopped; the measured start ran first, unaudited, and is the cold replica."""
    service = start_service(
        command, out=out, device=device, device_map=device_map, health=health, timeout_s=start_timeout_s, env=env
    )
    with service:
        if service.error is not None:
            return Measured(service.stop(), None, len(warmup))
        url = service.url + "/" + path.lstrip("/")
        first = send_on_schedule(url, *cold, timeout_s=request_timeout_s, clients=clients) if cold and cold[0] else None
        warmed, warmup_s = _warm_up(url, warmup, request_timeout_s)
        before = _load_1m()
        load = send_on_schedule(url, bodies, times, timeout_s=request_timeout_s, clients=clients)
        busy = (before, _load_1m()) if before is not None else None  # as a trial's: before and after timing
        fault = service.check()  # a crash or a hang during the run is the lifecycle's to keep
        searched = None
        if search is not None and fault is None:
            judged = search.judge(load, search.start) if load.requests else None  # its first step, when it decided
            searched = _search(service.url + "/" + path.lstrip("/"), search, request_timeout_s, clients, judged)
            service.check()
        measured = Measured(
            service.stop(), load, len(warmup), warmed, warmup_s, service.url, busy, search=searched, cold=first
        )
    if not (audit and device_map):
        return measured
    found, note = _audited_start(
        command,
        out=out / "audited",
        device=device,
        device_map=device_map,
        bodies=list(warmup) or list(bodies[:AUDIT_REQUESTS]),
        health=health,
        path=path,
        start_timeout_s=start_timeout_s,
        request_timeout_s=request_timeout_s,
        env=env,
    )
    return replace(measured, audit=found, audit_note=note)


def _search(url: str, plan: SearchPlan, timeout_s: float, clients: int = 1, first: Any = None) -> RateSearch:
    """The highest rate within the objectives on the running service (:mod:`bakeoff.serve.search`)."""

    def step(rate: float, scale: int) -> Any:
        bodies, times = plan.traffic(rate, scale)
        return plan.judge(send_on_schedule(url, bodies, times, timeout_s=timeout_s, clients=clients), rate)

    return search_rate(step, plan.start, max_steps=plan.steps, first=first)


#: Requests an audited start is sent when there is no warm-up.
AUDIT_REQUESTS = 8


def _audited_start(
    command: str,
    *,
    out: Path,
    device: str,
    device_map: Mapping[str, str],
    bodies: Sequence[Any],
    health: str,
    path: str,
    start_timeout_s: float,
    request_timeout_s: float,
    env: Mapping[str, str] | None,
) -> tuple[dict[str, Any] | None, str]:
    """Start the service with the placement audit armed, send ``bodies`` one after another,
    collect the audit and stop it: (the audit or None, what happened)."""
    folder = out / "audit"
    after = audit_hook(device, folder)
    service = start_service(
        command, out=out, device=device, device_map=device_map, health=health, timeout_s=start_timeout_s, env=env,
        after=after,
    )  # fmt: skip
    with service:
        if service.error is not None:
            return None, f"the audited start of the service failed: {service.error.message}"
        answered, _ = _warm_up(service.url + "/" + path.lstrip("/"), bodies, request_timeout_s)
        if not any((out / LEDGERS).glob("*.json")):  # its remap (and so the audit) arms at import torch
            return None, "the service's own process never imported torch: there was no device work to audit"
        request_audit(folder)
        found = collect_audit(folder)
    if found is None:
        return None, "the audited start wrote no audit in time"
    return found, f"placement audited on a start of its own over {answered} of {len(bodies)} request(s) answered"


def _load_1m() -> float | None:
    """The machine's one-minute load average (None where the system has none)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None
