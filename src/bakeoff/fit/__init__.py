"""Will it fit? ``bakeoff fit``: the peak memory of a workload over a grid of batch sizes and
sequence lengths, predicted on the host under fake tensors, calibrated and verified on the target.

:mod:`~bakeoff.settings.grid` reads the grid, :mod:`~bakeoff.fit.step` runs one step (inference or
training) that the fake prediction and the real probes share, :mod:`~bakeoff.fit.predict`
predicts each point's peak without the device, :mod:`~bakeoff.fit.probe` measures a point on
the target, :mod:`~bakeoff.scenarios.fit` holds the answer, :mod:`~bakeoff.fit.run` puts them together
and :mod:`~bakeoff.fit.record` makes the answer a run to store.
"""
