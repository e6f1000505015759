"""The command line: thin adapters over :mod:`bakeoff.api` and the single error boundary."""
