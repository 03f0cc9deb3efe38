"""The package's layers, read from its imports (module level and inside functions alike):
no import circle, and no layer imports one above it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import REPO

PACKAGE = REPO / "src" / "dlvirt"

# Lowest first. A module may import its own layer and those below it, never one above.
LAYERS = ["core", "system", "apps", "platforms", "run", "plan", "analysis", "cli"]


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The dlvirt modules ``path`` imports anywhere in its body."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            if name in modules:
                found.add(name)
    return found


def _graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(paths)
    return {name: _imports(path, modules) - {name} for name, path in paths.items()}


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) == 1:
        return None  # the package itself (its version) and its entry points
    top = parts[1]
    return LAYERS.index(top) if top in LAYERS else LAYERS.index("cli")


def test_no_import_circle() -> None:
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            # importing a package's __init__ from inside it is how a submodule names its siblings
            if nxt == node.rsplit(".", 1)[0]:
                continue
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                pytest.fail("import circle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_no_layer_imports_a_higher_one() -> None:
    wrong = []
    for module, imported in sorted(_graph().items()):
        low = _layer(module)
        for other in sorted(imported):
            high = _layer(other)
            if low is not None and high is not None and high > low:
                wrong.append(f"{module} imports {other} ({LAYERS[high]} is above {LAYERS[low]})")
    assert not wrong, "\n".join(wrong)
