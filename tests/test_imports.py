"""graft's modules import each other without a cycle.

Every module under src/graft is parsed with `ast`; every import counts, at the top of a module and
inside functions (a lazy import still ties the two modules together): `import graft.x`,
`from graft.x import y` (graft.x.y when y is a submodule, else graft.x) and relative imports. An
edge goes to the module named, not to the packages above it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "graft"

# Modules being rewritten elsewhere; a cycle through one of them is expected to fail, not to pass.
BEING_REWRITTEN = {
    f"graft.{name}"
    for name in (
        *("exchange", "transfer", "peer", "stored_peer", "groups", "trainer", "update", "loss"),
        *("config", "demo", "demo_plot", "demo_report", "demo_text"),
    )
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _absolute(node: ast.ImportFrom, name: str, path: Path) -> str:
    """The module an import-from names, relative ones resolved against `name` (in `path`)."""
    if not node.level:
        return node.module or ""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The graft modules that module `name` (at `path`) imports anywhere in its body."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(node, name, path)
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                out.add(submodule if submodule in known else source)
    return {m for m in out if m in known and m != name}


def import_graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imported(name, path, set(found)) for name, path in found.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as [a, b, ..., a], or None when it has none."""
    state: dict[str, str] = {}  # "open" while on the path, "done" once fully explored
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def without(graph: dict[str, set[str]], cut: set[str]) -> dict[str, set[str]]:
    """The graph with the modules in `cut` (and every edge to them) left out."""
    return {a: {b for b in bs if b not in cut} for a, bs in graph.items() if a not in cut}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Cycles enough to cover every tangle: one found, its last edge cut, and so on."""
    found, graph = [], {a: set(bs) for a, bs in graph.items()}
    while cycle := find_cycle(graph):
        found.append(cycle)
        graph[cycle[-2]].discard(cycle[-1])
    return found


def test_the_graph_sees_every_kind_of_import(tmp_path):
    pkg = tmp_path / "graft"
    (pkg / "sub").mkdir(parents=True)
    for rel in ("__init__.py", "a.py", "b.py", "c.py", "sub/__init__.py", "sub/d.py"):
        (pkg / rel).write_text("")
    body = (
        "import graft.b\n"
        "from graft.sub import d\n"
        "from graft.sub import helper\n"
        "def f():\n"
        "    from . import c\n"
        "    from .sub.d import thing\n"
    )
    (pkg / "a.py").write_text(body)
    known = {"graft", "graft.a", "graft.b", "graft.c", "graft.sub", "graft.sub.d"}
    assert imported("graft.a", pkg / "a.py", known) == {
        "graft.b",
        "graft.c",
        "graft.sub",
        "graft.sub.d",
    }
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_graft_modules_import_each_other_without_a_cycle():
    graph = import_graph()
    assert "graft.backends.inprocess" in graph and graph["graft.trainer"]
    outside = find_cycle(without(graph, BEING_REWRITTEN))
    assert outside is None, f"import cycle: {' -> '.join(outside or [])}"
    if found := cycles(graph):  # every one of them runs through a module being rewritten
        shown = "; ".join(" -> ".join(c) for c in found)
        pytest.xfail(f"import cycles through modules being rewritten: {shown}")
