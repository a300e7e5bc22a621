"""The layout shows the architecture: packages and modules that say what they hold, one concern
each (a file ends where its concern ends, not at a line count), the layout page true to the tree,
and a command line that loads nothing heavy before a command runs."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "graft"
LAYOUT = ROOT / "docs" / "guides" / "layout.md"
MAX_FUNCTION_LINES = 80
"""The house's ceiling: past this, a function does two things."""
HEAVY = ("torch", "transformers", "numpy", "pyarrow", "tokenizers", "safetensors", "matplotlib")


def test_every_module_opens_with_what_it_holds():
    """One concern per module, named for it: its docstring says what it holds, and a module is
    never the continuation of another ("part 2"), as files cut at a line count were."""
    for path in PACKAGE.rglob("*.py"):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        where = path.relative_to(ROOT)
        assert len(doc.split()) >= 5, f"{where}: no docstring saying what it holds"
        assert not re.search(r"\bpart \d|\bcontinued\b", doc.split("\n\n")[0]), where


def test_the_layout_page_names_every_module_and_none_that_is_gone():
    block = LAYOUT.read_text(encoding="utf-8").split("```")[1]
    named = {Path(n).name for n in re.findall(r"[\w/]+\.py", block)}
    modules = [p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"]
    unnamed = sorted(str(p.relative_to(PACKAGE)) for p in modules if p.name not in named)
    assert not unnamed, f"docs/guides/layout.md does not name {unnamed}"
    files = {p.name for p in [*PACKAGE.rglob("*.py"), *(ROOT / "scripts").glob("*.py")]}
    assert not sorted(named - files), f"docs/guides/layout.md names {sorted(named - files)}"


def test_no_function_runs_past_the_house_ceiling():
    long = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines})")
    assert not long, long


def test_every_package_says_what_it_holds():
    for init in PACKAGE.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc.split()) >= 8, f"{init.relative_to(ROOT)}: no docstring"


def test_only_the_data_flow_packages_and_shared_modules_stand_at_the_top():
    """The shared records and helpers, the pure group math several packages use, and the loop
    on top of them all."""
    top = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    shared = [
        "errors", "extras", "groups", "preflight", "procutil", "seeds", "session", "trainer",
        "types",
    ]  # fmt: skip
    assert top == shared, top


def _imports(tree: ast.AST, *, nested: bool) -> list[ast.Import | ast.ImportFrom]:
    """The import statements of a module: at module level, and with `nested` also those inside
    functions and classes; never those under `if TYPE_CHECKING:` (they do not run)."""
    found: list[ast.Import | ast.ImportFrom] = []
    todo = list(ast.iter_child_nodes(tree))
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo += node.orelse
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif nested or not isinstance(
            node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda
        ):
            todo += ast.iter_child_nodes(node)
    return found


def package_imports() -> dict[str, dict[str, str]]:
    """Top-level package (or module) -> the other ones it imports -> one module that does. Imports
    inside functions count as much as those at module level (a lazy import is still a
    dependency), except in `cli/`, which stands above everything and imports it lazily so that
    the parser loads nothing heavy; imports under `if TYPE_CHECKING:` do not count."""
    edges: dict[str, dict[str, str]] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        src = parts[0]
        for node in _imports(ast.parse(path.read_text()), nested=src != "cli"):
            names = []
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("graft"):
                mod = node.module.split(".")
                names = [mod[1]] if len(mod) > 1 else [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name.split(".")[1] for a in node.names if a.name.startswith("graft.")]
            for dst in names:
                if dst != src:
                    edges.setdefault(src, {}).setdefault(dst, "/".join(parts))
    return edges


def test_packages_form_layers_without_an_import_cycle():
    """No package imports, through any chain, a package that imports it back (function-level
    imports counted): helpers live below their users and the trainer above what it drives."""
    edges = package_imports()

    def reach(start: str) -> list[str] | None:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in edges.get(node, {}):
                if nxt == start:
                    return [*path, start]
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
        return None

    cycles = {p for p in edges if reach(p)}
    assert not cycles, {p: reach(p) for p in sorted(cycles)}
    assert edges["trainer"].keys() >= {"backends", "exchange", "training", "groups"}


def _imported_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nprint(' '.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    return {m.split(".")[0] for m in out.split()}


def test_import_graft_and_the_parser_load_nothing_heavy():
    loaded = _imported_after("import graft, graft.cli\ngraft.cli.build_parser()")
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_graft_help_loads_nothing_heavy():
    probe = (
        "import sys, contextlib, io\nfrom graft.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main(['--help'])\n"
        "print(' '.join(m for m in sys.modules if m.split('.')[0] in "
        f"{HEAVY!r}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    assert out.strip() == "", out
