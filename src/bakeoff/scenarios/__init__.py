"""Scenarios: how a service uses the model (single-stream, offline, server, generation, training).

One module per scenario (see :mod:`bakeoff.scenarios.base` for what a scenario owns) and the
registry the trial, the verdicts and the reports iterate (:mod:`bakeoff.scenarios.registry`).
"""
