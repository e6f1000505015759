"""Requests sent to an HTTP service on an open-loop schedule, each timed from its scheduled send.

One dispatcher walks the schedule (:mod:`bakeoff.serve.schedule`): it sleeps until each request
is due, starts it, and records when it really went out. The request runs on its own; the next
one is due when the schedule says, answered or not. Each :class:`Sent` keeps:

* ``planned``: when it was due (seconds from the run's start), ``sent``: when it went out,
  ``done``: when its whole response had arrived (None: it failed before);
* ``latency_s`` = done - planned, the latency a user who arrived on schedule saw: a client that
  started late (a stalled service holds its connections; a busy client falls behind) does not
  hide the wait, as timing from the send would (*coordinated omission*: vLLM's benchmark timed
  from the send and reported p99 507 ms where the schedule-anchored p99 was 3,330 ms);
* ``from_send_s`` = done - sent, beside it, and ``lag_s`` = sent - planned, the client's own
  dispatch lag: a run whose lag is large against the latencies it reports did not keep its
  schedule and is not to be judged (:attr:`LoadRun.kept_schedule`);
* ``status`` (the HTTP status; 0 when no response came) and ``error`` (``timeout``,
  ``connection``, ``http``: a status of 400 or more; ``client``: its client process died) and the response ``body``;
* for a streamed answer (``text/event-stream``: server-sent events, read line by line as they
  arrive), ``first``: when its first ``data:`` event came, and ``events``: how many it held
  (``[DONE]`` not counted), giving the time to first token from the schedule (``ttft_s``) and
  the time per output token after it (``tpot_s``).

Connections are not capped (a cap would turn the open loop into a closed one at the cap); every
request has its own timeout. Pacing is ``asyncio.sleep`` to the planned time: on a two-core
machine it lags its plan by about 0.6 ms at p50 and 1-2 ms at p99, which every run measures and
reports rather than assumes.

Needs ``aiohttp`` (``pip install 'bakeoff[serve]'``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bakeoff.analysis.tail import TailEstimate, correlated_percentile
from bakeoff.errors import BakeoffError
from bakeoff.stats import percentile

__all__ = ["MAX_LAG_SHARE", "TIMED_OUT", "LoadRun", "Sent", "send_on_schedule"]

#: The error of a request that got no answer in its time.
TIMED_OUT = "timeout"

#: A run kept its schedule when its p99 dispatch lag is at most this share of the latency it is
#: judged at (an objective, else its own p99) and at most :data:`MAX_LAG_S`: beyond that, the
#: client, not the service, shaped the figures (against a no-op server, whose answers take less
#: than the client's own lag, no run keeps it, rightly).
MAX_LAG_SHARE = 0.1
MAX_LAG_S = 0.010


@dataclass(frozen=True)
class Sent:
    """One request of a load run (see the module docstring)."""

    index: int
    planned: float
    sent: float
    done: float | None
    status: int
    error: str | None = None
    body: bytes = b""
    #: a streamed answer (server-sent events): when its first ``data:`` event arrived, and how
    #: many events (tokens) it held, ``[DONE]`` not counted; None and 0 for any other answer
    first: float | None = None
    events: int = 0

    @property
    def latency_s(self) -> float | None:
        return None if self.done is None else self.done - self.planned

    @property
    def ttft_s(self) -> float | None:
        """Time to first token: from when it was due to its first event (None: not streamed)."""
        return None if self.first is None else self.first - self.planned

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first: the rest of the stream over the events after
        the first (None: fewer than two events, or not finished)."""
        if self.first is None or self.done is None or self.events < 2:
            return None
        return (self.done - self.first) / (self.events - 1)

    def value(self, series: str) -> float | None:
        """One of its series in seconds (see :meth:`LoadRun.latencies`): ``schedule``, ``send``,
        ``ttft`` or ``tpot``; None where it has none."""
        return _SERIES[series](self)

    @property
    def from_send_s(self) -> float | None:
        return None if self.done is None else self.done - self.sent

    @property
    def lag_s(self) -> float:
        return self.sent - self.planned


#: Each series a request gives (see :meth:`LoadRun.latencies`).
_SERIES = {
    "schedule": lambda r: r.latency_s,
    "send": lambda r: r.from_send_s,
    "ttft": lambda r: r.ttft_s,
    "tpot": lambda r: r.tpot_s,
}


