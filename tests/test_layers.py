"""The package layers of ``src/bakeoff``: dependencies point one way, and modules form no import circle.

:data:`LAYERS` is the one place the order is written down, lowest first. A module may import
its own package and any package of a lower layer; packages that share a layer are independent
siblings and may not import each other. Imports inside functions count the same as imports at
the top of a module (a lazy import is still a dependency), and so do imports under
``TYPE_CHECKING``. Between single modules, no circle of module-level imports is allowed: such a
circle makes the outcome depend on which module is imported first.

The checker is plain code over the syntax tree (no imports of bakeoff), so the tests at the
bottom can show it catching a seeded violation in a small synthetic package.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "bakeoff"

#: The layers, lowest first. A name is a subpackage or a single module directly under
#: ``bakeoff``; ``__init__`` is the top-level package itself (its keyword API facade).
LAYERS: tuple[tuple[str, ...], ...] = (
    # typed exceptions: everything may raise them
    ("errors",),
    # foundations with no knowledge of workloads or targets: spec syntax, the environment,
    # order statistics over samples, file content hashes, the release number, the value codec,
    # figures in their units, plugins named by entry points, the files a user names for output, the
    # bounded reading of what a process wrote
    ("specsyntax", "env", "stats", "hashing", "version", "codec", "units", "entrypoints", "outfiles", "logtail"),
    # what runs (workload builders), and the bundled test accelerator
    ("workload", "emu"),
    # where it runs: target specs, detection, placing and compiling a model, compile watches
    ("target",),
    # whole scripts as written: their device remapped (with the ledger of every rewrite) and the
    # values they capture; knows devices and targets, not how a trial runs or is stored
    ("script",),
    # pure analysis over numbers and samples: tolerances, ratios, noise, buckets, queues
    ("analysis",),
    # clocks and timing loops
    ("measure",),
    # the checks and the scenarios, each owning its frozen value, and their registries; neither
    # knows the other
    ("checks", "scenarios"),
    # every metric a requirement may name: the scenarios' and the checks'
    ("metrics",),
    # how a trial runs: every setting's name, default, check and help, read back from a run
    ("settings",),
    # a run's frozen values, which hold the checks' values by name
    ("results",),
    # verdicts over results: requirements met, regressions between runs
    ("verdicts",),
    # the knowledge base and the rendering of values: neither knows the other
    ("store", "report"),
    # one way to run work elsewhere: jobs, launchers (inline, fresh process, warm pool, command
    # line), their outcomes, the one death classifier, owned temporary directories
    ("launch",),
    # a running service under its traffic: arrival schedules, the open-loop load generator
    ("serve",),
    # will it fit: peaks predicted under fake tensors, probed on the target in fresh processes;
    # does it run the same across devices: ranks started, watched and stopped together
    ("fit", "distributed"),
    # isolation and orchestration of a trial
    ("runner",),
    # coverage sweeps: many trials over a population of workloads, each cell stored as it ends
    ("sweep",),
    # keyword entry points
    ("api",),
    # thin command-line adapters and the error boundary; the bundled example service (a user's
    # service, built on the bundled workload), which nothing of bakeoff imports
    ("cli", "examples"),
    # the package facade (re-exports the API lazily) and ``python -m bakeoff``
    ("__init__", "__main__"),
)

#: Imports allowed against the layers, as ``(importing module, imported module): why``. Keep empty.
EXCEPTIONS: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Import:
    """One ``import`` statement's edge: ``source`` imports ``target`` at ``line``."""

    source: str
    target: str
    line: int
    in_function: bool


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def unit_of(module: str) -> str:
    """The layer name a module belongs to: its subpackage or top-level module, or ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


#: What :func:`collect_imports` returns: the modules found, and every import between them.
Collected = tuple[set[str], list[Import]]


def collect_imports(root: Path) -> Collected:
    """Every module under ``root`` (a package directory) and every import of another module of it.

    ``from pkg import name`` counts as importing the submodule ``pkg.name`` when there is one.
    """
    package = root.name
    files = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    modules = set(files)
    imports: list[Import] = []
    for module, path in files.items():
        is_package = path.name == "__init__.py"

        def visit(node: ast.AST, in_function: bool, module: str = module, is_package: bool = is_package) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    visit(child, True)
                    continue
                targets: list[str] = []
                if isinstance(child, ast.Import):
                    targets = [alias.name for alias in child.names]
                elif isinstance(child, ast.ImportFrom):
                    if child.level:
                        base = module.split(".")
                        if not is_package:
                            base = base[:-1]
                        base = base[: len(base) - (child.level - 1)]
                        origin = ".".join([*base, child.module] if child.module else base)
                    else:
                        origin = child.module or ""
                    for alias in child.names:
                        submodule = f"{origin}.{alias.name}"
                        targets.append(submodule if submodule in modules else origin)
                for target in targets:
                    if target == package or target.startswith(package + "."):
                        while target not in modules:  # ``import pkg.mod.attr`` style: the module part
                            target = target.rsplit(".", 1)[0]
                        if target != module:
                            imports.append(Import(module, target, child.lineno, in_function))
                visit(child, in_function)

        visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), False)
    return modules, imports


def layer_violations(
    imports: Iterable[Import],
    layers: tuple[tuple[str, ...], ...],
    exceptions: Mapping[tuple[str, str], str] = {},
) -> list[str]:
    """Each import of a package that is not in a lower layer than the importer's own."""
    rank = {name: index for index, names in enumerate(layers) for name in names}
    problems = []
    for edge in imports:
        source, target = unit_of(edge.source), unit_of(edge.target)
        if source == target or (edge.source, edge.target) in exceptions:
            continue
        for name in (source, target):
            if name not in rank:
                problems.append(f"{name} is in no layer (imported by {edge.source}:{edge.line})")
        if source in rank and target in rank and rank[target] >= rank[source]:
            where = "inside a function" if edge.in_function else "at module level"
            relation = "a sibling in the same layer" if rank[target] == rank[source] else "a higher layer"
            problems.append(f"{edge.source}:{edge.line} imports {edge.target} ({relation}) {where}")
    return sorted(set(problems))


