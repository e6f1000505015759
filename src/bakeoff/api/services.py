"""A running service under its traffic (``bakeoff serve``): :func:`serve_service` checks every
argument before anything starts (the settings, the targets, the reference), then hands the run
to :mod:`bakeoff.runner.serve`, which reads the traffic, measures each target and stores the run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from bakeoff.api.common import PathLike, _store_for, _targets, reference_target
from bakeoff.results.values import RunResult
from bakeoff.settings.option import describe_options
from bakeoff.settings.serve import SERVE_OPTIONS, ServeSettings

__all__ = ["serve_service"]


def serve_service(
    command: str,
    on: str | Iterable[str] = "cpu",
    *,
    db: PathLike | None = None,
    progress: Callable[[str], None] | None = None,
    **settings: Any,
) -> RunResult:
    """Start ``command`` (a command line; ``{port}`` and ``{device}`` filled in) once per target,
    its device remapped as ``bakeoff exec`` remaps a script; send each the same traffic on an
    open-loop schedule; judge its objectives and compare its responses with the reference
    service's; store the run.

    Args:
        command: the service's command line, e.g. ``python -m myservice --port {port}``.
        on: target devices, as a list or one comma-separated string (``emu``, ``xpu``, ``cpu``).
        db: database path or URL (default ``BAKEOFF_DB`` or ``./bakeoff.db``).
        progress: called with a short message as each target starts.
        {settings}

    Raises:
        SpecError: bad input (an unknown target or setting value, a traffic file that cannot be
            read, a malformed objective); nothing started and nothing is stored.
    """
    from bakeoff.runner.serve import serve_service as run_serve
    from bakeoff.target.spec import parse_target

    checked = ServeSettings.from_options(**settings)
    parsed = _targets(on)
    reference = reference_target(checked.reference) if checked.reference is not None else parse_target("cpu")
    store = _store_for(db)
    return run_serve(store, command, parsed, checked, reference=reference, progress=progress)


serve_service.__doc__ = (serve_service.__doc__ or "").replace("{settings}", describe_options(SERVE_OPTIONS, " " * 8))
