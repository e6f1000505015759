"""N ranks of one job, started, watched and stopped together, on the launch spine's workers.

Each rank is a :class:`~bakeoff.launch.process.Worker` (a spawned interpreter that imports
PyTorch before its job, dies with bakeoff, ignores Ctrl-C, and whose death is classified where
every worker's is). The ranks meet through a file store in a directory of their own (no port is
opened beyond gloo's loopback connections). A rank's job writes what it enters to its phase file
(:func:`enter`: the collective, its sequence number) before each collective; the parent reads the
phase files while it waits:

- every rank replied: the job's values, rank by rank;
- a rank raised or died: every other rank is stopped (they would wait in their next collective
  for it), and the first failure is the job's;
- no rank entered anything new for ``hang_s`` while some had not replied, once every rank had
  entered the process group's set-up (a rank's job builds its workload first, which is no
  collective: ``timeout_s`` bounds that, and a rank waiting in the set-up for one still
  building waits for no collective yet): a **hang**. Each rank
  is asked for its Python stack, then every rank is killed. The hang names the lowest-numbered
  collective a rank was waiting in, the ranks waiting in it and those that did not arrive (still
  before it, or already past it), from the phase files; where every rank still running had made
  its last collective, the process group's teardown.

No rank outlives :meth:`RankGroup.run` (a ``kill -9`` of bakeoff included: each worker dies with
its parent).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

from bakeoff.launch.forkserver import ForkServer, forkable
from bakeoff.launch.job import Outcome
from bakeoff.launch.process import STARTUP_TIMEOUT_S, Worker, serve_jobs
from bakeoff.launch.tempdirs import owned_tempdir
from bakeoff.logtail import tail_text
from bakeoff.scenarios.dist import Hang, WorldRun

__all__ = [
    "RankGroup",
    "RanksEnded",
    "enter",
    "join_group",
    "rank_device",
    "rank_server",
    "serve_rank",
    "wait_for_every_rank",
]

#: The file beside a rank's phase file that holds its output.
OUTPUT_LOG = "output.log"
#: How much of a failed rank's output its error keeps.
OUTPUT_CHARS = 3000
#: How long the other ranks may take to report their own failure after one rank's.
_AFTER_FAILURE_S = 2.0
_POLL_S = 0.25
#: What the ranks' fork server imports before it forks any (:func:`rank_server`).
RANK_PRELOAD = ("torch", "torch.distributed", "bakeoff.distributed.collectives", "bakeoff.distributed.training")

_phase_fd: int | None = None
#: What a hang is named where every rank still running had made its last collective.
TEARDOWN = "the process group's teardown, after the last collective"


def enter(seq: int, what: str) -> None:
    """Record, in this rank's phase file, that it enters collective ``seq`` (1-based): one write,
    outside any timed region. Nothing where no phase file was given (a rank run inline)."""
    if _phase_fd is not None:
        os.pwrite(_phase_fd, json.dumps({"seq": seq, "what": what}).encode().ljust(256), 0)


def finished(seq: int) -> None:
    """Record that this rank made its ``seq`` collectives and left the job's last one."""
    enter(seq, "finished")


def rank_device(target: Any, rank: int, world: int) -> Any:
    """The device rank ``rank`` runs on: the target's own index when it names one, else one device
    per rank where the device type has at least ``world`` of them, else its first."""
    import torch

    if target.device == "cpu":
        return torch.device("cpu")
    if target.index is not None:
        return torch.device(target.device, target.index)
    module = getattr(torch, target.device, None)
    count = getattr(module, "device_count", lambda: 1)()
    index = rank if count >= world else 0
    set_device = getattr(module, "set_device", None)
    if set_device is not None:
        set_device(index)
    return torch.device(target.device, index)


