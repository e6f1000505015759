"""Does a new process start from the compile cache the last one left? The cold-start check (on
request: ``--check coldstart``).

A scale-out event starts the application in a fresh process, and a compiled target then pays its
compile again unless the compiler's cache on disk serves it. The check starts two fresh processes
one after the other, both with the compile cache in one new, empty directory
(``TORCHINDUCTOR_CACHE_DIR``) and the trial's environment switches: the first finds it empty,
the second finds what the first left. Each builds the workload, prepares the target as the trial
does and times its first result (build, prepare and compile, first call; the interpreter's start
and ``import torch`` are the same on both and not counted); each counts the compiler's own cache
lookups (inductor's FX graph cache and AOTAutograd's: hits, misses, bypasses). Then the cache's
size on disk.

Verdicts (from the second process's lookups, beside its figures):
    reused          every lookup it made hit the cache
    partly_reused   some hit, some missed (those graphs compiled again)
    not_reused      none hit: it compiled again (the cache is off, bypassed, or the backend keeps
                    none that bakeoff can see; the reason says which the counts show)
    error           a process failed (its error)

``not_reused`` is a finding, not a fault: it does not rule the target out (the first-result
figures say what it costs). Requirements: ``cold_start`` and ``warm_start`` (times, single
observations), e.g. ``--require 'warm_start<=5s'``.

What it cannot see: caches of engines other than ``torch.compile``'s (an export engine's own) and
of other backends than inductor, a cache on another machine or file system, kernels compiled by a
device runtime outside PyTorch, and the interpreter's own start.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from bakeoff.checks.base import Check, CheckContext, Metric
from bakeoff.codec import Value
from bakeoff.specsyntax import Option
from bakeoff.units import clip

__all__ = ["RANK", "ColdStart", "ColdStartCheck", "first_result"]

#: Verdicts for regressions, better higher.
RANK = {"reused": 2, "partly_reused": 1, "not_reused": 0, "error": 0}
#: The compiler's cache counters read in each process: (group, counter prefix, what it caches).
CACHES = (("inductor", "fxgraph_cache", "FX graph"), ("aot_autograd", "autograd_cache", "AOTAutograd"))


def first_result(workload_spec: str, target_spec: str) -> dict[str, Any]:
    """In a fresh process: build the workload, prepare the target and call it once; its first
    result's time and the compile caches' lookups (``{cache}_{hit|miss|bypass}``)."""
    start = time.perf_counter()
    import torch

    from bakeoff.target.detect import extra_devices
    from bakeoff.target.execute import prepare, synchronizer
    from bakeoff.target.spec import parse_target
    from bakeoff.workload.registry import build_workload

    target = parse_target(target_spec, extra_devices())  # plugins loaded: a renamed device is known
    if target.effective_threads is not None:
        torch.set_num_threads(target.effective_threads)
    begun = time.perf_counter()
    workload = build_workload(workload_spec, device=target.torch_device)
    prepared = prepare(workload, target)
    amp = torch.autocast(target.device, dtype=getattr(torch, target.amp)) if target.amp else nullcontext()
    with torch.no_grad(), amp:
        prepared()
    synchronizer(target)()
    done = time.perf_counter()
    from torch._dynamo.utils import counters

    lookups = {
        f"{prefix}_{kind}": int(counters[group][f"{prefix}_{kind}"])
        for group, prefix, _ in CACHES
        for kind in ("hit", "miss", "bypass")
    }
    prepared.close()
    return {"first_ms": (done - begun) * 1e3, "import_ms": (begun - start) * 1e3, **lookups}


def _child() -> None:
    """``python -c`` entry: the two specs in ``argv``, the result as JSON on stdout's last line."""
    print(json.dumps(first_result(sys.argv[1], sys.argv[2])), flush=True)
    os._exit(0)  # as bakeoff's own CLI ends: torch's threads can abort an interpreter's normal exit


_COMMAND = "from bakeoff.checks.coldstart import _child; _child()"


@dataclass(frozen=True)
class ColdStart(Value):
    """The two processes' first results (``cold_ms``: an empty cache; ``warm_ms``: the cache the
    first left), the second's cache ``hits``, ``misses`` and ``bypasses`` (both caches summed;
    ``cold_misses`` the first's), and the cache on disk after the first (``cache_bytes`` in
    ``cache_files``)."""

    verdict: str
    reason: str = ""
    cold_ms: float | None = None
    warm_ms: float | None = None
    hits: int = 0
    misses: int = 0
    bypasses: int = 0
    cold_misses: int = 0
    cache_bytes: int = 0
    cache_files: int = 0


