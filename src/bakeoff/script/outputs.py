"""Files a script wrote, found by what changed and read without running anything they hold.

A run's working directory is a copy of the user's. :func:`stamp` records each file's size and
modification time before the script runs (and the content hash of the files in a format read
here), and :func:`written` names the files that are new or changed after it. :func:`read_outputs`
reads those bakeoff can read safely, into plain values (tensors, numbers, strings, lists, dicts):

* ``.safetensors``: every tensor by its name (the safetensors library; a header and raw bytes);
* ``.npy`` / ``.npz``: numpy arrays, loaded with ``allow_pickle=False`` (an object array is a
  pickle and is refused); an ``.npz`` is a dict of its arrays;
* ``.json``: numbers, strings, lists and dicts as they are, a rectangular list of numbers as one
  tensor (float32 when it holds a float, like a captured Python float; else int64).

Pickle files (``.pt``, ``.pth``, ``.pkl``, ``.pickle``, ``.bin``, ``.ckpt``) are never loaded,
not even by ``torch.load(weights_only=True)``: its restricted unpickler has had escapes
(CVE-2025-32434), and loading a file is not worth running code from it. They, files in other
formats, files over :data:`MAX_FILE_BYTES` (or past :data:`MAX_TOTAL_BYTES` read in one run, in
path order) and files a reader refuses are listed with the reason, never a crash.

What it cannot see: a file in a format it does not read that was rewritten with the same size
and modification time (a format read here is hashed too), files the script deleted, files
outside the working directory, and what a symbolic link points to (it is not followed).
"""

from __future__ import annotations

import hashlib
import os
import stat
import zipfile
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_TOTAL_BYTES",
    "NEVER_LOADED",
    "Outputs",
    "read_output",
    "read_outputs",
    "stamp",
    "written",
]

#: The largest file read (bytes); a larger one is listed, not read.
MAX_FILE_BYTES = 256 * 2**20
#: The most bytes read from one run's files; the files past it (in path order) are listed.
MAX_TOTAL_BYTES = 1024 * 2**20
#: Suffixes of pickle files, which are never loaded.
NEVER_LOADED = frozenset({".pt", ".pth", ".pkl", ".pickle", ".bin", ".ckpt"})
#: Why a pickle file is not compared.
PICKLE = "pickle files are never loaded"

#: ``(size, modification time in ns, sha256 or None)`` of a file before the run.
Stamp = tuple[int, int, str | None]


@dataclass(frozen=True)
class Outputs:
    """The files one run wrote: ``values`` (by relative path, those read) and ``skipped`` (by
    relative path, why one was not read). Every file the run wrote is in exactly one of them."""

    values: dict[str, Any] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)

    def paths(self) -> set[str]:
        """Every file the run wrote."""
        return set(self.values) | set(self.skipped)


def _files(root: Path, skip_dirs: Collection[str]) -> Iterator[tuple[Path, str]]:
    """``(path, relative posix path)`` of every file and symbolic link under ``root``, outside
    directories named in ``skip_dirs``; links to directories are not entered."""
    for directory, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in skip_dirs)
        for name in sorted(names + [d for d in dirs if Path(directory, d).is_symlink()]):
            path = Path(directory, name)
            yield path, path.relative_to(root).as_posix()


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def _hashed(path: Path, info: os.stat_result) -> bool:
    """Whether ``path``'s content is hashed in its stamp: a regular file in a format read here
    and not over :data:`MAX_FILE_BYTES`."""
    return stat.S_ISREG(info.st_mode) and path.suffix.lower() in _READERS and info.st_size <= MAX_FILE_BYTES


def stamp(root: Path, skip_dirs: Collection[str] = ()) -> dict[str, Stamp]:
    """Each file's :data:`Stamp` under ``root`` (by relative posix path), taken before the run."""
    stamps: dict[str, Stamp] = {}
    for path, rel in _files(root, skip_dirs):
        info = path.lstat()
        stamps[rel] = (info.st_size, info.st_mtime_ns, _digest(path) if _hashed(path, info) else None)
    return stamps


def written(
    root: Path, before: dict[str, Stamp], skip_dirs: Collection[str] = (), exclude: Collection[str] = ()
) -> list[str]:
    """The files under ``root`` that are new or changed since ``before`` (another size or
    modification time, or for a hashed file another content), in path order; ``exclude``:
    relative paths that never count (bakeoff's own files)."""
    found = []
    for path, rel in _files(root, skip_dirs):
        if rel in exclude:
            continue
        old = before.get(rel)
        info = path.lstat()
        if old is None or old[:2] != (info.st_size, info.st_mtime_ns):
            found.append(rel)
        elif old[2] is not None and _digest(path) != old[2]:
            found.append(rel)
    return sorted(found)


# -- readers --------------------------------------------------------------------------------------