def join_group(target: Any, rank: int, world: int, rendezvous: str, timeout_s: float) -> tuple[Any, str]:
    """Join the job's process group as rank ``rank`` (inside a rank's job, with the target's
    plugins loaded): one thread, on this machine's loopback, through the file store, on the
    backend PyTorch names for the target's device. Returns the rank's device and the backend."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # the ranks meet on this machine's loopback
    device = rank_device(target, rank, world)
    backend = dist.get_default_backend_for_device(target.device)
    enter(0, "init_process_group")  # what came before (the build) is no collective: not a hang's
    dist.init_process_group(backend, init_method=f"file://{rendezvous}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=timeout_s))  # fmt: skip
    return device, backend


def wait_for_every_rank(world: int) -> None:
    """Wait, through the process group's store, until every rank has made its last collective:
    no rank tears the group down under one still waiting in a collective (that rank would see an
    error where the job hangs). A rank that never gets there is the parent's hang to find."""
    import torch.distributed as dist

    store = dist.distributed_c10d._get_default_store()
    store.add("bakeoff-finished", 1)
    while store.add("bakeoff-finished", 0) < world:
        time.sleep(0.02)


def serve_rank(conn: Any, phase_file: str, capture_dir: str) -> None:
    """A rank worker's command loop: one job, with the phase file open for :func:`enter`, and
    the rank's own output (its libraries' warnings, a workload's prints, C++ messages) in a log
    file beside it: N ranks writing to bakeoff's terminal would bury its answer."""
    global _phase_fd
    _phase_fd = os.open(phase_file, os.O_WRONLY | os.O_CREAT, 0o600)
    log = os.open(str(Path(phase_file).with_name(OUTPUT_LOG)), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os.dup2(log, 1)
    os.dup2(log, 2)
    serve_jobs(conn, phase_file, capture_dir)


@contextmanager
def rank_server(preload: tuple[str, ...] = RANK_PRELOAD) -> Iterator[ForkServer | None]:
    """A fork server for the ranks of every job of one check (:class:`RankGroup`'s ``server``):
    PyTorch and ``preload`` imported once, each rank forked from it in a fraction of a second
    instead of an interpreter's start-up. None where the platform does not fork (each rank is then
    spawned, as it is when the server cannot fork one)."""
    if not forkable():
        yield None
        return
    server = ForkServer(preload, dict(os.environ))
    try:
        yield server
    finally:
        server.close()


def _read_phase(path: Path, before: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """What the rank last entered; ``before`` (the last reading) where the file is caught in the
    middle of a write."""
    try:
        return json.loads(path.read_bytes().rstrip() or b"null")
    except (OSError, ValueError):
        return before


@dataclass
class RanksEnded:
    """How the ranks ended: each rank's outcome (``outcomes``, None for a rank stopped by the
    parent), ``startup_s`` per rank, the ``hang`` when there was one, and the ``stacks`` the hung
    ranks dumped."""

    outcomes: list[Outcome | None]
    startup_s: list[float]
    hang: Hang | None = None
    stacks: dict[int, str] = field(default_factory=dict)
    timed_out: str = ""  # the job still progressed when --timeout ended it: where it was
    phases: dict[int, str] = field(default_factory=dict)  # what each rank last entered
    failed: list[int] = field(default_factory=list)  # the ranks that raised or died, in the order heard

    @property
    def failure(self) -> tuple[int, Outcome] | None:
        """The rank whose failure is the cause, with its outcome: the first that died (a signal,
        the out-of-memory killer: its peers then raise in their next collective, "connection reset
        by peer", whichever is heard first), else the first that raised."""
        order = self.failed + [r for r in range(len(self.outcomes)) if r not in self.failed]
        failures = [(r, o) for r in order if (o := self.outcomes[r]) is not None and not o.ok]
        died = [(r, o) for r, o in failures if o.error is not None and o.error.category != "exception"]
        return (died or failures or [None])[0]

    def stopped(self, world: int, backend: str, seconds: float, mode: str = "collectives", which: str = "",
                devices: tuple[str, ...] = ()) -> WorldRun | None:  # fmt: skip
        """The world size as a hang or an error when the job (``which``, if it has a name) did not
        end with every rank's value; None when it did."""
        said = {"backend": backend, "devices": devices, "startup_s": tuple(self.startup_s), "seconds": seconds,
                "mode": mode}  # fmt: skip
        named = f"{which}: " if which else ""
        if self.hang is not None:
            reason = f"{named}{self.hang.collective} #{self.hang.seq} did not complete"
            return WorldRun(world, "hang", reason, hang=self.hang, **said)
        if self.timed_out:
            return WorldRun(world, "error", f"{named}did not finish within --timeout, {self.timed_out}", **said)
        failure = self.failure
        if failure is None and all(o is not None for o in self.outcomes):
            return None
        rank, outcome = failure if failure is not None else (self.outcomes.index(None), None)
        why = outcome.reason() if outcome is not None else "stopped"
        where = f" (last entered {self.phases[rank]})" if rank in self.phases else ""
        who = f"{which} rank {rank}" if which else f"rank {rank}"
        others = [r for r, o in enumerate(self.outcomes) if r != rank and o is not None and not o.ok]
        after = f"; rank {', '.join(map(str, others))} failed too" if others and failure is not None else ""
        return WorldRun(world, "error", f"{who}{where}: {why[:500]}{after}", **said)


def _said(phases: dict[int, dict[str, Any] | None]) -> dict[int, str]:
    return {r: f"{p['what']} #{p['seq']}" for r, p in phases.items() if p}


def diagnose(phases: dict[int, dict[str, Any] | None], replied: set[int], world: int, after_s: float) -> Hang:
    """The hang the phase files show: the lowest-numbered collective a rank that has not replied
    was in, the ranks in it, and where each of the others was."""

    def where(rank: int) -> str:
        phase = phases.get(rank)
        if phase is None:
            return "entered no collective"
        if phase["what"] == "finished":
            return f"finished (made {phase['seq']} collectives)"
        return f"last entered {phase['what']} #{phase['seq']}"

    running = {r: p for r, p in phases.items() if r not in replied and p is not None}
    stuck = {r: p for r, p in running.items() if p["what"] != "finished"}
    if running and not stuck:  # every rank still running made its last collective: the teardown hangs
        seq = max(p["seq"] for p in running.values())
        waiting = tuple(sorted(running))
        missing = tuple(r for r in range(world) if r not in waiting)
        return Hang(TEARDOWN, seq, waiting, missing, {str(r): where(r) for r in range(world)}, after_s)
    if not stuck:
        return Hang("(before the first collective)", 0, (), tuple(range(world)),
                    {str(r): where(r) for r in range(world)}, after_s)  # fmt: skip
    seq = min(p["seq"] for p in stuck.values())
    collective = next(p["what"] for p in stuck.values() if p["seq"] == seq)
    waiting = tuple(sorted(r for r, p in stuck.items() if p["seq"] == seq))
    missing = tuple(r for r in range(world) if r not in waiting)
    return Hang(collective, seq, waiting, missing, {str(r): where(r) for r in missing}, after_s)


def _with_output(outcome: Outcome | None, worker: Worker) -> Outcome | None:
    """A failed rank's outcome with the end of its output added to its error's log."""
    if outcome is None or outcome.ok or outcome.error is None:
        return outcome
    said = tail_text(worker.phase_file.with_name(OUTPUT_LOG), OUTPUT_CHARS)
    if not said.strip():
        return outcome
    log = f"{outcome.error.traceback}\n--- the rank's output (its end) ---\n{said}"
    return Outcome(error=replace(outcome.error, traceback=log))


class RankGroup:
    """``world`` rank workers for one job each (``jobs[rank]``), see the module docstring."""

    def __init__(
        self, world: int, preload: tuple[str, ...] = ("torch", "torch.distributed"), server: ForkServer | None = None
    ) -> None:
        self.world = world
        self.preload = preload
        self.server = server
        self.dir = owned_tempdir("dist")

    @property
    def rendezvous(self) -> str:
        """The file the ranks' process group meets through (``file://`` + this)."""
        return str(self.dir / "rendezvous")

    def run(self, jobs: list[Any], timeout_s: float, hang_s: float) -> RanksEnded:
        """Start the ranks, give each its job, and wait: see the module docstring. ``timeout_s``
        bounds the whole job once every rank has started; ``hang_s`` the time without progress."""
        workers: list[Worker] = []
        try:
            started = time.monotonic()
            workers = [
                Worker(self.preload, serve=serve_rank, name=f"bakeoff-rank-{rank}", server=self.server)
                for rank in range(self.world)
            ]
            startup: list[float] = []
            for rank, worker in enumerate(workers):
                began = worker.started(STARTUP_TIMEOUT_S, f"rank {rank}")
                startup.append(round(time.monotonic() - started, 3))
                if not began.ok:
                    outcomes: list[Outcome | None] = [None] * self.world
                    outcomes[rank] = began
                    return RanksEnded(outcomes, startup)
            for rank, (worker, job) in enumerate(zip(workers, jobs, strict=True)):
                sent = worker.send(job, f"rank {rank}", job.phase)
                if not sent.ok:
                    outcomes = [None] * self.world
                    outcomes[rank] = sent
                    return RanksEnded(outcomes, startup)
            ended = self._watch(workers, startup, timeout_s, hang_s, [job.phase for job in jobs])
            ended.outcomes = [_with_output(o, w) for o, w in zip(ended.outcomes, workers, strict=True)]
            return ended
        finally:
            for worker in workers:
                worker.close(kill=True)
            shutil.rmtree(self.dir, ignore_errors=True)

    def _watch(
        self, workers: list[Worker], startup: list[float], timeout_s: float, hang_s: float, phases_of: list[str]
    ) -> RanksEnded:
        outcomes: list[Outcome | None] = [None] * self.world
        replied: set[int] = set()
        seen: dict[int, Any] = {}
        deadline = time.monotonic() + timeout_s
        progress = time.monotonic()
        failed_at: float | None = None
        failed: list[int] = []
        while len(replied) < self.world:
            pending = {workers[r].conn: r for r in range(self.world) if r not in replied}
            for conn in wait(list(pending), timeout=_POLL_S):
                rank = pending[conn]  # type: ignore[index]
                got = workers[rank].receive(0, f"rank {rank}", phases_of[rank])
                outcome = got.value if got.ok else got  # the worker's reply is the job's outcome
                outcomes[rank] = outcome
                replied.add(rank)
                progress = time.monotonic()
                if not outcome.ok:
                    failed.append(rank)
                    failed_at = failed_at or time.monotonic()
            now = time.monotonic()
            phases = {r: _read_phase(w.phase_file, seen.get(r)) for r, w in enumerate(workers)}
            if phases != seen:
                seen, progress = phases, now
            if failed_at is not None and now - failed_at > _AFTER_FAILURE_S:
                break  # the others wait for the failed rank in their next collective: stop them
            building = [r for r, p in phases.items() if p is None and r not in replied]  # bounded by timeout_s
            started = not building
            if len(replied) < self.world and now > deadline and (not started or now - progress <= hang_s):
                furthest = max((p["seq"] for p in phases.values() if p), default=0)
                where = f"at collective #{furthest}, {now - progress:.1f} s after the last one a rank entered"
                if not started:
                    where = f"while building: rank {', '.join(map(str, building))} had not reached the process group"
                return RanksEnded(outcomes, startup, timed_out=where, phases=_said(phases), failed=failed)
            if len(replied) < self.world and started and now - progress > hang_s:
                hang = diagnose(phases, replied, self.world, round(now - progress, 1))
                stacks = {}
                for rank in range(self.world):
                    if rank not in replied:
                        workers[rank].dump_stack()
                        stacks[rank] = workers[rank].crash_tail()
                return RanksEnded(outcomes, startup, hang, stacks, phases=_said(phases), failed=failed)
        return RanksEnded(outcomes, startup, phases=_said(seen), failed=failed)
