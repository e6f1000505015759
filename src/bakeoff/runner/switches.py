"""Environment switches that make a process load or run code of someone else's choosing.

A stored run keeps the ``--env`` switches it was measured with, and ``bakeoff rerun`` applies
them again. A run imported from a colleague's export could carry ``LD_PRELOAD`` or
``PYTHONPATH``: replaying that would run code the person rerunning never chose. Those
switches are refused unless asked for explicitly; the rest are shown before they apply.

The list is deliberately broad (better a refusal to confirm than a silent load); it cannot
know every library's own plugin variable.
"""

from __future__ import annotations

__all__ = ["CODE_LOADING", "loads_code"]

CODE_LOADING = frozenset(
    {
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LD_AUDIT",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONSTARTUP",
        "PYTHONUSERBASE",
        "PYTHONEXECUTABLE",
        "PYTHONWARNINGS",  # a warning category names a module to import
        "PYTHONBREAKPOINT",  # names a callable to import
        "BAKEOFF_PLUGINS",  # modules bakeoff imports
        "TORCH_EXTENSIONS_DIR",
        "CC",
        "CXX",  # compilers inductor runs
        "PATH",
        "SHELL",
        "BASH_ENV",
        "ENV",
        "GCONV_PATH",  # glibc loads character-set modules from it
        "OPENSSL_CONF",  # can name engines to load
        "OPENSSL_ENGINES",
    }
)
_PREFIXES = ("LD_", "DYLD_", "PYTHON")
_SUFFIXES = ("_PLUGINS", "_CACHE_DIR")  # compile caches hold compiled code that is loaded as found


def loads_code(name: str) -> bool:
    """Whether setting ``name`` can make a process load or run code from elsewhere."""
    upper = name.upper()
    return upper in CODE_LOADING or upper.startswith(_PREFIXES) or upper.endswith(_SUFFIXES)
