"""The ``ray`` executor of a sweep: each pending cell as one Ray task, stored here as it ends.

A cell is one workload with all its targets and runs as one task on one node: a comparison is
never split across machines. Inside the task the trial runs as it does locally
(:func:`~bakeoff.runner.trial.run_trial`), its baseline kept in memory and its tensors in a
temporary directory (:class:`~bakeoff.runner.keeping.MemoryKeeping`), with the targets in warm
workers of a :class:`~bakeoff.runner.isolation.SessionPool` kept at module level in the Ray
worker process (Ray reuses its workers across tasks, so the pool stays warm). The task returns
plain data: the run's document, the baseline's record, its environment and its tensor file's
bytes, or the build error. The driver is the only writer to the knowledge base: it writes the
tensor file where its store keeps baselines, stores the baseline, then the cell with its run in
one transaction, as each task finishes; a resume after a kill therefore works exactly as
locally (every workload stored exactly once).

Resources: a ``cuda`` target asks for ``{"GPU": 1}``, a ``neuron`` target for
``{"neuron_cores": 1}``, any other non-CPU device for a custom resource named after its device
type (``{"emu": 1}``, ``{"xpu": 1}``); a cell asks for the union (the most of each resource any
of its targets needs) and a CPU per target worker it keeps (:func:`cell_cpus`). A sweep whose
targets need a resource that no node offers is refused before anything runs, instead of
waiting forever on tasks that cannot be placed.

Failures: a target's crash, hang or out-of-memory kill happens in its worker inside the task
and becomes that target's result, as locally. A failure of the task itself (the Ray worker
died while building the workload or computing the baseline, Ray killed it for memory, or it
outlived the cell timeout) becomes a cell with no run and an error with its ``category``
(``crash``, ``out_of_memory``, ``timeout``). The cell timeout is a backstop above the per-step
``timeout_s`` the targets' workers already enforce: :data:`CELL_TIMEOUT_FACTOR` x ``timeout_s``
x (the cell's target sessions + 1 for building the workload and its baseline), counted from
the moment the task starts running on its node (a task waiting for resources is not late).

Lifecycle: with no address a local cluster is started for the sweep, bound to loopback, with
this machine's cores and a custom resource per accelerator detected here, and shut down at the
end, on Ctrl-C and on errors alike. With an address (``auto``, ``ray://...``) bakeoff connects
to that cluster, cancels its own unfinished tasks when it stops, and leaves the cluster running.
Every node needs the same bakeoff (and torch, transformers, the targets' libraries) installed,
and the ``py:`` files of the population at the same paths: tasks import them, no code is
shipped to the nodes.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bakeoff.errors import SpecError
from bakeoff.launch.deaths import ray_task_error
from bakeoff.results.values import RunResult
from bakeoff.settings import TrialSettings
from bakeoff.store.db import Store
from bakeoff.store.sweeps import SweepRecord
from bakeoff.sweep.cell import CELL_TIMEOUT_FACTOR, cell_arguments, cell_timeout, run_cell, store_baseline
from bakeoff.target.spec import Target

__all__ = [
    "CELL_TIMEOUT_FACTOR",
    "cell_cpus",
    "cell_resources",
    "cell_timeout",
    "local_resources",
    "missing_resource",
    "preflight",
    "ray_cells",
    "target_resources",
]

#: Ray's own names for the accelerators it knows; any other device is a custom resource.
_RAY_RESOURCE = {"cuda": "GPU", "neuron": "neuron_cores"}
_NO_RAY = "the ray executor needs ray: pip install 'bakeoff[ray]'"
#: Environment variables Ray sets in its workers that would change what a trial measures: the
#: task puts back the driver's value (or removes them) before its targets' workers start.
_DRIVER_ENV = ("OMP_NUM_THREADS",)

Cell = tuple[int, str, float, RunResult | None, dict[str, Any] | None]


@contextlib.contextmanager
def _loopback() -> Iterator[None]:
    """Keep a local cluster on 127.0.0.1. Ray binds to the machine's network address unless
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` is in the environment when it is imported (it reads
    it into a constant then) and when its processes start; both are put back afterwards, so a
    later connection to a real cluster from this process is not bound to loopback."""
    name = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
    saved = os.environ.get(name)
    os.environ[name] = "0"
    constants = sys.modules.get("ray._private.ray_constants")
    was = getattr(constants, "ENABLE_RAY_CLUSTER", None)
    if constants is not None and was is not None:  # ray was imported before: its constant too
        constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved
        if constants is not None and was is not None:
            constants.ENABLE_RAY_CLUSTER = was


def _import_ray(local: bool) -> Any:
    try:
        with _loopback() if local else contextlib.nullcontext():
            import ray
    except ImportError:
        raise SpecError(_NO_RAY) from None
    return ray


def target_resources(target: Target) -> dict[str, float]:
    """What one target needs of a node besides a CPU: its accelerator, as Ray names it."""
    if target.device == "cpu":
        return {}
    return {_RAY_RESOURCE.get(target.device, target.device): 1.0}


def cell_resources(targets: Sequence[Target]) -> dict[str, float]:
    """The union of the targets' needs (the most of each resource): one cell, one node."""
    needs: dict[str, float] = {}
    for target in targets:
        for name, amount in target_resources(target).items():
            needs[name] = max(needs.get(name, 0.0), amount)
    return needs


def _start_hint(resource: str) -> str:
    if resource == "GPU":
        return "start a node with one: ray start --num-gpus=1 (or run without --executor ray)"
    return f"start a node with it: ray start --resources='{{\"{resource}\": 1}}' (or run without --executor ray)"


def missing_resource(
    targets: Sequence[Target], nodes: Sequence[Mapping[str, float]], where: str = "the Ray cluster"
) -> SpecError | None:
    """The refusal when no single node offers everything one cell needs, else None.

    ``nodes`` are the resources of each live node: a cell runs on one node, so a GPU on one
    and an ``emu`` on another do not make a node for a cell that needs both.
    """
    needs = {"CPU": 1.0, **cell_resources(targets)}
    if any(all(node.get(name, 0.0) >= amount for name, amount in needs.items()) for node in nodes):
        return None
    for name, amount in needs.items():
        if not any(node.get(name, 0.0) >= amount for node in nodes):
            if name == "CPU":
                return SpecError(f"no node of {where} offers a CPU", hint="start a node with CPUs: ray start")
            target = next(t.spec for t in targets if target_resources(t).get(name))
            return SpecError(
                f"no node of {where} offers {name!r}, which the target {target} needs", hint=_start_hint(name)
            )
    listed = ", ".join(f"{name} {amount:g}" for name, amount in needs.items())
    return SpecError(f"no single node of {where} offers {listed} at once", hint="one cell runs on one node")


def cell_cpus(targets: Sequence[Target], nodes: Sequence[Mapping[str, float]]) -> int:
    """CPUs a cell asks for: one per target worker it keeps (the reference's included), at most
    the largest node's. Each worker is a process that imports torch and runs the workload; on a
    node with fewer cores than that, cells run one at a time, as locally, instead of starving
    each other's workers into per-step timeouts."""
    workers = len({t.spec for t in targets} | {"cpu"})
    largest = max((int(node.get("CPU", 0)) for node in nodes), default=1)
    return max(1, min(workers, largest))


def local_resources() -> tuple[int, dict[str, float]]:
    """The GPUs and custom resources of a local cluster: the accelerators available here."""
    from bakeoff.target.detect import list_devices

    gpus, custom = 0, {}
    for device in list_devices():
        if device.name == "cpu" or not device.available:
            continue
        count = float(max(device.count, 1))
        if device.name == "cuda":
            gpus = int(count)
        else:
            custom[_RAY_RESOURCE.get(device.name, device.name)] = count
    return gpus, custom


def preflight(targets: Sequence[Target], address: str | None) -> None:
    """Refuse, before a sweep is created, what can be known to fail: ray missing, or (for a
    local cluster, whose resources are known before it starts) a resource no node would offer.

    Raises:
        SpecError: with one line saying what to do.
    """
    _import_ray(local=address is None)
    if address is None:
        gpus, custom = local_resources()
        node = {"CPU": float(os.cpu_count() or 1), "GPU": float(gpus), **custom}
        refusal = missing_resource(targets, [node], "the local Ray cluster")
        if refusal is not None:
            raise refusal


# -- the driver ---------------------------------------------------------------------------------


@dataclass
class _Live:
    position: int
    spec: str
    submitted: float
    started: float | None = None
    where: str = ""


@contextlib.contextmanager
def _cluster(ray: Any, address: str | None, say: Callable[[str], None]) -> Iterator[None]:
    """Start a local cluster (loopback only) or connect to ``address``; shut down or disconnect
    on the way out, whatever the way out is. A Ray already initialised by the caller is used
    as it is and left alone."""
    if ray.is_initialized():
        yield
        return
    started = time.monotonic()
    try:  # an init interrupted half-way leaves processes that shutdown ends too
        if address is None:
            gpus, custom = local_resources()
            with _loopback():
                ray.init(
                    address="local",
                    num_cpus=os.cpu_count() or 1,
                    num_gpus=gpus,
                    resources=custom,
                    include_dashboard=False,
                    log_to_driver=False,
                    configure_logging=False,
                )
            say(f"ray: local cluster started in {time.monotonic() - started:.1f} s")
        else:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
            say(f"ray: connected to {address} in {time.monotonic() - started:.1f} s")
        yield
    finally:
        ray.shutdown()  # stops a local cluster; only disconnects from one given by address


def ray_cells(
    store: Store,
    record: SweepRecord,
    pending: Sequence[tuple[int, str]],
    targets: Sequence[Target],
    settings: TrialSettings,
    address: str | None,
    status: Callable[[str], None] | None = None,
) -> Iterator[Cell]:
    """Run ``pending`` cells as Ray tasks; yield each as ``(position, spec, seconds, run, error)``
    as soon as it ends, its baseline already stored (the caller stores the cell with its run).

    Raises:
        SpecError: ray is not installed, or the cluster offers no node for a cell.
    """
    from bakeoff.sweep.run import preload_for

    say = status or (lambda _message: None)
    ray = _import_ray(local=address is None)
    if not pending:
        return
    sessions = len({t.spec for t in targets} | {"cpu"}) * settings.replicates
    limit = cell_timeout(settings.timeout_s, sessions)
    needs = cell_resources(targets)
    driver = {"cwd": os.getcwd(), "env": {name: os.environ.get(name) for name in _DRIVER_ENV}}
    preload = preload_for(record.specs)  # the same warm imports for every cell, as locally
    with _cluster(ray, address, say):
        nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive", n.get("alive"))]
        refusal = missing_resource(targets, nodes, f"the Ray cluster at {address}" if address else "the Ray cluster")
        if refusal is not None:
            raise refusal
        cpus = cell_cpus(targets, nodes)
        # never retried: a cell that killed its worker would kill the next one the same way
        task = ray.remote(run_cell).options(
            num_cpus=cpus,
            num_returns="streaming",
            max_retries=0,
            retry_exceptions=False,
            **({"resources": needs} if needs else {}),
        )
        live: dict[Any, _Live] = {}
        try:
            for position, spec in pending:
                gen = task.remote(*cell_arguments(store, record, spec, driver, preload))
                live[gen] = _Live(position, spec, time.monotonic())
            while live:
                ready, _ = ray.wait(list(live), num_returns=1, timeout=0.5)
                for gen in ready:
                    cell = live[gen]
                    try:
                        item = ray.get(next(gen))
                    except StopIteration:
                        item, failure = None, {"type": "StopIteration", "category": "crash", "message": "no result"}
                    except Exception as exc:
                        error = ray_task_error(exc, cell.where)
                        item, failure = None, {"type": error.type, "category": error.category, "message": error.message}
                    if item is not None and cell.started is None:  # the task is running now
                        cell.started, cell.where = time.monotonic(), f"{item['node']} (pid {item['pid']})"
                        say(cell.spec)
                        continue
                    del live[gen]
                    seconds = time.monotonic() - (cell.started or cell.submitted)
                    if item is None:
                        yield cell.position, cell.spec, seconds, None, failure
                        continue
                    error = item["error"]
                    run = None
                    if error is None:
                        error = store_baseline(store, item)
                        run = RunResult.from_dict(item["run"]) if error is None else None
                    yield cell.position, cell.spec, seconds, run, error
                now = time.monotonic()
                for gen, cell in list(live.items()):
                    if cell.started is not None and now - cell.started > limit:
                        ray.cancel(gen, force=True)
                        del live[gen]
                        message = f"the cell's task on {cell.where} ran past {limit:g} s (the cell timeout); cancelled"
                        yield (
                            cell.position,
                            cell.spec,
                            now - cell.started,
                            None,
                            {
                                "type": "Timeout",
                                "category": "timeout",
                                "message": message,
                            },
                        )
        finally:
            for gen in live:  # interrupted: nothing of ours keeps running on a cluster we leave
                with contextlib.suppress(Exception):
                    ray.cancel(gen, force=True)
