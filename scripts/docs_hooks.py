"""MkDocs hooks of the documentation site (mkdocs.yml `hooks:`).

A page may include a file from the repository root, so that the file stays the one source of
its text: a line `--8<-- "BENCHMARKS.md"` is replaced by that file when the site is built. The
file's links are written from the repository root (`docs/evidence.md`); they are rewritten to
point from the including page (`evidence.md`), and a link to an included file points to the page
that includes it. A link that leads nowhere in the site is left as it is, so the strict build
reports it.

Every page is written as a code host renders Markdown: a list may follow its paragraph's last
line directly, and a nested list is indented by its parent's marker (two spaces). Python-Markdown,
which MkDocs uses, needs a blank line before a list and four spaces per level; `sane_lists` gives
it both, so the pages read the same on the site and in the repository.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
INCLUDE = re.compile(r'^--8<-- "([^"]+)"\s*$', re.MULTILINE)
LINK = re.compile(r"\]\(([^)\s]+)\)")
ITEM = re.compile(r"^( *)(?:[-*+]|\d+\.) ")
FENCE = re.compile(r"^ *(```|~~~)")
INCLUDED_BY = {"BENCHMARKS.md": "benchmarks.md"}
"""Each included root file, and the docs page that includes it."""


def rebase_links(text: str, page: str, docs_dir: str = "docs") -> str:
    """`text`'s relative links, written from the repository root, as seen from `page` (a path
    under `docs_dir`)."""

    def rebase(match: re.Match[str]) -> str:
        target = match.group(1)
        if re.match(r"^([a-z][a-z0-9+.-]*:|#|/)", target):
            return match.group(0)  # a URL, an anchor of this page, an absolute path
        path, _, anchor = target.partition("#")
        if path in INCLUDED_BY:
            path = INCLUDED_BY[path]
        elif path.startswith(f"{docs_dir}/"):
            path = path[len(docs_dir) + 1 :]
        else:
            return match.group(0)
        rel = posixpath.relpath(path, posixpath.dirname(page) or ".")
        return f"]({rel}{'#' + anchor if anchor else ''})"

    return LINK.sub(rebase, text)


def include(markdown: str, page: str) -> str:
    """`markdown` with each include line replaced by the root file it names, links rebased."""

    def read(match: re.Match[str]) -> str:
        name = match.group(1)
        path = (ROOT / name).resolve()
        if ROOT not in path.parents or not path.is_file():
            raise FileNotFoundError(f"{page}: --8<-- {name!r}: no such file in the repository")
        return rebase_links(path.read_text(encoding="utf-8"), page)

    return INCLUDE.sub(read, markdown)


def sane_lists(markdown: str) -> str:
    """`markdown`'s lists as Python-Markdown reads them: a blank line before each list that
    follows a paragraph, four spaces per nesting level. Fenced code is left as it is."""
    out: list[str] = []
    fence = ""
    levels: list[int] = []  # the written indents of the open list's levels, outermost first
    blank = True
    for line in markdown.split("\n"):
        opened = FENCE.match(line)
        if fence or opened:
            if opened and (not fence or opened.group(1) == fence):
                fence = "" if fence else opened.group(1)
            out.append(line)
            blank = False
            continue
        item = ITEM.match(line)
        indent = len(line) - len(line.lstrip(" "))
        if not line.strip():
            blank = True
        elif item and (levels or indent == 0):
            if not levels and not blank:
                out.append("")  # a list right after a paragraph line
            while levels and indent < levels[-1]:
                levels.pop()
            if not levels or indent > levels[-1]:
                levels.append(indent)
            line = " " * 4 * (len(levels) - 1) + line.lstrip(" ")
            blank = False
        else:
            if blank and indent == 0:
                levels = []  # a paragraph after a blank line ends the list
            blank = False
        out.append(line)
    return "\n".join(out)


def on_page_markdown(markdown: str, *, page: Any, config: Any, files: Any) -> str:
    return sane_lists(include(markdown, page.file.src_uri))
