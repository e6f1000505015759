"""What this installation offers: the targets seen from this process, the workload kinds and
architectures, the registered checks, and :func:`demo`, the bundled tiny workload on every
target available here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bakeoff.api.common import PathLike
from bakeoff.api.trials import trial
from bakeoff.results.values import RunResult


def targets() -> dict[str, list[dict[str, Any]]]:
    """Devices and torch.compile backends as seen from this process, with availability."""
    from bakeoff.target.detect import list_backends, list_devices

    return {"devices": [d.to_dict() for d in list_devices()], "backends": [b.to_dict() for b in list_backends()]}


def workloads() -> dict[str, Any]:
    """Workload kinds with their syntax, and the architecture names ``arch:`` accepts."""
    from bakeoff.workload.base import KINDS
    from bakeoff.workload.hf import ARCH_DEFAULTS, INPUT_DEFAULTS, list_architectures

    return {
        "kinds": KINDS,
        "architectures": list_architectures(),
        "arch_options": {k: v[1] for k, v in ARCH_DEFAULTS.items()} | INPUT_DEFAULTS,
    }


def checks() -> list[dict[str, Any]]:
    """The registered checks, in the order they run (bakeoff's own, then plugins'): each
    one's name, title, where it comes from, its options (type, default, minimum, what it
    does) and the metrics it offers to requirements."""
    from bakeoff.checks.registry import is_builtin, registered_checks

    return [
        {
            "name": check.name,
            "title": check.title,
            "source": "bakeoff" if is_builtin(check) else f"plugin {type(check).__module__.partition('.')[0]}",
            "runs": "on request (--check NAME)" if getattr(check, "on_request", False) else "always",
            "options": {
                key: {"type": o.kind.__name__, "default": o.default, "minimum": o.minimum, "help": o.help}
                for key, o in check.options.items()
            },
            "requirement_metrics": {name: what for name, (_kind, what) in check.offers.items()},
        }
        for check in registered_checks()
    ]


def demo(
    *,
    db: PathLike | None = None,
    progress: Callable[[str], None] | None = None,
    min_samples: int = 30,
    min_seconds: float = 0.5,
) -> RunResult:
    """The bundled tiny workload against every target available here: eager and compiled CPU,
    the OpenVINO and ONNX Runtime engines when installed, and each accelerator present."""
    from bakeoff.target.detect import backend_status, list_devices
    from bakeoff.target.engines import demo_backends
    from bakeoff.workload.registry import DEMO_WORKLOAD

    on = ["cpu", "cpu+aot_eager", "cpu+inductor"]
    on += [f"cpu+{name}" for name in demo_backends() if backend_status(name, "cpu").available]
    for device in list_devices():
        if device.available and device.name != "cpu":
            on.append(device.name)
    return trial(DEMO_WORKLOAD, on, db=db, progress=progress, min_samples=min_samples, min_seconds=min_seconds)
