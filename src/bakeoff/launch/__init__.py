"""One way to run work elsewhere: jobs, launchers, and what comes back.

A :class:`~bakeoff.launch.job.Job` says what runs; a launcher (:mod:`bakeoff.launch.launchers`:
inline, a fresh process, a warm pool's worker; :mod:`bakeoff.launch.command` for command lines;
:mod:`bakeoff.launch.forkserver` for runs forked from a process that imported PyTorch once)
says where; an :class:`~bakeoff.launch.job.Outcome` is what comes back, a value or an error with
its category. This package is the only place a process's death is classified
(:mod:`~bakeoff.launch.deaths`), a timeout enforced and a parent's death watched
(:mod:`~bakeoff.launch.process`), and a temporary directory reaped
(:mod:`~bakeoff.launch.tempdirs`). Pipelines with steps (a target's session, a sweep's cells)
keep their own command loop on a :class:`~bakeoff.launch.process.Worker` and talk to it through
:meth:`~bakeoff.launch.process.Worker.request`.
"""
