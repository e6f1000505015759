"""Bundled examples: a real service to point ``bakeoff serve`` at, and the traffic to send it."""
