"""Environment capture: what software and hardware a measurement was made with.

The environment is stored once per distinct fingerprint and linked from every run, so a
change of torch, driver, compiler library or a behaviour-changing environment variable is
visible when a comparison is repeated later.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

__all__ = ["ENV_PREFIXES", "Environment", "capture_environment", "host_memory"]

#: Environment variables whose names start with these change how PyTorch and backends behave.
ENV_PREFIXES = (
    "TORCH",
    "PYTORCH_",
    "TORCHINDUCTOR_",
    "TORCHDYNAMO_",
    "OMP_",
    "MKL_",
    "KMP_",
    "OPENBLAS_",
    "NEURON_",
    "XLA_",
    "CUDA_",
    "HIP_",
    "ROCM_",
    "HSA_",
    "ZE_",
    "SYCL_",
    "ONEDNN_",
    "DNNL_",
    "OV_",
    "OPENVINO_",
    "ORT_",
    "TRANSFORMERS_",
    "HF_HUB_OFFLINE",
    # bakeoff's own device switches: out-of-tree plugins to load, the test device and the ops it
    # declares unsupported (which changes where work runs)
    "BAKEOFF_PLUGINS",
    "BAKEOFF_EMU",
)
#: Distributions whose versions matter when present (looked up without importing them).
PACKAGES = (
    "torch",
    "transformers",
    "safetensors",
    "numpy",
    "triton",
    "openvino",
    "onnxruntime",
    "onnx",
    "onnxscript",
    "torch-neuronx",
    "torch_neuronx",
    "neuronx-cc",
    "torch-xla",
    "intel-extension-for-pytorch",
    "accelerate",
    "bakeoff",
)
#: Entry point groups of plugins (checks, scenarios, engines): the distribution providing any
#: entry in them is recorded with its version beside :data:`PACKAGES`, since installing or
#: upgrading a plugin can change a run's results.
PLUGIN_GROUPS = ("bakeoff.checks", "bakeoff.scenarios", "bakeoff.engines")
#: Keys that vary between runs on the same environment and must not enter the fingerprint.
VOLATILE = ("captured_at", "load_average")
#: Environment variables recorded but left out of the fingerprint: cache locations change no
#: behaviour, and torch sets TORCHINDUCTOR_CACHE_DIR itself once inductor has run.
VOLATILE_ENV = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "BAKEOFF_DB", "BAKEOFF_ARTIFACTS", "BAKEOFF_CACHE")


@dataclass(frozen=True)
class Environment:
    """A snapshot of the software and hardware, with a fingerprint of its stable part."""

    data: dict[str, Any] = field(default_factory=dict)

    @property
    def fingerprint(self) -> str:
        stable = {k: v for k, v in self.data.items() if k not in VOLATILE}
        if isinstance(stable.get("env"), dict):
            stable["env"] = {k: v for k, v in stable["env"].items() if k not in VOLATILE_ENV}
        return hashlib.sha256(json.dumps(stable, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return {"fingerprint": self.fingerprint, **self.data}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Environment:
        return cls({k: v for k, v in data.items() if k != "fingerprint"})


def host_memory() -> tuple[int, int] | None:
    """``(available, total)`` bytes of this host's memory, or None where the system does not say.

    Available is the kernel's estimate of what can be allocated without swapping (Linux's
    ``MemAvailable``, which counts reclaimable page cache), else the free pages.
    """
    try:
        with open("/proc/meminfo", encoding="utf-8") as handle:
            fields = {k: v.split() for k, _, v in (line.partition(":") for line in handle)}
        return int(fields["MemAvailable"][0]) * 1024, int(fields["MemTotal"][0]) * 1024
    except (OSError, KeyError, ValueError, IndexError):
        pass
    try:
        page = os.sysconf("SC_PAGE_SIZE")
        return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page
    except (AttributeError, OSError, ValueError):
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _packages() -> dict[str, str]:
    """Versions of :data:`PACKAGES` present, then of each distribution providing a plugin."""
    found: dict[str, str] = {}
    for name in PACKAGES:
        try:
            found[metadata.distribution(name).metadata["Name"].lower()] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    for group in PLUGIN_GROUPS:
        for entry in metadata.entry_points(group=group):
            dist = entry.dist
            name = dist.metadata.get("Name") if dist is not None else None
            if dist is not None and name:
                found.setdefault(name.lower(), str(dist.version or "unknown"))
    return found


def _plugins() -> dict[str, str]:
    """Versions of the device plugins named in ``BAKEOFF_PLUGINS``: their distribution's
    version, else the module's ``__version__``, else "unknown"."""
    names = [n.strip() for n in os.environ.get("BAKEOFF_PLUGINS", "").split(",") if n.strip()]
    if not names:
        return {}
    owners = metadata.packages_distributions()
    found: dict[str, str] = {}
    for name in names:
        top = name.split(".")[0]
        version = None
        for dist in owners.get(top, ()):
            try:
                version = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
        if version is None and name in sys.modules:
            version = getattr(sys.modules[name], "__version__", None)
        found[name] = str(version or "unknown")
    return found


def _devices() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "torch_cuda": torch.version.cuda,
        "torch_hip": getattr(torch.version, "hip", None),
        "privateuse1": torch._C._get_privateuse1_backend_name(),
    }
    accelerator = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    info["accelerator"] = str(accelerator) if accelerator is not None else None
    if accelerator is not None:
        module = getattr(torch, accelerator.type, None)
        names = []
        for index in range(torch.accelerator.device_count()):
            try:
                names.append(module.get_device_name(index))  # type: ignore[union-attr]
            except Exception:
                names.append(accelerator.type)
        info["accelerator_devices"] = names
    if torch.cuda.is_available():
        info["cudnn"] = torch.backends.cudnn.version()
        info["cuda_capability"] = list(torch.cuda.get_device_capability())
    return info


def capture_environment() -> Environment:
    """Capture the environment of this process (imports torch)."""
    import datetime

    import torch

    env_vars = {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)}
    data: dict[str, Any] = {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "os": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_git": getattr(torch.version, "git_version", None),
        "packages": _packages(),
        "devices": _devices(),
        "env": env_vars,
        "threads": {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads()},
        "captured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }
    plugins = _plugins()
    if plugins:  # only when there are any: an environment without plugins keeps its fingerprint
        data["plugins"] = plugins
    return Environment(data)
