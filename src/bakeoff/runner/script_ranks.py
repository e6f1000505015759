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

Across machines (``--nodes NODE_RANK/NNODES@HOST:PORT``, :class:`~bakeoff.settings.nodes.Nodes`), each machine runs the
same ``bakeoff exec`` command with its own node rank: its ranks are ``NODE_RANK x N`` to ``NODE_RANK
x N + N - 1`` of a world of ``NNODES x N``, they meet the others' at ``HOST`` (node 0's address),
and each job of the run (the reference, the honest reference, each target, each timed repeat)
has a port of its own, ``PORT`` plus the job's fixed position (:func:`job_port`), so that the
same job of every machine meets, and never another. Each machine compares and stores its own
ranks, named by their global rank. gloo (the CPU reference's backend, and any gloo job) tells the
other machines to reach this one's ranks at the address this machine's hostname resolves to;
where that is a loopback address (a common ``/etc/hosts``), no other machine could, so the ranks
get ``GLOO_SOCKET_IFNAME``, the interface that reaches ``HOST`` (:func:`gloo_interface`), unless
it is set.
"""

from __future__ import annotations

import fcntl
import ipaddress
import re
import socket
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bakeoff.errors import SpecError
from bakeoff.launch.group import GroupEnd
from bakeoff.results.values import ErrorInfo
from bakeoff.settings.nodes import Nodes

__all__ = [
    "first_failed",
    "first_rank",
    "free_port",
    "gloo_interface",
    "hang_site",
    "job_port",
    "merged",
    "rank_name",
    "torchrun_env",
    "worst_placement",
]


def first_rank(nodes: Nodes | None, nproc: int) -> int:
    """The global rank of this machine's first of ``nproc`` ranks (0 on the loopback alone)."""
    return nodes.rank * nproc if nodes is not None else 0


def job_port(nodes: Nodes, position: int) -> int:
    """The port the job at ``position`` of a run meets at (see the module docstring).

    Raises:
        SpecError: the run has more jobs than ports are left above ``nodes.port``.
    """
    port = nodes.port + position
    if port > 65535:
        raise SpecError(
            f"--nodes {nodes}: job {position} of this run would need port {port}",
            hint="choose a lower port: each job of the run (every target and timed repeat) takes the next one",
        )
    return port


def worst_placement(audits: Sequence[Mapping[str, Any] | None], offset: int = 0) -> tuple[dict[str, Any] | None, str]:
    """The audit whose placement is the worst of this machine's ranks' (the first's on a tie;
    its compilation is the first's), and a note saying whose it is when another rank's differs
    (ranks named from ``offset``, this machine's first global rank)."""
    from bakeoff.checks.placement import RANK

    found = [(rank, a) for rank, a in enumerate(audits) if a is not None and a.get("placement") is not None]
    if not found:
        return (dict(audits[0]) if audits and audits[0] is not None else None), ""
    rank, worst = min(found, key=lambda ra: (RANK.get(ra[1]["placement"].verdict, 1), ra[0]))
    chosen = {**worst, "compilation": (audits[0] or {}).get("compilation")}
    verdicts = {r: a["placement"].verdict for r, a in found}
    if len(set(verdicts.values())) == 1:
        return chosen, ""
    each = ", ".join(f"rank {offset + r} {v}" for r, v in verdicts.items())
    return chosen, f"placement is rank {offset + rank}'s, the worst of {len(audits)} ranks ({each})"


def rank_name(rank: int, name: str) -> str:
    """The name rank ``rank``'s capture ``name`` is compared under."""
    return f"rank{rank}/{name}"


def free_port() -> int:
    """A TCP port free on the loopback now (the rendezvous binds it moments later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False


def _interface_of(address: str) -> str | None:
    """The network interface holding IPv4 ``address``, None where none does (Linux's
    ``SIOCGIFADDR``, interface by interface)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _index, name in socket.if_nameindex():
            try:
                answer = fcntl.ioctl(probe.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
            except OSError:
                continue  # an interface without an IPv4 address
            if socket.inet_ntoa(answer[20:24]) == address:
                return name
    return None


def gloo_interface(host: str, env: Mapping[str, str]) -> tuple[str, str] | None:
    """``(interface, why)`` when gloo must be told which interface this machine's ranks use in a
    job that meets at ``host`` (see the module docstring); None where ``GLOO_SOCKET_IFNAME`` is
    set, the hostname resolves to an address other machines may reach, the job is on the loopback,
    or the interface is not found (IPv4 only)."""
    if env.get("GLOO_SOCKET_IFNAME"):
        return None
    name = socket.gethostname()
    try:
        resolved = sorted({info[4][0] for info in socket.getaddrinfo(name, None)})
    except OSError:
        resolved = []  # gloo then falls back to the loopback address itself
    if resolved and not all(_loopback(address) for address in resolved):
        return None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((host, 9))  # no packet is sent: the kernel picks the route and the local address
            local = probe.getsockname()[0]
    except OSError:
        return None
    if _loopback(local):
        return None
    interface = _interface_of(local)
    if interface is None:
        return None
    said = (f"resolves to {', '.join(resolved)}, a loopback address gloo would give the other machines" if resolved
            else "does not resolve, so gloo would give the other machines a loopback address")  # fmt: skip
    return interface, f"this machine's hostname {name} {said}; {interface} ({local}) reaches {host}"


def torchrun_env(
    local: int, nproc: int, port: int, env: Mapping[str, str], run_id: str, nodes: Nodes | None = None
) -> dict[str, str]:
    """The variables torchrun sets for local rank ``local`` of ``nproc`` on this machine: node 0
    of 1 on the loopback, or ``nodes``'s place in a job across machines."""
    node, count = (nodes.rank, nodes.count) if nodes is not None else (0, 1)
    rank, world = node * nproc + local, count * nproc
    ranks = {"RANK": rank, "LOCAL_RANK": local, "ROLE_RANK": rank, "WORLD_SIZE": world}
    ranks |= {"LOCAL_WORLD_SIZE": nproc, "ROLE_WORLD_SIZE": world, "GROUP_RANK": node, "GROUP_WORLD_SIZE": count}
    found = {name: str(value) for name, value in ranks.items()}
    host = nodes.host if nodes is not None else "127.0.0.1"
    found |= {"ROLE_NAME": "default", "MASTER_ADDR": host, "MASTER_PORT": str(port)}
    found |= {"TORCHELASTIC_RUN_ID": run_id, "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0"}
    found["OMP_NUM_THREADS"] = env.get("OMP_NUM_THREADS", "1")
    return found


#: Functions that only pass a call on (decorators, ``Module.__call__``): not the call a rank waits in.
_WRAPPERS = frozenset({"wrapper", "inner", "_fn", "decorate_context", "_call_impl", "_wrapped_call_impl"})
#: bakeoff's own source: its remap's wrappers (``init_process_group``'s) pass a call on too.
_OURS = str(Path(__file__).resolve().parents[1]) + "/"


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
                called = [f["func"] for f in reversed(frames[:depth])
                          if f["func"] not in _WRAPPERS and not f["file"].startswith(_OURS)]  # fmt: skip
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
    offset: int = 0,
    world: int | None = None,
) -> ErrorInfo | None:
    """The run's error: the first rank's that failed (:func:`first_failed`; the ranks stopped
    after it named), or the timeout's (each rank still running named with where it was,
    ``sites``). Ranks are named by their global rank (this machine's first is ``offset``, of
    ``world``, all of the job's ranks: by default this machine's)."""
    world = world or len(errors)

    def named(ranks: Sequence[int]) -> str:
        return ", ".join(str(offset + r) for r in ranks)

    if end.failed_first is None and any(r.timed_out for r in end.ran):
        running = [r for r, ran in enumerate(end.ran) if ran.timed_out]
        done = [r for r in range(len(errors)) if r not in running]
        where = "; ".join(
            f"rank {offset + r} at {sites[r]}" if r in sites else f"rank {offset + r} (where: unknown)" for r in running
        )
        message = f"no end within {timeout_s:g} s: still running {where}"
        if done:
            message += f"; rank {named(done)} had ended (a collective the others never joined?)"
        if world > len(errors):
            message += f" (this machine's ranks only: {len(errors)} of {world}; another machine's may not have come)"
        tail = next((e.traceback for e in errors if e is not None and e.traceback), "")
        return ErrorInfo("Timeout", message, "timeout", "script", tail)
    first = first_failed(end, errors, ended)
    if first is None or errors[first] is None:
        return None
    error = errors[first]
    message = f"rank {offset + first} of {world}: {error.message}"
    # a rank whose script exited cleanly before it: its peers' next collective had no partner
    # (said first: the peer's own error, a transport's, is long)
    early = [r for r, e in enumerate(errors) if e is None and r in ended and first in ended and ended[r] < ended[first]]
    if early:
        alone = f"rank {named(early)} ended without an error while its peers ran (a collective it never joined?)"
        message = f"{alone}; then {message}"
    after = [r for r, e in enumerate(errors) if e is not None and r != first and r not in end.stopped]
    if after:
        message += f"; then rank {named(after)} failed too"
    if end.stopped:
        message += f"; rank {named(end.stopped)} stopped after it"
    return ErrorInfo(error.type, message, error.category, error.phase, error.traceback)


def merged(
    end: GroupEnd,
    results: Sequence[Mapping[str, Any]],
    captures: Sequence[Mapping[str, list[Any]]],
    errors: Sequence[ErrorInfo | None],
    timeout_s: float,
    sites: Mapping[int, str] | None = None,
    ended: Mapping[int, float] | None = None,
    nodes: Nodes | None = None,
) -> tuple[dict[str, Any], dict[str, list[Any]], ErrorInfo | None]:
    """This machine's ranks' results, captures and errors as one run's (see the module
    docstring); ``sites``: where each rank still running at the timeout was (:func:`hang_site`);
    ``ended``: when each rank's script ended (:func:`first_failed`); ``nodes``: this machine's
    place in a job across machines (its ranks are then named by their global rank)."""
    offset = first_rank(nodes, len(results))
    world = nodes.count * len(results) if nodes is not None else len(results)
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
        # the spans between captures are this machine's first rank's: the ranks' clocks interleave
        base["capture_times"] = {rank_name(offset, n): t for n, t in (results[0].get("capture_times") or {}).items()}
    base["ranks"] = [
        {
            "rank": offset + rank,
            "exit": end.ran[rank].code,
            "wall_s": (results[rank] or {}).get("wall_s"),
            **({"error": errors[rank].message} if errors[rank] is not None else {}),
        }
        for rank in range(len(results))
    ]
    found = {
        rank_name(offset + rank, name): values for rank, got in enumerate(captures) for name, values in got.items()
    }
    return base, found, _error(end, errors, timeout_s, sites or {}, ended or {}, offset, world)
