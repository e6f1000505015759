"""Checks: each takes what a target produced and returns a result value."""
