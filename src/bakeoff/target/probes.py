"""Backend-specific placement signals, for work a dispatch-level audit cannot see.

A probe brackets one forward pass on the target (``begin``/``end``) and reports the ops its
backend ran on the host (``fallback_ops``) plus anything else it knows (``signals``). Adding a
backend means adding a probe here; the placement check itself does not change.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

from bakeoff.target.spec import Target

__all__ = ["Probe", "probe_for"]


class Probe(Protocol):
    def begin(self) -> None: ...

    def end(self) -> tuple[dict[str, int], dict[str, Any]]:
        """``(fallback_ops, signals)`` for the work since :meth:`begin`."""
        ...


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


class NeuronProbe:
    """Records TorchNeuron's behaviour-changing switches; its fallback report is not read yet."""

    def begin(self) -> None:
        return None

    def end(self) -> tuple[dict[str, int], dict[str, Any]]:
        switches = {k: v for k, v in os.environ.items() if k.startswith(("TORCH_NEURONX_", "NEURON_"))}
        return {}, {
            "neuron": {
                "switches": switches,
                "note": "TorchNeuron's own fallback-op report is not collected; "
                "the dispatch-level audit covers eager ops only",
            }
        }


def probe_for(target: Target) -> Probe | None:
    if target.device == "emu":
        from bakeoff import emu

        return EmuProbe() if emu.enabled() else None
    if target.device == "neuron":
        return NeuronProbe()
    return None