def _tensor(array: Any) -> Any:
    """A numpy array as a torch tensor in its own dtype where torch has it (complex as its real
    and imaginary parts on a last axis; wider unsigned integers as int64), else as a list."""
    import numpy as np
    import torch

    if array.dtype.kind not in "biufc":  # strings, dates, structured records: compared exactly
        return array.tolist()
    array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("="))
    if array.dtype.kind == "c":
        array = np.stack([array.real, array.imag], axis=-1)
    if array.dtype.kind == "u" and array.dtype != np.uint8:
        array = array.astype(np.int64)
    if array.dtype.kind == "f" and array.dtype not in (np.float16, np.float32, np.float64):
        array = array.astype(np.float64)
    return torch.from_numpy(array if array.flags.writeable else array.copy())


def _read_safetensors(path: Path) -> dict[str, Any]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        return {name: handle.get_tensor(name) for name in handle.keys()}


def _read_npy(path: Path) -> Any:
    import numpy as np

    with open(path, "rb") as handle:
        if handle.read(6) != b"\x93NUMPY":
            raise ValueError("not a .npy file")
    try:
        array = np.load(path, allow_pickle=False)
    except ValueError as exc:
        if "allow_pickle" in str(exc):
            raise ValueError("an array of Python objects (a pickle) is never loaded") from None
        raise
    return _tensor(array)


def _read_npz(path: Path) -> dict[str, Any]:
    import numpy as np

    with zipfile.ZipFile(path) as archive:
        unpacked = sum(member.file_size for member in archive.infolist())
    if unpacked > MAX_FILE_BYTES:
        raise ValueError(f"its arrays unpack to more than {MAX_FILE_BYTES >> 20} MiB")
    with np.load(path, allow_pickle=False) as archive:
        arrays = {}
        for name in archive.files:
            try:
                arrays[name] = _tensor(archive[name])
            except ValueError as exc:
                if "allow_pickle" in str(exc):
                    raise ValueError(f"{name} is an array of Python objects (a pickle), never loaded") from None
                raise
    return arrays


def _numbers(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _rectangular(value: list[Any]) -> tuple[int, ...] | None:
    """The shape of ``value`` when it is a non-empty rectangular nested list of numbers."""
    if not value:
        return None
    if all(_numbers(v) for v in value):
        return (len(value),)
    if not all(isinstance(v, list) for v in value):
        return None
    shapes = {_rectangular(v) for v in value}
    if len(shapes) != 1 or None in shapes:
        return None
    return (len(value), *shapes.pop())  # type: ignore[misc]


def _leaves(value: list[Any]) -> Iterable[Any]:
    for v in value:
        yield from _leaves(v) if isinstance(v, list) else (v,)


def _from_json(value: Any) -> Any:
    """A parsed JSON document with each rectangular list of numbers as one tensor."""
    if isinstance(value, dict):
        return {k: _from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        if _rectangular(value) is not None:
            import torch

            floats = any(isinstance(v, float) for v in _leaves(value))
            try:
                return torch.tensor(value, dtype=torch.float32 if floats else torch.int64)
            except (OverflowError, RuntimeError):  # an integer wider than int64: compared as it is
                pass
        return [_from_json(v) for v in value]
    return value


def _read_json(path: Path) -> Any:
    import json

    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc})") from None
    return _from_json(document)


_READERS: dict[str, Callable[[Path], Any]] = {
    ".safetensors": _read_safetensors,
    ".npy": _read_npy,
    ".npz": _read_npz,
    ".json": _read_json,
}


def read_output(path: Path) -> Any:
    """The value of one file in a format read here (see the module's docstring).

    Raises:
        ValueError: the suffix is not one read here.
        Exception: whatever the reader raises on a malformed file (:func:`read_outputs` lists it).
    """
    reader = _READERS.get(path.suffix.lower())
    if reader is None:
        raise ValueError(f"{path.suffix or 'a file without a suffix'} is not a format bakeoff reads")
    return reader(path)


def _why(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:200]
    return text or type(exc).__name__


def read_outputs(
    root: Path,
    paths: Iterable[str],
    *,
    max_file_bytes: int = MAX_FILE_BYTES,
    max_total_bytes: int = MAX_TOTAL_BYTES,
) -> Outputs:
    """Read the files at ``paths`` (relative to ``root``), in path order; a file that is not
    read is listed with why (a pickle, another format, a symbolic link, a cap, a reader's error)."""
    values: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    total = 0
    for rel in sorted(paths):
        path = root / rel
        suffix = path.suffix.lower()
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            skipped[rel] = "a symbolic link, not followed"
            continue
        if not stat.S_ISREG(info.st_mode):  # a pipe or a socket: opening it could block
            skipped[rel] = "not a regular file"
            continue
        if suffix in NEVER_LOADED:
            skipped[rel] = PICKLE
            continue
        if suffix not in _READERS:
            skipped[rel] = "not a format bakeoff reads"
            continue
        size = info.st_size
        if size > max_file_bytes:
            skipped[rel] = f"over {max_file_bytes / 2**20:g} MiB, not read"
            continue
        if total + size > max_total_bytes:
            skipped[rel] = f"past the {max_total_bytes / 2**20:g} MiB read from one run's files"
            continue
        total += size
        try:
            values[rel] = read_output(path)
        except Exception as exc:  # a malformed file is listed, never the end of the run
            skipped[rel] = f"unreadable: {_why(exc)}"
    return Outputs(values, skipped)
