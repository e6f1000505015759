"""Where a workload runs: device + execution mode (eager or a torch.compile backend) + dtype."""

from __future__ import annotations

from bakeoff.target.spec import Target, parse_target, parse_targets

__all__ = ["Target", "parse_target", "parse_targets"]
