"""Every command's settings, each declared once: its keyword, flag, default, check and help.

One frozen value per entry point (:class:`TrialSettings`, :class:`ExecSettings`, and the
sweep's trial keywords), each with its table of :class:`Option` (:data:`TRIAL_OPTIONS`,
:data:`EXEC_OPTIONS`, :data:`SWEEP_OPTIONS`, :data:`PLAN_OPTIONS`, :data:`LOCALIZE_OPTIONS`).
The command line's options, the keyword API's defaults, docstrings and checks, what a run
stores and what ``rerun`` passes again are all read from the tables; the command reference
(``docs/reference.md``) is written from the command line, so from them too. A plan's stages
and a sweep's cells are trials: they take some of the trial's settings, stored as a trial's.
"""

from bakeoff.settings.bounds import COUNT, FRACTION, SEED, TIMEOUT, Bounds
from bakeoff.settings.exec import EXEC_OPTIONS, ExecSettings
from bakeoff.settings.option import Option, describe_options, read_options
from bakeoff.settings.plan import LOCALIZE_OPTIONS, PLAN_OPTIONS, PLAN_TRIAL_KEYWORDS
from bakeoff.settings.sweep import SWEEP_OPTIONS, SWEEP_TIMING, sweep_keywords
from bakeoff.settings.trial import TRIAL_OPTIONS, TrialSettings

__all__ = [
    "COUNT",
    "EXEC_OPTIONS",
    "FRACTION",
    "LOCALIZE_OPTIONS",
    "PLAN_OPTIONS",
    "PLAN_TRIAL_KEYWORDS",
    "SEED",
    "SWEEP_OPTIONS",
    "SWEEP_TIMING",
    "TIMEOUT",
    "TRIAL_OPTIONS",
    "Bounds",
    "ExecSettings",
    "Option",
    "TrialSettings",
    "describe_options",
    "read_options",
    "sweep_keywords",
]
