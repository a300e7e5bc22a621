"""Strict answer extraction from model responses (pure functions, no math libraries).

Stricter than math-verify's own extraction on purpose: a training reward must not be earned by a
response that never committed to an answer. `last_boxed` never falls back to an earlier box or to
"the last number in the text"; `final_number` accepts only a bare integer after the last `=`.
"""

from __future__ import annotations

import re

# `\boxed` or `\fbox`, not followed by another letter (`\boxedx` is a different command).
_BOX_COMMAND = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
# `\boxed 5`: the command, whitespace, then one token (TeX's single-argument form).
_BOX_TOKEN = re.compile(r"\s+([^\s{}$\\]+)")
_INTEGER = re.compile(r"-?[0-9]+")


def _balanced_group(text: str, open_pos: int) -> str | None:
    """Content of the `{...}` group opening at `open_pos`, or None when it never closes.

    Escaped characters (`\\{`, `\\}`, `\\\\`) are skipped, so `\\boxed{\\{1, 2\\}}` reads whole.
    """
    depth = 0
    i = open_pos
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[open_pos + 1 : i]
        i += 1
    return None


def last_boxed(text: str) -> str | None:
    """Content of the LAST `\\boxed{...}` (or `\\fbox{...}`, or `\\boxed 5`) in `text`, stripped.

    Returns None when there is no box, or when the last one is unclosed (a response cut off inside
    its final box has no answer, even if an earlier box is closed). An empty box gives "".
    """
    starts = [m.end() for m in _BOX_COMMAND.finditer(text)]
    if not starts:
        return None
    pos = starts[-1]
    rest = text[pos:]
    stripped = rest.lstrip()
    if stripped.startswith("{"):
        content = _balanced_group(text, pos + len(rest) - len(stripped))
        return None if content is None else content.strip()
    token = _BOX_TOKEN.match(rest)
    if token is None:
        return None
    # A sentence may end right after the token: "\boxed 5." means 5.
    return token.group(1).rstrip(".,;:")


def final_number(text: str) -> str | None:
    """The integer answer of a synthetic arithmetic response, or None.

    The answer is the text after the last `=` (or the whole response when there is none), and it
    must be exactly an optional minus sign and ASCII digits: "12 3", "123." or "123abc" are None.
    """
    tail = text.strip().rpartition("=")[2].strip()
    return tail if _INTEGER.fullmatch(tail) else None
