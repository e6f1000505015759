"""Peak host memory per scenario.

``ru_maxrss`` only ever grows over a process's life, so it cannot say what one scenario
needed. On Linux, writing ``5`` to ``/proc/self/clear_refs`` resets the peak (``VmHWM``) to
the current resident size, which makes a per-scenario peak measurable; elsewhere the
process-lifetime peak is reported.
"""

from __future__ import annotations

import os
import re
import resource
from pathlib import Path

__all__ = ["lifetime_peak_rss_bytes", "peak_rss_bytes", "reset_peak_rss"]

_STATUS = Path("/proc/self/status")
_CLEAR = Path("/proc/self/clear_refs")


def reset_peak_rss() -> bool:
    """Reset the process's peak RSS to its current RSS; False where the OS cannot."""
    try:
        _CLEAR.write_text("5")
        return True
    except OSError:
        return False


def lifetime_peak_rss_bytes() -> int:
    """The process's peak resident set size since it started (resets do not affect it)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return int(peak if os.uname().sysname == "Darwin" else peak * 1024)


def peak_rss_bytes() -> int:
    """The peak resident set size since the last reset (or since the process started)."""
    try:
        match = re.search(r"VmHWM:\s+(\d+)\s*kB", _STATUS.read_text())
        if match:
            return int(match.group(1)) * 1024
    except OSError:
        pass
    return lifetime_peak_rss_bytes()
