"""graft's modules import each other without a cycle.

Every module under src/graft is parsed with `ast`; every import that runs counts, at the top of a
module and inside functions (a lazy import still ties the two modules together): `import graft.x`,
`from graft.x import y` (graft.x.y when y is a submodule, else graft.x) and relative imports. An
edge goes to the module named, not to the packages above it. Imports under `if TYPE_CHECKING:` are
for the type checker alone, never run, and do not count.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "graft"


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


def _type_checking_only(node: ast.AST) -> bool:
    test = getattr(node, "test", None) if isinstance(node, ast.If) else None
    return isinstance(test, ast.Name | ast.Attribute) and ast.unparse(test).endswith(
        "TYPE_CHECKING"
    )


def _run_time_nodes(tree: ast.AST):
    """Every node of the tree, less the bodies of `if TYPE_CHECKING:` blocks."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if _type_checking_only(node):
            todo.extend(node.orelse)
        else:
            todo.extend(ast.iter_child_nodes(node))


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The graft modules that module `name` (at `path`) imports anywhere in its body."""
    out: set[str] = set()
    for node in _run_time_nodes(ast.parse(path.read_text(), str(path))):
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
    for rel in ("__init__.py", "a.py", "b.py", "c.py", "sub/__init__.py", "sub/d.py", "sub/e.py"):
        (pkg / rel).write_text("")
    body = (
        "import graft.b\n"
        "from graft.sub import d\n"
        "from graft.sub import helper\n"
        "def f():\n"
        "    from . import c\n"
        "    from .sub.d import thing\n"
        "if TYPE_CHECKING:\n"
        "    import graft.sub.e\n"
    )
    (pkg / "a.py").write_text(body)
    known = {"graft", "graft.a", "graft.b", "graft.c", "graft.sub", "graft.sub.d", "graft.sub.e"}
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
    found = cycles(graph)
    assert not found, "import cycles: " + "; ".join(" -> ".join(c) for c in found)
