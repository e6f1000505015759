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
from bakeoff.checks.registry import is_builtin, registered_checks
from bakeoff.entrypoints import PLUGIN_FAILURES, said_by
from bakeoff.results import strictjson

__all__ = ["script_checks"]


def script_checks(context: ScriptContext) -> dict[str, Any]:
    """Each check's value for the target's run, by name, read back through its codec as the
    knowledge base will read it; what the checks add to the target's notes is in
    ``context.notes``."""
    for check in registered_checks():
        if check.on_request:
            continue
        context.options = {key: option.default for key, option in check.options.items()}
        value = _guarded(check, context, check.run_script, context)
        if value is None:
            continue
        if not isinstance(value, check.value_type):
            context.notes.append(
                f"the {check.name} check returned {type(value).__name__}, not its value type "
                f"{check.value_type.__name__}"
            )
            continue
        context.results[check.name] = check.decode(strictjson.loads(strictjson.dumps(check.encode(value))))
    return dict(context.results)


def _guarded(check: Any, context: ScriptContext, method: Any, *args: Any) -> Any:
    if is_builtin(check):
        return method(*args)
    try:
        return method(*args)
    except PLUGIN_FAILURES as exc:  # sys.exit in a plugin is its failure, never the target's
        context.notes.append(f"the {check.name} check {said_by(exc)}")
        return None
