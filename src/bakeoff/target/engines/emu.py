"""``emu``: the bundled test device's ``torch.compile`` backend and its placement probe.

The backend counts its own compilations (ground truth for the compilation audit); the probe
reads the device's counters of ops run on it and handed to the host (ground truth for the
placement audit).
"""

from __future__ import annotations

import os
from typing import Any

from bakeoff.target.engines.base import Compiled, DynamoBackend, Probe
from bakeoff.target.spec import Target

__all__ = ["Emu", "EmuProbe"]


class EmuProbe:
    """The bundled test device counts every op its host fallback runs for an unsupported op."""

    def begin(self) -> None:
        from bakeoff import emu

        emu.reset_counters()

    def end(self) -> tuple[dict[str, int], dict[str, Any]]:
        from bakeoff import emu

        data = emu.counters()
        signals = {
            "emu": {
                "device_ops": sum(data["device_ops"].values()),
                "host_fallback_ops": sum(data["fallback_ops"].values()),
                "transfers": {
                    "host_to_device": {"count": data["h2d_count"], "bytes": data["h2d_bytes"]},
                    "device_to_host": {"count": data["d2h_count"], "bytes": data["d2h_bytes"]},
                },
                "syncs": data["syncs"],
                "unsupported": os.environ.get("BAKEOFF_EMU_UNSUPPORTED", ""),
            }
        }
        return dict(data["fallback_ops"]), signals


class Emu(DynamoBackend):
    name = "emu"
    device = "emu"
    install = "enable bakeoff's test device with BAKEOFF_EMU=1"

    def compile(self, model: Any, target: Target) -> Compiled:
        from bakeoff.emu.backend import COMPILATIONS

        compiled = super().compile(model, target)
        start = len(COMPILATIONS)
        watch_summary = compiled.compile_summary

        def summary() -> dict[str, Any]:
            data = watch_summary()
            data["signals"] = {**data.get("signals", {}), "emu": {"compilations": len(COMPILATIONS) - start}}
            return data

        compiled.compile_summary = summary
        return compiled

    def probe(self, target: Target) -> Probe | None:
        if target.device != self.device:
            return None
        from bakeoff import emu

        return EmuProbe() if emu.enabled() else None
