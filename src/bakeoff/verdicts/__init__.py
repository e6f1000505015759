"""Verdicts over stored results: the service's requirements met or not, and what changed between runs."""
