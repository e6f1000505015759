"""The process groups a script destroys are freed after its run, by bakeoff, so that no rank
deadlocks as ``DistributedDataParallel`` lets go of its group.

PyTorch frees a process group it hands to Python with the GIL released: its destructor joins
the group's worker threads, and a gloo worker thread may need the GIL to drop a collective's
tensors (PyTorch 2.13 keeps a tensor's Python object alive while C++ holds the tensor, and drops
it under the GIL). ``DistributedDataParallel``'s reducer holds the group from C++ and is freed with
the GIL held. So after ``destroy_process_group()``, when ``main()`` returns and the reducer goes
last, the destructor can wait for a thread that waits for it: the rank hangs after its script's
last line. Seen under bakeoff in 6 of 16 runs of a DDP script that imported ``torch._dynamo``
before ``init_process_group``, each under the honest reference's rounding noise (a dispatch mode
sees every tensor); a timing race, so possible for any script.

:func:`kept_process_groups` keeps a Python reference to every group ``destroy_process_group``
releases and drops it after the script, where PyTorch frees the group with the GIL released. A
script that creates the default group again frees the kept ones first (their store may hold the
port the new one binds).

What it leaves alone: a group the script never destroys. PyTorch's own registry holds it to the
interpreter's end, so the reducer is not its last holder either.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["kept_process_groups"]


def _released(group: Any) -> list[Any]:
    """The groups ``destroy_process_group(group)`` drops: ``group``, or every group for the world."""
    from torch.distributed import distributed_c10d as c10d

    default = c10d.GroupMember.WORLD
    if group is not None and group is not default:
        return [group]
    known = list(getattr(getattr(c10d, "_world", None), "pg_map", None) or ())  # PyTorch's registry
    return known if default is None or default in known else [*known, default]


@contextlib.contextmanager
def kept_process_groups() -> Iterator[None]:
    """While inside, ``torch.distributed``'s ``destroy_process_group`` keeps what it releases,
    freed on leaving (or when ``init_process_group`` is called again); see the module docstring.
    Nothing changes where PyTorch has no ``torch.distributed``."""
    import torch.distributed as dist

    if not dist.is_available():
        yield
        return
    from torch.distributed import distributed_c10d as c10d

    kept: list[Any] = []

    def keeping(destroy: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(destroy)
        def destroy_process_group(*args: Any, **kwargs: Any) -> Any:
            kept.extend(_released(args[0] if args else kwargs.get("group")))
            return destroy(*args, **kwargs)

        return destroy_process_group

    def freeing_first(init: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(init)
        def init_process_group(*args: Any, **kwargs: Any) -> Any:
            kept.clear()
            return init(*args, **kwargs)

        return init_process_group

    saved = {}
    for name, wrap in (("destroy_process_group", keeping), ("init_process_group", freeing_first)):
        original = getattr(c10d, name)
        wrapper = wrap(original)  # one function in both places, as PyTorch has one
        for module in (dist, c10d):
            if getattr(module, name) is original:
                saved[module, name] = original
                setattr(module, name, wrapper)
    try:
        yield
    finally:
        for (module, name), original in saved.items():
            setattr(module, name, original)
        kept.clear()
