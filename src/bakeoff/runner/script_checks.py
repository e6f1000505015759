"""The checks of a target's run of a whole script (``bakeoff exec``): every registered check,
bakeoff's and the plugins', asked for its value over the run (:meth:`Check.run_script`).

The script's run has already happened by then, in its own process: a check reads what it
recorded (captures, files, the audit's placement and compilation) and the reference's, never
runs the script again. A check that has nothing to say of scripts returns None (the default): ``not_applicable``,
decided from a target's spec for a trial, is not asked (an eager target still runs a script
that compiles itself);
one that runs only when asked (``on_request``) does not run here, as exec has no ``--check``;
its options are its defaults. A plugin check that raises (or exits) is that check's failure, a
note on the target; bakeoff's own checks raise into exec (a fault to see, not to hide).
"""

from __future__ import annotations

from typing import Any

from bakeoff.checks.base import ScriptContext
from bakeoff.checks.registry import registered_checks
from bakeoff.runner.job import checked_value

__all__ = ["script_checks"]


def script_checks(context: ScriptContext) -> dict[str, Any]:
    """Each check's value for the target's run, by name, read back through its codec as the
    knowledge base will read it (:func:`~bakeoff.runner.job.checked_value`, as in a trial);
    what the checks add to the target's notes is in ``context.notes``."""
    for check in registered_checks():
        if check.on_request:
            continue
        context.options = {key: option.default for key, option in check.options.items()}
        value, failure = checked_value(check, lambda check=check: check.run_script(context))
        if failure is not None:
            context.notes.append(failure)
        elif value is not None:
            context.results[check.name] = value
    return dict(context.results)
