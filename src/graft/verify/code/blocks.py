"""Which code of a response is the program, and which names a test's code calls or defines.

A response's fenced blocks are read line by line (```lang or ~~~lang, as long a closing fence;
a final fence left open, as when generation stops before it, still holds a block). Only Python
blocks (labeled python/python3/py, or unlabeled) that are not `>>>` transcripts are ever
executed: ```bash, ```text, ```output, ```pycon and the like are what the model shows, not what
it proposes. Of those, the program is (`choose_program`):
- for a function problem, the last block that defines the entry point (one that compiles before
  one that does not), so a usage example or a test run after the solution is never taken for
  it; with none, the last block with a `def`, `class` or `return` (a function body written
  alone), else the last block;
- for a standard-input problem, the last block that compiles and reads its input, else the last
  that compiles and is more than literals (an unlabeled block of expected output), else the last.
"""

from __future__ import annotations

import ast
import builtins
import re
import textwrap
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

PYTHON_LABELS = frozenset({"", "python", "python3", "py", "py3", "python2", "sage"})
_OPEN = re.compile(r"^(?P<indent>[ \t]{0,8})(?P<fence>`{3,}|~{3,})[ \t]*(?P<label>[^\s`{]*)")
_READS_INPUT = re.compile(r"\binput\s*\(|\bstdin\b|\bopen\s*\(\s*0\b|\bfileinput\b")
_BODY = re.compile(r"^\s*(def|class|return)\b", re.MULTILINE)
BUILTIN_NAMES = frozenset(dir(builtins))


@dataclass(frozen=True)
class Block:
    label: str
    code: str
    closed: bool = True


def fenced_blocks(response: str) -> list[Block]:
    """Every fenced block of a response, in order; a last fence never closed holds the rest."""
    blocks: list[Block] = []
    lines = response.splitlines()
    i = 0
    while i < len(lines):
        opened = _OPEN.match(lines[i])
        if opened is None:
            i += 1
            continue
        fence, indent = opened["fence"], len(opened["indent"])
        if fence in lines[i][opened.end() :]:  # ```inline code``` on one line: no block
            i += 1
            continue
        close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        body: list[str] = []
        i += 1
        closed = False
        while i < len(lines):
            line = lines[i]
            i += 1
            if close.match(line):
                closed = True
                break
            if line.rstrip().endswith(fence) and line.strip() != fence:  # code```
                body.append(line.rstrip()[: -len(fence)])
                closed = True
                break
            body.append(line[indent:] if line[:indent].strip() == "" else line)
        code = "\n".join(body)
        blocks.append(Block(opened["label"].lower(), code + "\n" if code else "", closed))
    return blocks


def is_transcript(code: str) -> bool:
    """A `>>>` session: shown, never run."""
    first = next((line for line in code.splitlines() if line.strip()), "")
    return first.lstrip().startswith(">>>")


def python_blocks(response: str) -> list[str]:
    """The code of the Python blocks that may be run (module docstring), in order."""
    return [
        b.code
        for b in fenced_blocks(response)
        if b.label in PYTHON_LABELS and b.code.strip() and not is_transcript(b.code)
    ]


@contextmanager
def _quiet() -> Iterator[None]:
    """A candidate's code is parsed here, on the host: what the compiler warns about it (`3(4)`,
    an invalid escape) is the program's business, not a line on the trainer's console."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def parsed(code: str) -> ast.Module | None:
    with _quiet():
        try:
            return ast.parse(code)
        except (SyntaxError, ValueError):
            try:  # a function body written alone, indented
                return ast.parse(textwrap.dedent(code))
            except (SyntaxError, ValueError):
                return None


def compiles(code: str) -> bool:
    with _quiet():
        try:
            compile(code, "block", "exec")
        except (SyntaxError, ValueError):
            return False
    return True


def _top_level(body: list[ast.stmt]) -> Iterable[ast.stmt]:
    for node in body:
        yield node
        if isinstance(node, ast.If | ast.Try | ast.With | ast.For | ast.While):
            for part in ("body", "orelse", "finalbody", "handlers"):
                yield from _top_level(getattr(node, part, []))
        elif isinstance(node, ast.ExceptHandler):
            yield from _top_level(node.body)


def top_level_names(code: str) -> set[str]:
    """The names a module binds at its top level (defs, classes, assignments, imports)."""
    tree = parsed(code)
    names: set[str] = set()
    if tree is None:
        return names
    for node in _top_level(tree.body):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def _defines(code: str, names: frozenset[str]) -> bool:
    if top_level_names(code) & names:
        return True
    return any(re.search(rf"^\s*def\s+{re.escape(n)}\s*\(", code, re.MULTILINE) for n in names)


_LITERAL = (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.UnaryOp, ast.unaryop,
            ast.expr_context)  # fmt: skip


def _only_literals(code: str) -> bool:
    """Bare literals only: an unlabeled block of expected output, not a program."""
    tree = parsed(code)
    return tree is not None and all(
        isinstance(node, ast.Expr) and all(isinstance(n, _LITERAL) for n in ast.walk(node.value))
        for node in tree.body
    )


def choose_program(response: str, entry: Iterable[str] = ()) -> str | None:
    """The program of a response (module docstring): `entry` names the functions a function
    problem's tests call (any one of them defined will do); empty for a standard-input
    problem. None when the response has no Python block."""
    blocks = python_blocks(response)
    if not blocks:
        return None
    names = frozenset(entry)
    if names:
        defining = [b for b in blocks if _defines(b, names)]
        if defining:
            return next((b for b in reversed(defining) if compiles(b)), defining[-1])
        return next((b for b in reversed(blocks) if _BODY.search(b)), blocks[-1])
    runnable = [b for b in blocks if compiles(b)]
    for b in reversed(runnable):
        if _READS_INPUT.search(b):
            return b
    return next((b for b in reversed(runnable) if not _only_literals(b)), blocks[-1])


def called_names(sources: Iterable[str]) -> list[str]:
    """Names called as functions (`f(...)`) in the sources, in order of first appearance."""
    seen: dict[str, None] = {}
    for source in sources:
        tree = parsed(source)
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                seen.setdefault(node.func.id, None)
    return list(seen)


def bound_names(sources: Iterable[str]) -> set[str]:
    """Every name the sources bind anywhere: assignments, defs, classes, imports, arguments."""
    names: set[str] = set()
    for source in sources:
        tree = parsed(source)
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
                names.add(node.id)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Import | ast.ImportFrom):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
    return names


def solution_names(tests: Iterable[str], others: Iterable[str] = ()) -> list[str]:
    """The names the tests call that neither they, nor `others` (setup, prelude), nor Python's
    builtins define: those the solution's module is to define, in order of first call."""
    tests = list(tests)
    defined = bound_names([*tests, *others]) | BUILTIN_NAMES | {"candidate"}
    return [n for n in called_names(tests) if n not in defined]
