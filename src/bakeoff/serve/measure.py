"""One target's service under load: started, warmed up, measured, checked, stopped.

:func:`measure_service` starts the command on the target (:mod:`bakeoff.serve.service`: its
device remapped, ``ready_s`` from its start), sends the warm-up requests one after another
(closed loop, untimed: first shapes compile, caches fill), then the measured requests on their
open-loop schedule (:mod:`bakeoff.serve.load`), asks the health URL whether it still serves, and
stops the service's whole process group. A service that never became healthy has no load run; a
service that dies during the run leaves its unanswered requests as connection errors in the run
and its death in the :class:`~bakeoff.serve.service.Lifecycle`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bakeoff.serve.load import LoadRun, send_on_schedule
from bakeoff.serve.service import Lifecycle, start_service

__all__ = ["Measured", "measure_service"]


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
) -> Measured:
    """Run ``command`` on ``device`` (with ``device_map``, see
    :func:`~bakeoff.serve.service.start_service`) through its warm-up and its measured run:
    ``bodies[i]`` POSTed to ``path`` at ``times[i]``. A fault (it never became healthy, died,
    stopped answering its health URL after the run) is in the lifecycle; the service is
    stopped whatever happens here, Ctrl-C included."""
    service = start_service(
        command, out=out, device=device, device_map=device_map, health=health, timeout_s=start_timeout_s, env=env
    )
    with service:
        if service.error is not None:
            return Measured(service.stop(), None, len(warmup))
        url = service.url + "/" + path.lstrip("/")
        warmed, warmup_s = _warm_up(url, warmup, request_timeout_s)
        before = _load_1m()
        load = send_on_schedule(url, bodies, times, timeout_s=request_timeout_s)
        busy = (before, _load_1m()) if before is not None else None  # as a trial's: before and after timing
        service.check()  # a crash or a hang during the run is the lifecycle's to keep
        return Measured(service.stop(), load, len(warmup), warmed, warmup_s, service.url, busy)


def _load_1m() -> float | None:
    """The machine's one-minute load average (None where the system has none)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None
