"""Whether a result's timings can be trusted as they stand: the one reading of its noise that
the decision and the regressions share."""

from __future__ import annotations

from collections.abc import Mapping

from bakeoff.env import Environment
from bakeoff.results.values import TargetResult

__all__ = ["BUSY_FLAGS", "busy_flags", "timing_noise"]

#: The flags that say the machine, not the code, moved the figures: other work competed for the
#: cores, or more threads than cores took turns on them.
BUSY_FLAGS = ("machine busy", "oversubscribed")


def timing_noise(result: TargetResult, environment: Environment | None = None) -> tuple[str, ...]:
    """Why ``result``'s timings should not be trusted as they stand, one flag each.

    The noise flags the trial stored with it (:mod:`bakeoff.analysis.noise`: a wide spread, a
    load average above the cores during timing, the CPU frequency or the thread count moving),
    and, where ``environment`` gives the machine's core count: a load average above it when the
    stored flags do not say so already (from the result's own load readings), and more intra-op
    threads than cores (the result's own count, else the environment's: a script's threads),
    where threads take turns on the cores and a timing says more about the scheduler than
    about the code.
    """
    flags = list(result.noise)
    data = environment.data if environment is not None else {}
    cores = data.get("cpu_count")
    if not isinstance(cores, int) or isinstance(cores, bool) or cores < 1:
        return tuple(flags)
    rounds = (result.conditions or {}).get("rounds") or ()
    readings = [*(result.load_average or ()), *(r.get("load_1m") for r in rounds if isinstance(r, Mapping))]
    loads = [x for x in readings if isinstance(x, int | float) and not isinstance(x, bool)]
    if loads and max(loads) > cores and not any("machine busy" in flag for flag in flags):
        flags.append(f"machine busy: load average up to {max(loads):.2f} on {cores} core(s)")
    threads = result.threads
    if threads is None and isinstance(data.get("threads"), Mapping):
        threads = data["threads"].get("intra_op")
    if isinstance(threads, int) and not isinstance(threads, bool) and threads > cores:
        flags.append(f"oversubscribed: {threads} intra-op threads on {cores} core(s)")
    return tuple(flags)


def busy_flags(result: TargetResult, environment: Environment | None = None) -> tuple[str, ...]:
    """The flags of :func:`timing_noise` that blame the machine (:data:`BUSY_FLAGS`)."""
    return tuple(f for f in timing_noise(result, environment) if f.startswith(BUSY_FLAGS))
