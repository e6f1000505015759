"""``neuron``: AWS TorchNeuron's ``torch.compile`` backend, and the placement probe of the neuron device."""

from __future__ import annotations

import os
from typing import Any

from bakeoff.target.engines.base import DynamoBackend, Probe
from bakeoff.target.spec import Target

__all__ = ["Neuron", "NeuronProbe"]


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


class Neuron(DynamoBackend):
    name = "neuron"
    modules = ("torch_neuronx",)
    device = "neuron"
    install = "install AWS TorchNeuron (torch-neuronx) on a Trainium host"

    def probe(self, target: Target) -> Probe | None:
        return NeuronProbe() if target.device == self.device else None
