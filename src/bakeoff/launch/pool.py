"""Warm workers kept for reuse, keyed by what they serve: the warm-pool launcher.

A sweep runs many workloads on the same targets: each target's work goes to a worker that has
already imported torch (and whatever ``preload`` names) and served that key before, instead of a
fresh interpreter each time. A worker that crashed, hung or ran out of memory is never reused:
whoever saw it fail records the failure, and the next request for that key gets a new worker.
:meth:`WorkerPool.prestart` spawns workers ahead of need, so their imports overlap with the
parent's own work.

With ``reuse=False`` a worker serves one job only and is ended when it is released: a pool
that only starts processes early (a single trial's, whose every session must have a process
of its own).

Given a ``server`` (a :class:`~bakeoff.launch.forkserver.ForkServer` importing ``preload``:
:func:`bakeoff.launch.warm.shared_server`), the workers that preload are forked from it, on
demand (the server's own start is what overlaps the caller's work; a fork takes milliseconds);
a ``clean`` one is spawned.
"""

from __future__ import annotations

from typing import Any

from bakeoff.launch.process import Serve, Worker, serve_jobs

__all__ = ["WorkerPool"]


class WorkerPool:
    """Idle workers per key, spare ones not yet given to any key, and retired ones to wait for."""

    def __init__(
        self,
        preload: tuple[str, ...] = ("torch",),
        reuse: bool = True,
        serve: Serve = serve_jobs,
        name: str = "bakeoff-worker",
        server: Any = None,
    ) -> None:
        self.preload = preload
        self.reuse = reuse
        self.serve, self.name = serve, name
        self.server = server
        self._idle: dict[Any, list[Worker]] = {}
        self._spare: list[Worker] = []
        self._retired: list[Worker] = []
        self.started = 0

    def _spawn(self, preload: bool = True) -> Worker:
        self.started += 1
        if not preload:
            return Worker((), serve=self.serve, name=self.name)
        return Worker(self.preload, serve=self.serve, name=self.name, server=self.server)

    def prestart(self, count: int) -> None:
        """Spawn up to ``count`` workers not yet given to any key (none with a server: each
        one is forked when it is asked for)."""
        while self.server is None and len(self._spare) < count:
            self._spare.append(self._spawn())

    def trim(self, count: int) -> None:
        """Stop the spare workers beyond ``count`` (started for work that will not run): they
        have served nothing, so they are killed, not waited for while they import."""
        while len(self._spare) > count:
            self._spare.pop().close(kill=True)

    def acquire(self, key: Any, clean: bool = False) -> Worker:
        """A live worker that served ``key`` before, else a spare one, else a new one. A
        ``clean`` request (environment switches read when torch or a backend is imported) gets a
        worker that has imported nothing yet, never a spare one."""
        idle = self._idle.get(key, [])
        while idle:
            worker = idle.pop()
            if worker.alive:
                return worker
            worker.close(kill=True)
        while self._spare and not clean:
            worker = self._spare.pop(0)
            if worker.alive:
                worker.key = key
                return worker
            worker.close(kill=True)
        worker = self._spawn(preload=not clean)
        worker.key = key
        return worker

    def release(self, worker: Worker) -> None:
        """Take back a worker whose work finished; a broken one (or any, without ``reuse``) is
        ended instead."""
        if not self.reuse:  # it leaves while the caller goes on; close() waits for it
            if worker.alive:
                worker.retire()
                self._retired.append(worker)
            else:
                worker.close(kill=True)
        elif worker.alive:
            self._idle.setdefault(worker.key, []).append(worker)
        else:
            worker.close(kill=True)

    def workers(self) -> list[Worker]:
        return [*self._spare, *(w for idle in self._idle.values() for w in idle)]

    def close(self) -> None:
        """End every worker kept: idle ones are asked to leave (retired ones were), and waited
        for; spares (which have served nothing, and may still be importing) are killed."""
        for worker in self._spare:
            worker.close(kill=True)
        for worker in [*self._retired, *(w for idle in self._idle.values() for w in idle)]:
            worker.close()
        self._idle.clear()
        self._spare.clear()
        self._retired.clear()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