@dataclass(frozen=True)
class LoadRun:
    """Every request of one run, in schedule order, and the run's wall time."""

    requests: tuple[Sent, ...]
    wall_s: float

    def latencies(self, anchor: str = "schedule", timed_out: Callable[[Sent], float] | None = None) -> list[float]:
        """The answered requests' latencies in seconds, from the ``schedule`` or the ``send``;
        or, of streamed answers, the time to first token (``ttft``, from the schedule) or per
        output token after it (``tpot``). Given ``timed_out``, each request that timed out is in
        its place too, at the value it gives that request; other failures never are."""
        values = []
        for r in self.requests:
            value = r.value(anchor)
            if r.error is None and value is not None:
                values.append(value)
            elif r.error == TIMED_OUT and timed_out is not None:
                values.append(timed_out(r))
        return values

    @property
    def streamed(self) -> bool:
        """Whether any answer was streamed (server-sent events with at least one event)."""
        return any(r.first is not None for r in self.requests)

    def percentile(self, q: float, anchor: str = "schedule", confidence: float = 0.95) -> TailEstimate:
        """The ``q``-th percentile of the answered requests' latencies (in schedule order) with an
        interval that accounts for the correlation between successive requests
        (:mod:`bakeoff.analysis.tail`).

        Raises:
            ValueError: no request was answered.
        """
        return correlated_percentile(self.latencies(anchor), q, confidence)

    def lag_p99_s(self) -> float:
        return percentile([r.lag_s for r in self.requests], 99) if self.requests else 0.0

    def errors(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for r in self.requests:
            if r.error is not None:
                found[r.error] = found.get(r.error, 0) + 1
        return found

    @property
    def kept_schedule(self) -> bool:
        """Whether the client kept its schedule for the run's own p99 (see :data:`MAX_LAG_SHARE`)."""
        return self.kept_schedule_for()

    def kept_schedule_for(self, objective_s: float | None = None) -> bool:
        """Whether the client kept its schedule well enough to judge latencies at ``objective_s``
        (None: at the run's own p99); False when nothing was answered."""
        answered = self.latencies()
        if not answered:
            return False
        scale = objective_s if objective_s is not None else percentile(answered, 99)
        lag = self.lag_p99_s()
        return lag <= MAX_LAG_S and lag <= MAX_LAG_SHARE * scale


def send_on_schedule(
    url: str,
    bodies: Sequence[Any],
    times: Sequence[float],
    *,
    timeout_s: float = 30.0,
    method: str = "POST",
    clients: int = 1,
) -> LoadRun:
    """Send ``bodies[i]`` (JSON-encoded; ``bytes`` as they are) to ``url`` at ``times[i]`` seconds
    from now, open loop, and time each (see the module docstring). The times need not be in
    order (a trace in file order): each body goes at its own time, and each :class:`Sent` keeps
    its position in ``bodies`` as ``index``; the run's requests are in schedule order.

    ``clients`` above 1 shares the schedule between that many client processes, dealt in turn
    in time order (each sends every ``clients``-th request, so each paces a ``1/clients`` share
    of the rate), all started before the first is due and timed on one shared start; a rate
    one process cannot keep can be kept by several. A client process that dies leaves its
    requests as ``client`` errors.

    Raises:
        BakeoffError: aiohttp is not installed, ``bodies`` and ``times`` differ in length, or
            ``clients`` is below 1.
    """
    if len(bodies) != len(times):
        raise BakeoffError(f"{len(bodies)} request bodies for {len(times)} send times", hint="give one body per send")
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        raise BakeoffError(
            "sending load needs aiohttp, which is not installed", hint="pip install 'bakeoff[serve]'"
        ) from None
    if clients < 1:
        raise BakeoffError(f"{clients} client processes", hint="at least 1")
    schedule = sorted(enumerate(times), key=lambda pair: pair[1])  # stable: ties keep their order
    if clients > 1 and len(schedule) > 1:
        return _shared(url, list(bodies), schedule, timeout_s, method, min(clients, len(schedule)))
    return asyncio.run(_run(url, list(bodies), schedule, timeout_s, method))


#: How long client processes have to start before the first request is due, at most.
CLIENT_START_S = 60.0


def _shared(
    url: str, bodies: list[Any], schedule: list[tuple[int, float]], timeout_s: float, method: str, clients: int
) -> LoadRun:
    """The schedule dealt between ``clients`` processes (see :func:`send_on_schedule`): each a
    ``python -m bakeoff.serve.load`` told its share on stdin as JSON, which says ``ready``, is
    told when to start, and answers its requests as JSON (no pickle crosses)."""
    import base64
    import subprocess
    import sys

    payloads = [b if isinstance(b, bytes) else json.dumps(b).encode() for b in bodies]
    shares = [schedule[k::clients] for k in range(clients)]
    processes: list[subprocess.Popen[str]] = []
    try:
        for share in shares:
            process = subprocess.Popen(
                [sys.executable, "-m", __name__],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
            order = {"url": url, "timeout_s": timeout_s, "method": method, "times": [t for _, t in share],
                     "bodies": [base64.b64encode(payloads[i]).decode() for i, _ in share]}  # fmt: skip
            assert process.stdin is not None and process.stdout is not None
            process.stdin.write(json.dumps(order) + "\n")
            process.stdin.flush()
            processes.append(process)
        ready = [_line(process, CLIENT_START_S) == "ready" for process in processes]
        start_at = time.monotonic() + 0.1  # each reads it and opens its session first
        for process, ok in zip(processes, ready, strict=True):
            if ok:
                assert process.stdin is not None
                process.stdin.write(f"{start_at!r}\n")
                process.stdin.flush()
        found: list[Sent] = []
        walls = [0.0]
        for process, share, ok in zip(processes, shares, ready, strict=True):
            answer = _line(process, None) if ok else ""
            sent, wall = _read_share(answer, share)
            found += sent
            walls.append(wall)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait()
    found.sort(key=lambda r: (r.planned, r.index))
    return LoadRun(tuple(found), max(walls))


def _die_with_parent() -> None:
    """In a client process, between fork and exec: SIGKILL when the thread that started it ends
    (it waits for the client's answer, so that is when bakeoff does)."""
    import signal

    from bakeoff.launch.reaping import death_signal

    death_signal(signal.SIGKILL)


def _line(process: Any, timeout_s: float | None) -> str:
    """The next line a client process writes ("" when it ended, or said nothing in time)."""
    import select

    assert process.stdout is not None
    if timeout_s is not None and not select.select([process.stdout], [], [], timeout_s)[0]:
        return ""
    return process.stdout.readline().strip()


def _read_share(answer: str, share: list[tuple[int, float]]) -> tuple[list[Sent], float]:
    """A client process's answer for its ``share`` of the schedule: its requests, under their
    indexes in the whole schedule; a request it did not answer for is a ``client`` error."""
    import base64

    sent: list[Sent] = []
    wall = 0.0
    try:
        data = json.loads(answer) if answer else {}
        wall = float(data.get("wall_s", 0.0))
        for row in data.get("requests", ()):
            k, planned, at, done, status, error, body, first, events = row
            sent.append(Sent(share[k][0], planned, at, done, status, error, base64.b64decode(body), first, events))
    except (ValueError, TypeError, IndexError):
        sent = []
    got = {r.index for r in sent}
    sent += [Sent(i, planned, planned, None, 0, "client") for i, planned in share if i not in got]
    return sent, wall


def _client() -> None:
    """One client process of a shared schedule (``python -m bakeoff.serve.load``): its share
    on stdin, ``ready``, the shared start, then its requests as one JSON line."""
    import base64
    import signal
    import sys

    import aiohttp  # noqa: F401  (imported before it says ready: an import takes a few hundred ms)

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is bakeoff's to handle: it stops the clients

    order = json.loads(sys.stdin.readline())
    bodies = [base64.b64decode(b) for b in order["bodies"]]
    own = list(enumerate(order["times"]))
    print("ready", flush=True)
    start_at = float(sys.stdin.readline())
    run = asyncio.run(_run(order["url"], bodies, own, order["timeout_s"], order["method"], start_at=start_at))
    rows = [
        [r.index, r.planned, r.sent, r.done, r.status, r.error, base64.b64encode(r.body).decode(), r.first, r.events]
        for r in run.requests
    ]
    print(json.dumps({"requests": rows, "wall_s": run.wall_s}), flush=True)


async def _stream(response: Any, clock: Any, start: float) -> tuple[bytes, float | None, int]:
    """Read a server-sent event stream as it arrives: its whole body, when its first ``data:``
    event came (on the run's clock) and how many ``data:`` events it held (``[DONE]`` not counted)."""
    parts: list[bytes] = []
    first: float | None = None
    events = 0
    async for line in response.content:  # one line at a time, as the bytes arrive
        parts.append(line)
        text = line.strip()
        if text.startswith(b"data:") and text[5:].strip() != b"[DONE]":
            events += 1
            if first is None:
                first = clock() - start
    return b"".join(parts), first, events


async def _run(
    url: str,
    bodies: list[Any],
    schedule: list[tuple[int, float]],
    timeout_s: float,
    method: str,
    start_at: float | None = None,
) -> LoadRun:
    """The schedule, from now or from ``start_at`` (a ``time.monotonic()`` reading shared by
    several client processes)."""
    import aiohttp

    payloads = [b if isinstance(b, bytes) else json.dumps(b).encode() for b in bodies]
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    headers = {"Content-Type": "application/json"}
    clock = time.perf_counter
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers) as session:

        async def one(index: int, planned: float, start: float) -> Sent:
            sent = clock() - start
            try:
                async with session.request(method, url, data=payloads[index]) as response:
                    if response.content_type == "text/event-stream":
                        body, first, events = await _stream(response, clock, start)
                    else:
                        body, first, events = await response.read(), None, 0
                    done = clock() - start
                    error = "http" if response.status >= 400 else None
                    return Sent(index, planned, sent, done, response.status, error, body, first, events)
            except asyncio.TimeoutError:
                return Sent(index, planned, sent, None, 0, TIMED_OUT)
            except aiohttp.ClientError:
                return Sent(index, planned, sent, None, 0, "connection")

        tasks = []
        start = clock() if start_at is None else clock() + (start_at - time.monotonic())
        for index, planned in schedule:
            wait = planned - (clock() - start)
            if wait > 0:
                await asyncio.sleep(wait)
            tasks.append(asyncio.ensure_future(one(index, planned, start)))
        found = await asyncio.gather(*tasks)
        wall = clock() - start
    return LoadRun(tuple(found), wall)


if __name__ == "__main__":
    _client()
