"""bakeoff's release number, in a module of its own so that any layer can read it.

The package re-exports it as ``bakeoff.__version__``; the store records it with every run.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
