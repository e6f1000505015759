"""Out-of-tree devices: load the plugins that register them before targets are resolved.

PyTorch autoloads device plugins that declare the ``torch.backends`` entry point when torch is
imported. For others, ``BAKEOFF_PLUGINS=module[,module]`` names modules to import first (for
example a vendor package that registers its PrivateUse1 device on import). ``BAKEOFF_EMU=1``
enables bakeoff's bundled test device. Worker processes inherit the environment, so they see
the same devices as the parent.
"""

from __future__ import annotations

import importlib
import os

from bakeoff.errors import BakeoffError

__all__ = ["ENV_PLUGINS", "load_plugins"]

ENV_PLUGINS = "BAKEOFF_PLUGINS"


def load_plugins() -> None:
    """Import ``BAKEOFF_PLUGINS`` and enable the test device if asked; idempotent."""
    for name in [n.strip() for n in os.environ.get(ENV_PLUGINS, "").split(",") if n.strip()]:
        try:
            importlib.import_module(name)
        except Exception as exc:
            raise BakeoffError(
                f"cannot import plugin {name!r} from {ENV_PLUGINS}: {type(exc).__name__}: {exc}",
                hint="install it or remove it from BAKEOFF_PLUGINS",
            ) from exc
    from bakeoff import emu

    emu.maybe_enable_from_env()