def _size(folder: Path) -> tuple[int, int]:
    files = [p for p in folder.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


def _sum(lookups: Mapping[str, Any], kind: str) -> int:
    return sum(int(lookups.get(f"{prefix}_{kind}", 0)) for _, prefix, _ in CACHES)


class ColdStartCheck(Check):
    """Two fresh processes sharing one compile cache (see the module docstring)."""

    name = "coldstart"
    title = "cold start"
    value_type = ColdStart
    phase = "cold-start check"
    on_request = True
    offers: ClassVar[Mapping[str, tuple[str, str]]] = {
        "cold_start": ("time", "first result in a fresh process with an empty compile cache"),
        "warm_start": ("time", "first result in a fresh process with the cache a first one left"),
    }
    options: ClassVar[Mapping[str, Option]] = {
        "timeout": Option(float, 900.0, minimum=1, help="seconds each of the two processes may take")
    }

    def not_applicable(self, target: Any, is_reference: bool) -> str | None:
        from bakeoff.target.engines import engine_for

        if target.backend is None:
            return "an eager target compiles nothing: its first call is its cold start"
        if not engine_for(target.backend).dynamo_backend:
            return f"the {target.backend} engine keeps its own cache, which bakeoff cannot see"
        return None

    def run(self, context: CheckContext) -> ColdStart:
        processes = context.processes
        if processes is None:
            return ColdStart("error", "this caller starts no fresh process for the check")
        timeout = context.options.get("timeout", 900.0)
        cache = processes.tempdir("coldstart")  # a later process removes it if this one is killed
        env = {**os.environ, **dict(context.job.env), "TORCHINDUCTOR_CACHE_DIR": str(cache)}
        args = (context.job.workload_spec, context.target.spec)
        try:
            runs = []
            for which in ("first", "second"):
                got = processes.run(_COMMAND, args, env, timeout, f"the {which} fresh process")
                if isinstance(got, str):
                    return ColdStart("error", got)
                runs.append(got)
                if which == "first":
                    size, files = _size(cache)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        cold, warm = runs
        figures = {
            "cold_ms": cold["first_ms"],
            "warm_ms": warm["first_ms"],
            "hits": _sum(warm, "hit"),
            "misses": _sum(warm, "miss"),
            "bypasses": _sum(warm, "bypass"),
            "cold_misses": _sum(cold, "miss"),
            "cache_bytes": size,
            "cache_files": files,
        }
        verdict = (
            "reused" if figures["hits"] and not figures["misses"] + figures["bypasses"]
            else "partly_reused" if figures["hits"]
            else "not_reused"
        )  # fmt: skip
        return ColdStart(verdict, _reason(verdict, figures, cold), **figures)

    def on_error(self, why: str) -> ColdStart:
        return ColdStart("error", why)

    def metrics(self, value: ColdStart | None) -> list[Metric]:
        if value is None:
            return []
        found = [Metric("coldstart", value.verdict, "verdict", RANK)]
        for name, ms in (("cold_start", value.cold_ms), ("warm_start", value.warm_ms)):
            if ms is not None:  # one process's time: for requirements, not compared between runs
                found.append(Metric(name, ms, "time"))
        return found

    def misses(self, value: ColdStart) -> tuple[list[str], list[str]]:
        if value.verdict == "error":
            return [f"coldstart error: {clip(value.reason, 160)}"], []
        return [], []

    def facts(self, value: ColdStart, result: Any) -> list[str]:
        return [f"cold start {value.verdict.replace('_', ' ')}: {clip(value.reason, 240)}"]


def _reason(verdict: str, figures: Mapping[str, Any], cold: Mapping[str, Any]) -> str:
    from bakeoff.units import figure, human_bytes

    times = (
        f"first result {figure(figures['cold_ms'], 'ms')} with an empty cache, "
        f"{figure(figures['warm_ms'], 'ms')} with the cache the first process left "
        f"({human_bytes(figures['cache_bytes'])} in {figures['cache_files']} files)"
    )
    hits, misses, bypasses = figures["hits"], figures["misses"], figures["bypasses"]
    if verdict == "reused":
        return f"{times}; {hits} cache hit(s), no miss"
    if verdict == "partly_reused":
        return f"{times}; {hits} cache hit(s), {misses + bypasses} lookup(s) compiled again"
    if bypasses or _sum(cold, "bypass"):
        why = f"the cache was bypassed ({bypasses} time(s)): the compiler did not use it for these graphs"
    elif not figures["cold_misses"]:
        why = "the compiler looked nothing up (its caches are off, or the backend keeps none bakeoff can see)"
    else:
        why = f"the second process missed the cache {misses} time(s) and compiled again"
    if figures["warm_ms"] < figures["cold_ms"] / 2:  # e.g. compiled kernels found by another cache
        why += "; its first result still came sooner (other files the first process left, or a warmer machine)"
    return f"{times}; no cache hit: {why}"
