"""A torchrun-style script run as N ranks: ``bakeoff exec --nproc N``.

Each rank is the run's usual process (:data:`~bakeoff.runner.script_run.WORKER`, forked from
the warm process where there is one), in the same copy of the working directory (torchrun's
ranks on one machine share it), with its own output directory and the environment
``torchrun --standalone --nproc-per-node N`` gives its workers (:func:`torchrun_env`: ``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT`` on the loopback, and
``OMP_NUM_THREADS=1`` unless set). The ranks run as one job (:mod:`bakeoff.launch.group`): the
first rank that fails is the run's error and the others are stopped, as torchrun stops them;
past the timeout, every rank still running is named.

What comes back is one :class:`~bakeoff.runner.script_run.ScriptRun` (:func:`merged`): each
rank's captures under ``rankR/NAME``, so that every rank is compared with the reference's same
rank by the correctness check's own rules; the rewrites summed over the ranks; the wall time of
the slowest rank. Every rank's run is audited; the placement shown is the worst rank's
(:func:`worst_placement`), the compilation rank 0's.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bakeoff.launch.group import GroupEnd
from bakeoff.results.values import ErrorInfo

__all__ = ["first_failed", "free_port", "hang_site", "merged", "rank_name", "torchrun_env", "worst_placement"]


def worst_placement(audits: Sequence[Mapping[str, Any] | None]) -> tuple[dict[str, Any] | None, str]:
    """The audit whose placement is the worst of the ranks' (rank 0's on a tie; its compilation
    is rank 0's), and a note saying whose it is when another rank's differs."""
    from bakeoff.checks.placement import RANK

    found = [(rank, a) for rank, a in enumerate(audits) if a is not None and a.get("placement") is not None]
    if not found:
        return (dict(audits[0]) if audits and audits[0] is not None else None), ""
    rank, worst = min(found, key=lambda ra: (RANK.get(ra[1]["placement"].verdict, 1), ra[0]))
    chosen = {**worst, "compilation": (audits[0] or {}).get("compilation")}
    verdicts = {r: a["placement"].verdict for r, a in found}
    if len(set(verdicts.values())) == 1:
        return chosen, ""
    each = ", ".join(f"rank {r} {v}" for r, v in verdicts.items())
    return chosen, f"placement is rank {rank}'s, the worst of {len(audits)} ranks ({each})"


def rank_name(rank: int, name: str) -> str:
    """The name rank ``rank``'s capture ``name`` is compared under."""
    return f"rank{rank}/{name}"


