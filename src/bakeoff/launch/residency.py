"""A forked worker's resident memory made to start where a spawned worker's would.

A process forked from a warm server shares the server's pages, but the kernel does not copy the
page-table entries of file-backed mappings (a library's code and read-only data): the child
counts such a page in its resident size only once it touches it. A spawned worker that imported
the same libraries has touched every page its imports touched (tens of MiB of PyTorch's code), so
a forked worker's peak resident size would read lower by as much, for the same work: a peak
memory figure, and a requirement on it, that a fresh process of the user's would not meet.

:func:`map_like` maps into this process every file-backed page its parent (the server, idle
since it imported) has resident, so the worker's resident size starts where the server's is:
what the spawned worker's would be after the same imports. Linux only (``/proc/PID/pagemap``,
``madvise(MADV_POPULATE_READ)``, 5.14 and later); elsewhere, or where the parent's page map cannot
be read, nothing is mapped and the caller is told so.
"""

from __future__ import annotations

import ctypes
import errno
import os
from array import array

__all__ = ["map_like"]

_MADV_POPULATE_READ = 22
_PRESENT = 1 << 63


def _runs(entries: array) -> list[tuple[int, int]]:
    """(first page, pages) of each run of present pages in a page-map slice."""
    runs: list[tuple[int, int]] = []
    start = None
    for index, entry in enumerate(entries):
        if entry & _PRESENT:
            if start is None:
                start = index
        elif start is not None:
            runs.append((start, index - start))
            start = None
    if start is not None:
        runs.append((start, len(entries) - start))
    return runs


def map_like(pid: int) -> int | None:
    """Map here the file-backed pages process ``pid`` has resident (see the module docstring):
    the bytes mapped, or None where it could not be done."""
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    page = os.sysconf("SC_PAGE_SIZE")
    mapped = 0
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8") as maps, open(f"/proc/{pid}/pagemap", "rb") as pagemap:
            for line in maps:
                fields = line.split(maxsplit=5)
                if len(fields) < 6 or not fields[5].startswith("/") or not fields[1].startswith("r"):
                    continue
                start, end = (int(bound, 16) for bound in fields[0].split("-"))
                pagemap.seek(start // page * 8)
                entries = array("Q")
                entries.frombytes(pagemap.read((end - start) // page * 8))
                for first, pages in _runs(entries):
                    if madvise(start + first * page, pages * page, _MADV_POPULATE_READ) == 0:
                        mapped += pages * page
                    elif ctypes.get_errno() == errno.EINVAL and not mapped:
                        return None  # a kernel without MADV_POPULATE_READ
    except OSError:
        return None
    return mapped
