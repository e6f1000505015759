"""Does it run the same across devices (``bakeoff dist``): N ranks of a job on the target's
process-group backend, started, watched and stopped together (:mod:`~bakeoff.distributed.ranks`),
each running a rank program (:mod:`~bakeoff.distributed.collectives`), once per world size of a
ladder (:mod:`~bakeoff.distributed.run`), stored as a run (:mod:`~bakeoff.distributed.record`)."""
