"""The package's module-level imports form no cycle (data flows one way).

Imports under ``if TYPE_CHECKING:`` and inside functions (lazy imports) are not
module-level; a submodule importing its own package's ``__init__`` is not a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def _imports(tree: ast.AST, known: dict[str, Path]) -> set[str]:
    found: set[str] = set()
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module in known:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names} & set(known)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names} & set(known)
        found |= _imports(node, known)
    return found


def _graph() -> dict[str, set[str]]:
    known = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        deps = set()
        for dep in _imports(ast.parse(path.read_text("utf-8")), known):
            parts = dep.split(".")
            # importing a.b.c runs a/__init__ and a.b/__init__ too
            for i in range(1, len(parts) + 1):
                mod = ".".join(parts[:i])
                if mod in known and mod != name and not name.startswith(mod + "."):
                    deps.add(mod)
        graph[name] = deps
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (a depth-first search), or None."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep not in state and (found := visit(dep)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_no_import_cycles() -> None:
    graph = _graph()
    assert "kvbudget.engines.registry" in graph["kvbudget.deployment"]  # the graph is read
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_search_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