def module_cycles(imports: Iterable[Import]) -> list[list[str]]:
    """The circles of module-level imports (strongly connected groups of two or more modules)."""
    graph: dict[str, set[str]] = {}
    for edge in imports:
        if not edge.in_function:
            graph.setdefault(edge.source, set()).add(edge.target)
            graph.setdefault(edge.target, set())
    return strongly_connected(graph)


def strongly_connected(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Tarjan's algorithm; only the groups of more than one node, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph.get(node, ())):
            if successor not in index:
                connect(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(groups)


# -- the rules, on bakeoff itself ------------------------------------------------------------


@pytest.fixture(scope="module")
def bakeoff_imports() -> Collected:
    """``collect_imports(SRC)``, read once for every rule below (the tree does not change)."""
    return collect_imports(SRC)


def test_every_package_has_a_layer_and_every_layer_a_package(bakeoff_imports: Collected) -> None:
    modules, _ = bakeoff_imports
    present = {unit_of(m) for m in modules}
    listed = [name for names in LAYERS for name in names]
    assert len(listed) == len(set(listed)), "a name appears in two layers"
    assert sorted(present - set(listed)) == [], "place these in LAYERS"
    assert sorted(set(listed) - present) == [], "these layers name nothing under src/bakeoff"


def test_imports_point_down_the_layers(bakeoff_imports: Collected) -> None:
    _, imports = bakeoff_imports
    assert layer_violations(imports, LAYERS, EXCEPTIONS) == []


def test_no_circle_of_module_level_imports(bakeoff_imports: Collected) -> None:
    _, imports = bakeoff_imports
    assert module_cycles(imports) == []


#: The trial core: what runs a trial, from its entry point down. It reads and keeps baselines and
#: requirements through an interface (``bakeoff.runner.keeping``) and returns its run unsaved, so
#: nothing it imports, directly or through other modules, inside functions too, is the store.
TRIAL_CORE = "bakeoff.runner.trial"


def reachable(imports: Iterable[Import], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others (inside functions too)."""
    graph: dict[str, set[str]] = {}
    for edge in imports:
        graph.setdefault(edge.source, set()).add(edge.target)
    seen, todo = set(), [start]
    while todo:
        for target in graph.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_the_trial_core_does_not_reach_the_store(bakeoff_imports: Collected) -> None:
    _, imports = bakeoff_imports
    reached = reachable(imports, TRIAL_CORE)
    assert "bakeoff.runner.session" in reached and "bakeoff.checks.registry" in reached  # it sees the core
    assert sorted(m for m in reached if unit_of(m) == "store") == []


def test_reachable_follows_imports_inside_functions(imports_of: ImportsOf) -> None:
    imports = imports_of({"a.py": "def f():\n    import pkg.b\n", "b.py": "from pkg.c import x\n", "c.py": ""})
    assert reachable(imports, "pkg.a") == {"pkg.b", "pkg.c"}


def test_every_exception_is_still_needed(bakeoff_imports: Collected) -> None:
    _, imports = bakeoff_imports
    used = {(edge.source, edge.target) for edge in imports}
    assert sorted(set(EXCEPTIONS) - used) == []


# -- the checker on a synthetic package: it must catch what it is for -------------------------

#: Writes a synthetic package from ``{relative path: source}`` and returns its imports.
ImportsOf = Callable[[dict[str, str]], list[Import]]


@pytest.fixture
def imports_of(tmp_path: Path) -> ImportsOf:
    """Writes a synthetic package ``pkg`` (its ``__init__.py`` empty unless given) from
    ``{relative path: source}`` under ``tmp_path`` and returns the imports the checker finds in it."""

    def build(files: dict[str, str]) -> list[Import]:
        package = tmp_path / "pkg"
        for name, text in {"__init__.py": "", **files}.items():
            path = package / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        return collect_imports(package)[1]

    return build


_LOW_HIGH = (("low",), ("high",))


@pytest.mark.parametrize(
    "text",
    [
        "from pkg.high import thing\n",
        "import pkg.high\n",
        "from pkg import high\n",
        "def f():\n    from pkg.high.impl import thing\n",
        "class C:\n    def m(self):\n        import pkg.high.impl\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.high.impl import Thing\n",
    ],
)
def test_checker_flags_an_import_of_a_higher_layer(imports_of: ImportsOf, text: str) -> None:
    imports = imports_of({"low.py": text, "high/__init__.py": "", "high/impl.py": "from pkg.low import x\n"})
    problems = layer_violations(imports, _LOW_HIGH)
    assert len(problems) == 1
    assert problems[0].startswith("pkg.low:")
    assert "(a higher layer)" in problems[0]


def test_checker_passes_imports_that_point_down(imports_of: ImportsOf) -> None:
    imports = imports_of(
        {
            "low.py": "import os\nfrom pkg import low as same\n",
            "high/__init__.py": "from pkg.high.impl import thing\n",
            "high/impl.py": "from pkg.low import x\n\ndef f():\n    import pkg.low\n",
        }
    )
    assert len(imports) == 3  # the checker saw the imports it then passes
    assert layer_violations(imports, _LOW_HIGH) == []
    assert module_cycles(imports) == []


def test_checker_flags_siblings_unlisted_packages_and_honours_exceptions(
    imports_of: ImportsOf,
) -> None:
    imports = imports_of({"a.py": "import pkg.b\n", "b.py": "", "c.py": "import pkg.a\n"})
    layers = (("a", "b"),)
    assert layer_violations(imports, layers) == [
        "c is in no layer (imported by pkg.c:1)",
        "pkg.a:1 imports pkg.b (a sibling in the same layer) at module level",
    ]
    excused = {("pkg.a", "pkg.b"): "test", ("pkg.c", "pkg.a"): "test"}
    assert layer_violations(imports, layers, excused) == []


def test_checker_finds_a_circle_at_module_level_only(imports_of: ImportsOf) -> None:
    imports = imports_of(
        {
            "a.py": "from pkg.b import x\n",
            "b.py": "from pkg.c import y\n",
            "c.py": "import pkg.a\n",
            "d.py": "import pkg.e\n",
            "e.py": "def f():\n    import pkg.d\n",
        }
    )
    assert module_cycles(imports) == [["pkg.a", "pkg.b", "pkg.c"]]