def free_port() -> int:
    """A TCP port free on the loopback now (the rendezvous binds it moments later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def torchrun_env(rank: int, world: int, port: int, env: Mapping[str, str], run_id: str) -> dict[str, str]:
    """The variables torchrun sets for rank ``rank`` of ``world`` on one machine."""
    ranks = {"RANK": rank, "LOCAL_RANK": rank, "ROLE_RANK": rank, "WORLD_SIZE": world}
    ranks |= {"LOCAL_WORLD_SIZE": world, "ROLE_WORLD_SIZE": world, "GROUP_RANK": 0, "GROUP_WORLD_SIZE": 1}
    found = {name: str(value) for name, value in ranks.items()}
    found |= {"ROLE_NAME": "default", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    found |= {"TORCHELASTIC_RUN_ID": run_id, "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0"}
    found["OMP_NUM_THREADS"] = env.get("OMP_NUM_THREADS", "1")
    return found


#: Functions that only pass a call on (decorators, ``Module.__call__``): not the call a rank waits in.
_WRAPPERS = frozenset({"wrapper", "inner", "_fn", "decorate_context", "_call_impl", "_wrapped_call_impl"})


def hang_site(stacks: str, work: Path) -> str | None:
    """Where a rank was when asked for its stacks (``faulthandler``'s dump, most recent call
    first): the innermost line of the script's own code (a file under ``work``) and the call it
    was waiting in, ``train.py:27, in all_reduce``; None when no thread was in the script."""
    frame = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
    for block in re.split(r"\n(?=\S)", stacks):  # one block per thread
        frames = [m for m in map(frame.match, block.splitlines()) if m]
        for depth, found in enumerate(frames):
            if found["file"].startswith("<"):  # <frozen importlib._bootstrap>, <string>: no file
                continue
            path = Path(found["file"])
            path = path if path.is_absolute() else work / path  # the script, run from its directory
            if path.is_relative_to(work):
                called = [f["func"] for f in reversed(frames[:depth]) if f["func"] not in _WRAPPERS]
                inner = called[0] if called else found["func"]
                return f"{path.relative_to(work).as_posix()}:{found['line']}, in {inner}"
    return None


def _ledger(results: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The ranks' rewrites summed per API and call site, in the order they first came (the
    first rank's reason: rank 1's ``cuda:1 -> emu:0`` is rank 0's ``cuda:0 -> emu:0``); one
    that may change numerics on any rank is flagged with that rank's reason."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for result in results:
        for rewrite in result.get("ledger") or ():
            key = (rewrite.get("api", ""), rewrite.get("site", ""))
            row = rows.get(key)
            if row is None:
                rows[key] = dict(rewrite)
                continue
            row["count"] = row.get("count", 0) + rewrite.get("count", 0)
            if rewrite.get("numerics") and not row.get("numerics"):
                row["numerics"], row["reason"] = True, rewrite.get("reason", "")
    return list(rows.values())


def first_failed(end: GroupEnd, errors: Sequence[ErrorInfo | None], ended: Mapping[int, float]) -> int | None:
    """The rank whose failure came first: of the ranks that failed (not those stopped after),
    the one whose script ended earliest (``ended``: when each script's process ended, as its
    supervisor saw it); the group's first where a time is missing. The group sees ends by
    polling, and a supervisor ends after its script: a peer's "connection closed" can reach
    the group before the error that caused it."""
    failed = [r for r, e in enumerate(errors) if e is not None and r not in end.stopped]
    timed = [r for r in failed if r in ended]
    if timed and len(timed) == len(failed):
        return min(timed, key=lambda r: ended[r])
    return end.failed_first if end.failed_first is not None else (failed[0] if failed else None)


def _error(
    end: GroupEnd,
    errors: Sequence[ErrorInfo | None],
    timeout_s: float,
    sites: Mapping[int, str],
    ended: Mapping[int, float],
) -> ErrorInfo | None:
    """The run's error: the first rank's that failed (:func:`first_failed`; the ranks stopped
    after it named), or the timeout's (each rank still running named with where it was,
    ``sites``)."""
    world = len(errors)
    if end.failed_first is None and any(r.timed_out for r in end.ran):
        running = [r for r, ran in enumerate(end.ran) if ran.timed_out]
        ended = [r for r in range(world) if r not in running]
        where = "; ".join(f"rank {r} at {sites[r]}" if r in sites else f"rank {r} (where: unknown)" for r in running)
        message = f"no end within {timeout_s:g} s: still running {where}"
        if ended:
            message += f"; rank {', '.join(map(str, ended))} had ended (a collective the others never joined?)"
        tail = next((e.traceback for e in errors if e is not None and e.traceback), "")
        return ErrorInfo("Timeout", message, "timeout", "script", tail)
    first = first_failed(end, errors, ended)
    if first is None or errors[first] is None:
        return None
    error = errors[first]
    message = f"rank {first} of {world}: {error.message}"
    after = [r for r, e in enumerate(errors) if e is not None and r != first and r not in end.stopped]
    if after:
        message += f"; then rank {', '.join(map(str, after))} failed too"
    if end.stopped:
        message += f"; rank {', '.join(map(str, end.stopped))} stopped after it"
    return ErrorInfo(error.type, message, error.category, error.phase, error.traceback)


def merged(
    end: GroupEnd,
    results: Sequence[Mapping[str, Any]],
    captures: Sequence[Mapping[str, list[Any]]],
    errors: Sequence[ErrorInfo | None],
    timeout_s: float,
    sites: Mapping[int, str] | None = None,
    ended: Mapping[int, float] | None = None,
) -> tuple[dict[str, Any], dict[str, list[Any]], ErrorInfo | None]:
    """The ranks' results, captures and errors as one run's (see the module docstring);
    ``sites``: where each rank still running at the timeout was (:func:`hang_site`); ``ended``:
    when each rank's script ended (:func:`first_failed`)."""
    base = dict(results[0]) if results and results[0] else {}
    present = [r for r in results if r]
    if present:
        walls = [r.get("wall_s") for r in present if r.get("wall_s") is not None]
        base["wall_s"] = max(walls) if walls else None
        base["ledger"] = _ledger(present)
        devices: dict[str, int] = {}
        for result in present:
            for kind, count in (result.get("devices") or {}).items():
                devices[kind] = devices.get(kind, 0) + count
        base["devices"] = devices
        base["inputs_read"] = sorted({p for r in present for p in r.get("inputs_read") or ()})
        missing = [set(r.get("captures_missing") or ()) for r in present]
        base["captures_missing"] = sorted(set.intersection(*missing)) if len(missing) == len(results) else []
        # the spans between captures are rank 0's: the ranks' clocks interleave
        base["capture_times"] = {rank_name(0, n): t for n, t in (results[0].get("capture_times") or {}).items()}
    base["ranks"] = [
        {
            "rank": rank,
            "exit": end.ran[rank].code,
            "wall_s": (results[rank] or {}).get("wall_s"),
            **({"error": errors[rank].message} if errors[rank] is not None else {}),
        }
        for rank in range(len(results))
    ]
    found = {rank_name(rank, name): values for rank, got in enumerate(captures) for name, values in got.items()}
    return base, found, _error(end, errors, timeout_s, sites or {}, ended or {})
