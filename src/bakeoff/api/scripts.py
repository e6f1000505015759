"""Scripts run unchanged (``bakeoff exec``): :func:`exec_script` checks every argument before
anything runs (the script, the device map, the captures, the targets and the reference), then
hands the run to :mod:`bakeoff.runner.script`, which stores it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from bakeoff.api.common import _DEFAULT, PathLike, _targets, _would_create
from bakeoff.results.values import RunResult
from bakeoff.store.db import Store


def exec_script(
    script: PathLike,
    args: Iterable[str] = (),
    on: str | Iterable[str] = "cpu",
    *,
    db: PathLike | None = None,
    reference: str | None = None,
    map_devices: str | Iterable[str] = ("cuda",),
    strict: bool = False,
    capture: str | Iterable[str] = (),
    timeout_s: float = _DEFAULT.timeout_s,
    seed: int = 0,
    audit: bool = True,
    workdir: PathLike | None = None,
    files: bool = True,
    capture_modules: str | Iterable[str] = (),
    repeats: int = 0,
    progress: Callable[[str], None] | None = None,
) -> RunResult:
    """Run a script unchanged: as the reference, then on each target with its devices remapped;
    compare what it captured, keep the ledger of rewrites, store the run.

    Args:
        script: the script's path; it runs in a copy of the current working directory.
        args: its arguments (``sys.argv[1:]``).
        on: targets, as a list or one comma-separated string: devices (``emu``, ``xpu``,
            ``cpu``...), or a device with a ``torch.compile`` backend (``cpu+inductor``,
            ``emu+aot_eager?dynamic=true``), which compiles the script's root module calls
            (:mod:`bakeoff.script.compiled`).
        reference: the device the reference runs on. None: the script's own device (the first
            of ``map_devices``) where it exists here, else ``cpu``.
        map_devices: the device names the script uses that are remapped (``cuda``), each to each
            target's device (and the reference's where it does not run as written); ``cuda=emu``
            says so explicitly, and must name the targets' device.
        strict: a rewrite that may change numerics (autocast the target cannot honour, a dtype
            downgrade, a library's answer to ``torch.cuda.is_available()``) fails the run.
        capture: ``module:function`` names whose return values are compared, call by call
            (losses passed to ``backward()`` and ``bakeoff.capture(name, value)`` always are).
        timeout_s: a run still going after this long is stopped and recorded as a timeout.
        audit: audit where each target's work ran over the whole script (its first 20,000 op
            calls) and what torch.compile did; False leaves placement "not audited".
        workdir: the directory each run gets a copy of and ``script`` is relative to (None: the
            current working directory).
        files: compare the files each run wrote in its copy of the working directory
            (safetensors, npy, npz and JSON, read without unpickling; see
            :mod:`bakeoff.script.outputs`) with the reference's; False ignores them.
        capture_modules: glob patterns (``*.mlp``, ``Linear``) of module qualified names or
            class names whose outputs are compared call by call, as ``module:QUALNAME``
            captures (at most 8 calls per module; see :mod:`bakeoff.script.modules`);
            ``@roots`` the root module calls (the model the script calls). None given: the
            root calls at a small budget (4 calls of each, 32 MiB); ``none``: no module call.
        repeats: time the reference and each target over this many more runs, without the audit
            or ``capture``'s tracing (the first run stays the evidence): their latency, and a
            speed-up from two or more. 0: the first run's wall time, a single observation.

    Raises:
        SpecError: bad input (a missing script, an unknown target); nothing is stored.
    """
    from pathlib import Path

    from bakeoff.errors import SpecError
    from bakeoff.runner.script import exec_script as run_exec
    from bakeoff.script.modules import DEFAULT, check_patterns
    from bakeoff.target.detect import unavailable_reason
    from bakeoff.target.spec import parse_target

    path = Path(script)
    folder = Path.cwd() if workdir is None else Path(workdir)
    if not folder.is_dir():
        raise SpecError(f"no working directory at {folder}", hint="give the directory the script runs in")
    if not (folder / path).is_file():
        raise SpecError(f"no script at {path}", hint="give the path of a Python script")
    from bakeoff.settings import SEED, TIMEOUT

    TIMEOUT.check(timeout_s, "timeout_s")  # nan would disable it; a negative seed is no seed
    SEED.check(seed, "seed")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 0:
        raise SpecError(f"repeats {repeats!r}", hint="give a whole number of timing runs, 0 or more")
    given = [map_devices] if isinstance(map_devices, str) else list(map_devices)
    entries = [part.strip() for text in given for part in text.split(",") if part.strip()]
    sources = [entry.partition("=")[0].strip() for entry in entries]
    if not sources or any(not s.isidentifier() for s in sources):
        raise SpecError(f"--map {','.join(entries) or '(empty)'}", hint="name the device types the script uses: cuda")
    named = {entry.partition("=")[2].strip() for entry in entries if "=" in entry}
    names = [capture] if isinstance(capture, str) else list(capture)
    for name in names:
        module, _, function = name.partition(":")
        if not module or not function:
            raise SpecError(f"--capture {name}", hint="give module:function, e.g. infer:postprocess")
    patterns = [capture_modules] if isinstance(capture_modules, str) else list(capture_modules)
    patterns = patterns or list(DEFAULT)
    problem = check_patterns(patterns)
    if problem is not None:
        raise SpecError(f"--capture-modules {problem[0]!r}", hint=problem[1])
    parsed = _targets(on)
    as_written = reference is None and unavailable_reason(parse_target(sources[0])) is None
    ref = parse_target(reference or ("cpu" if not as_written else sources[0]))
    if ref.is_compiled or ref.dtype or ref.amp:
        raise SpecError(f"--reference {ref.spec}", hint="the reference is a device: cpu, cuda, xpu...")
    remapped = {t.torch_device for t in parsed if t != ref}
    if named and named != remapped:  # --map cuda=emu names the targets' device: it must be theirs
        raise SpecError(
            f"--map {','.join(entries)}: the targets run on {', '.join(sorted(remapped)) or 'the reference only'}",
            hint="each run's devices are remapped to its target's device: give --map cuda, or --on the device named",
        )
    from bakeoff.store.connection import resolve_db_url

    url = resolve_db_url(db)  # the knowledge base is never copied into a run's working directory
    keep_out = [Path(url.removeprefix("sqlite:///"))] if url.startswith("sqlite:///") else []
    store = (lambda: Store.open(db)) if _would_create(db) else Store.open(db)
    return run_exec(
        store, path, list(args), parsed, reference=ref, source_devices=sources, strict=strict, captures=names,
        timeout_s=timeout_s, seed=seed, as_written=as_written or ref.device in sources, audit=audit,
        progress=progress, keep_out=keep_out, workdir=folder, files=files, capture_modules=patterns,
        repeats=repeats,
    )  # fmt: skip
