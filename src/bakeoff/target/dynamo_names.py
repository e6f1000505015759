"""The ``torch.compile`` backend names PyTorch's own source registers, read without importing
``torch._dynamo``.

Dynamo's registry is filled as ``torch._dynamo`` is imported (then its backend modules, on the
first lookup): 2-3 s of CPU, more under load. bakeoff's command line asks "is ``aot_eager`` a
backend here?" before any work, where nothing else needs the compiler (a ``py:`` workload, a
script). So the names PyTorch registers itself are read from the installed source of the modules
its registry imports (``torch/_dynamo/backends/*.py`` and the minifier's): each
``register_backend``-like call and decorator, with its ``name=`` or the decorated function's
name. A test compares them with the live registry of the installed PyTorch.

What it cannot see: a registration made only under a condition (it is read as made; the run's
compile then fails with PyTorch's own error), and any name registered by another package (entry
points, a plugin's ``register_backend``): those are still asked of the imported registry.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path

__all__ = ["pytorch_backends"]

#: Besides ``torch/_dynamo/backends``, what dynamo's registry imports on a lookup (``_lazy_import``).
_ALSO = ("repro/after_dynamo.py",)


@functools.cache
def pytorch_backends() -> frozenset[str]:
    """Every backend name the installed PyTorch's own source registers; empty where it cannot
    be read (then every name is asked of the imported registry)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return frozenset()
    dynamo = Path(spec.origin).parent / "_dynamo"
    names: set[str] = set()
    for path in [*sorted((dynamo / "backends").glob("*.py")), *(dynamo / rel for rel in _ALSO)]:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        except (OSError, SyntaxError, ValueError):
            continue
        names |= _registered_in(tree)
    return frozenset(names)


def _registered_in(tree: ast.Module) -> set[str]:
    """The names ``tree`` registers through a ``register_*backend`` it imports (from the registry
    or ``torch._dynamo``)."""
    registers = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.name.startswith("register_") and alias.name.endswith("backend")
    }
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for decorator in node.decorator_list:
                bare = isinstance(decorator, ast.Name) and decorator.id in registers
                if bare or (_registers(decorator, registers) and _name_given(decorator) is None):
                    names.add(node.name)
        elif _registers(node, registers):
            given = _name_given(node)
            if given is not None:
                names.add(given)
            elif node.args and isinstance(node.args[0], ast.Name):  # register_backend(fn): fn.__name__
                names.add(node.args[0].id)
    return names


def _registers(node: ast.AST, registers: set[str]) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in registers


def _name_given(call: ast.Call) -> str | None:
    for keyword in call.keywords:
        if keyword.arg == "name" and isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str):
            return keyword.value.value
    return None
