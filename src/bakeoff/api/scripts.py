"""Scripts run unchanged (``bakeoff exec``): :func:`exec_script` checks every argument before
anything runs (the script, the device map, the captures, the targets and the reference), then
hands the run to :mod:`bakeoff.runner.script`, which stores it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from bakeoff.api.common import PathLike, _store_for, _targets, reference_target
from bakeoff.results.values import RunResult
from bakeoff.settings import EXEC_OPTIONS, ExecSettings, describe_options
from bakeoff.target.spec import Target

_DEFAULT = ExecSettings()


def exec_script(
    script: PathLike,
    args: Iterable[str] = (),
    on: str | Iterable[str] = "cpu",
    *,
    db: PathLike | None = None,
    reference: str | None = _DEFAULT.reference,
    map_devices: str | Iterable[str] = _DEFAULT.map_devices,
    strict: bool = _DEFAULT.strict,
    capture: str | Iterable[str] = _DEFAULT.capture,
    capture_modules: str | Iterable[str] = _DEFAULT.capture_modules,
    timeout_s: float = _DEFAULT.timeout_s,
    seed: int = _DEFAULT.seed,
    audit: bool = _DEFAULT.audit,
    files: bool = _DEFAULT.files,
    repeats: int = _DEFAULT.repeats,
    nproc: int = _DEFAULT.nproc,
    nodes: str = _DEFAULT.nodes,
    workdir: PathLike | None = None,
    progress: Callable[[str], None] | None = None,
) -> RunResult:
    """Run a script unchanged: as the reference, then on each target with its devices remapped;
    compare what it captured, keep the ledger of rewrites, store the run.

    Args:
        script: the script's path; it runs in a copy of the working directory.
        args: its arguments (``sys.argv[1:]``).
        on: targets, as a list or one comma-separated string: devices (``emu``, ``xpu``,
            ``cpu``...), or a device with a ``torch.compile`` backend (``cpu+inductor``,
            ``emu+aot_eager?dynamic=true``), which compiles the script's root module calls
            (:mod:`bakeoff.script.compiled`).
        db: database path or URL (default ``BAKEOFF_DB`` or ``./bakeoff.db``).
        {settings}
        workdir: the directory each run gets a copy of and ``script`` is relative to (None: the
            current working directory); stored, so that ``rerun`` runs the script from there.
        progress: called with a short message as each run starts.

    Every setting is described, defaulted and checked once, in :mod:`bakeoff.settings.exec`:
    a keyword whose flag repeats takes a list or one text (``map_devices`` also one
    comma-separated text). A rewrite ``strict`` refuses is one that may change numerics
    (autocast the target cannot honour, a dtype downgrade, a library's answer to
    ``torch.cuda.is_available()``); the files compared are read without unpickling
    (:mod:`bakeoff.script.outputs`); ``capture_modules`` are matched as in
    :mod:`bakeoff.script.modules`.

    Raises:
        SpecError: bad input (a missing script, an unknown target); nothing is stored.
    """
    from pathlib import Path

    from bakeoff.errors import SpecError
    from bakeoff.runner.script import exec_script as run_exec

    settings = ExecSettings.from_options(
        reference=reference, map_devices=map_devices, strict=strict, capture=capture,
        capture_modules=capture_modules, timeout_s=timeout_s, seed=seed, audit=audit, files=files, repeats=repeats,
        nproc=nproc, nodes=nodes,
    )  # fmt: skip
    path = Path(script)
    folder = Path.cwd() if workdir is None else Path(workdir)
    if not folder.is_dir():
        raise SpecError(f"no working directory at {folder}", hint="give the directory the script runs in")
    if not (folder / path).is_file():
        raise SpecError(f"no script at {path}", hint="give the path of a Python script")
    parsed = _targets(on)
    ref, as_written = resolve_reference(settings)
    remapped = {t.torch_device for t in parsed if t != ref}
    if settings.named and settings.named != remapped:  # --map cuda=emu names the targets' device: it must be theirs
        raise SpecError(
            f"--map {','.join(settings.map_devices)}: the targets run on "
            + (", ".join(sorted(remapped)) or "the reference only"),
            hint="each run's devices are remapped to its target's device: give --map cuda, or --on the device named",
        )
    from bakeoff.store.connection import resolve_db_url, sqlite_file

    url = resolve_db_url(db)  # the knowledge base is never copied into a run's working directory
    keep_out = [file] if (file := sqlite_file(url)) is not None else []
    store = _store_for(db)
    return run_exec(
        store, path, list(args), parsed, settings, reference=ref, as_written=as_written,
        progress=progress, keep_out=keep_out, workdir=folder,
    )  # fmt: skip


def resolve_reference(settings: ExecSettings) -> tuple[Target, bool]:
    """Where the reference of a script run with ``settings`` runs, and whether that is the
    script as written (its own device, unmapped): the ``reference`` asked for, else the
    script's own device (the first of the device map) where it exists here, else the CPU."""
    from bakeoff.target.detect import extra_devices, unavailable_reason
    from bakeoff.target.spec import parse_target

    sources = settings.sources
    own = settings.reference is None and unavailable_reason(parse_target(sources[0])) is None
    if settings.reference is not None:
        reference = reference_target(settings.reference)
    else:
        reference = parse_target(sources[0] if own else "cpu", extra_devices())
    return reference, own or reference.device in sources


exec_script.__doc__ = (exec_script.__doc__ or "").replace("{settings}", describe_options(EXEC_OPTIONS, " " * 8))
